# A snippet of tests/dsl/typed_fail/ must compile as written and must not compile with
# -DGG_TYPED_FAIL, the compiler's first "error:" line containing the text after
# "// expect: " in the snippet. Run by CTest with CXX, FLAGS (space-separated), INCLUDE, SNIPPET.
separate_arguments(FLAGS UNIX_COMMAND "${FLAGS}")
file(STRINGS ${SNIPPET} expect_line REGEX "^// expect: ")
if(NOT expect_line)
  message(FATAL_ERROR "${SNIPPET}: no '// expect: ' line")
endif()
string(REGEX REPLACE "^// expect: " "" expect "${expect_line}")

execute_process(COMMAND ${CXX} ${FLAGS} -I${INCLUDE} -fsyntax-only ${SNIPPET}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${SNIPPET} should compile without GG_TYPED_FAIL:\n${out}")
endif()

execute_process(COMMAND ${CXX} ${FLAGS} -I${INCLUDE} -fsyntax-only -DGG_TYPED_FAIL ${SNIPPET}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SNIPPET} compiled with GG_TYPED_FAIL; expected the error '${expect}'")
endif()
string(REGEX MATCH "[^\n]*error:[^\n]*" first_error "${out}")
string(FIND "${first_error}" "${expect}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${SNIPPET}: the first error does not say '${expect}':\n${first_error}\n\nfull output:\n${out}")
endif()
message(STATUS "first error, as expected: ${first_error}")
