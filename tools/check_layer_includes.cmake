# CTest layer_includes: no program and no other layer includes a layer's private header.
# Reads every #include "..." (and <gradgraph/...>) in the library layers and the programs,
# resolves it as the compiler does (the including file's folder, then the source root) and
# fails, naming file, line and header, on any of:
#  - a library file of one layer including a private header of another layer;
#  - an installed (public) header including any private header: a consumer could not build;
#  - a program (cli/, examples/ with examples/consumer, bench/) including a private header.
#    The one exception: bench/ may include the private headers of ops/, because its
#    microbenchmarks time the kernels themselves (GEMM, masked attention, the thread pool).
# tests/ and fuzz/ test private parts directly and are not checked. Every header named in
# GG_PRIVATE_HEADERS must exist, so a moved header cannot silently become installed.
# Inputs: SOURCE_DIR, LAYERS and PRIVATE_HEADERS (comma-separated). With SELF_TEST=ON and
# WORK_DIR, it instead builds a small tree with known violations and checks it finds them.
cmake_minimum_required(VERSION 3.21)

# The private header (source-relative) that line `inc` of `file` includes, or "".
function(gg_private_include root file inc private out)
  set(${out} "" PARENT_SCOPE)
  if(inc MATCHES "^<gradgraph/(.*)>$")
    set(candidates ${root}/${CMAKE_MATCH_1})
  elseif(inc MATCHES "^\"(.*)\"$")
    get_filename_component(dir ${file} DIRECTORY)
    set(candidates ${dir}/${CMAKE_MATCH_1} ${root}/${CMAKE_MATCH_1})
  else()
    return()
  endif()
  foreach(c IN LISTS candidates)
    cmake_path(NORMAL_PATH c)
    if(EXISTS ${c})
      cmake_path(RELATIVE_PATH c BASE_DIRECTORY ${root} OUTPUT_VARIABLE rel)
      if(rel IN_LIST private)
        set(${out} ${rel} PARENT_SCOPE)
      endif()
      return()
    endif()
  endforeach()
endfunction()

# Sets `out` to the violations found under `root`, one "file:line: message" each.
function(gg_check_includes root layers private out)
  set(found "")
  foreach(h IN LISTS private)
    if(NOT EXISTS ${root}/${h})
      list(APPEND found "CMakeLists.txt: GG_PRIVATE_HEADERS names ${h}, which does not exist")
    endif()
  endforeach()
  set(globs "")
  foreach(dir IN LISTS layers ITEMS cli examples bench)
    list(APPEND globs ${root}/${dir}/*.h ${root}/${dir}/*.cpp ${root}/${dir}/*.inc ${root}/${dir}/*.def)
  endforeach()
  file(GLOB_RECURSE files ${globs})
  foreach(file IN LISTS files)
    cmake_path(RELATIVE_PATH file BASE_DIRECTORY ${root} OUTPUT_VARIABLE rel)
    string(REGEX MATCH "^[^/]+" top ${rel})
    file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]")
    file(READ ${file} text)
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*([\"<][^\">]*[\">]).*$" "\\1" inc "${line}")
      gg_private_include(${root} ${file} "${inc}" "${private}" header)
      if(NOT header)
        continue()
      endif()
      string(REGEX MATCH "^[^/]+" owner ${header})
      set(why "")
      if(top IN_LIST layers)
        if(NOT owner STREQUAL top)
          set(why "includes ${header}, private to ${owner}/")
        elseif(rel MATCHES "\\.h$" AND NOT rel IN_LIST private)
          set(why "an installed header includes the private ${header}")
        endif()
      elseif(top STREQUAL "bench" AND owner STREQUAL "ops")
        # The stated exception: microbenchmarks of ops' kernels.
      else()
        set(why "a program includes the private ${header}")
      endif()
      if(why)
        string(FIND "${text}" "${line}" at)
        string(SUBSTRING "${text}" 0 ${at} before)
        string(REGEX MATCHALL "\n" newlines "${before}")
        list(LENGTH newlines n)
        math(EXPR n "${n} + 1")
        list(APPEND found "${rel}:${n}: ${why}")
      endif()
    endforeach()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

if(SELF_TEST)
  # A tree with each kind of violation once, and one allowed include of each kind.
  set(t ${WORK_DIR})
  file(REMOVE_RECURSE ${t})
  file(WRITE ${t}/ops/pool.h "// private\n")
  file(WRITE ${t}/ops/graph.h "#include \"pool.h\"\n")                       # installed: wrong
  file(WRITE ${t}/ops/run.cpp "#include \"ops/pool.h\"\n")                   # own layer: fine
  file(WRITE ${t}/train/optim.cpp "#include <vector>\n#include \"../ops/pool.h\"\n")  # wrong
  file(WRITE ${t}/cli/main.cpp "#include \"ops/graph.h\"\n #  include <gradgraph/ops/pool.h>\n")  # wrong
  file(WRITE ${t}/bench/bench_pool.cpp "#include \"ops/pool.h\"\n")          # the exception
  gg_check_includes(${t} "ops;train" "ops/pool.h;ops/gone.h" found)
  set(expected
      "CMakeLists.txt: GG_PRIVATE_HEADERS names ops/gone.h, which does not exist"
      "cli/main.cpp:2: a program includes the private ops/pool.h"
      "ops/graph.h:1: an installed header includes the private ops/pool.h"
      "train/optim.cpp:2: includes ops/pool.h, private to ops/")
  list(SORT found)
  if(NOT found STREQUAL expected)
    list(JOIN found "\n  " got)
    message(FATAL_ERROR "layer_includes self-test: found\n  ${got}")
  endif()
  message(STATUS "layer_includes self-test: the 4 planted violations found, nothing else")
  return()
endif()

string(REPLACE "," ";" layers "${LAYERS}")
string(REPLACE "," ";" private "${PRIVATE_HEADERS}")
gg_check_includes(${SOURCE_DIR} "${layers}" "${private}" found)
if(found)
  list(LENGTH found count)
  list(JOIN found "\n" text)
  message(FATAL_ERROR "layer_includes: ${count} include(s) of a private header across layers:\n${text}")
endif()
message(STATUS "layer_includes: no program or other layer includes a private header")
