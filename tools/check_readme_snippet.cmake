# CTest: the README's C++ snippet must be examples/xor_mlp.cpp, character for character,
# so the snippet always compiles and runs (CTest runs the example itself).
file(READ ${README} readme)
file(READ ${EXAMPLE} example)
string(FIND "${readme}" "```cpp\n${example}```" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md: the snippet under 'The smallest training loop' differs from ${EXAMPLE}; paste the file again")
endif()
