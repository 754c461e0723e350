# CTest subproject_consumer: configure (no build) a parent project that pulls gradgraph in
# with add_subdirectory and sets no build type. The parent's CMAKE_BUILD_TYPE must stay
# empty, gradgraph's tests, examples, benchmarks and CLI must not be defined, and the
# library targets must be there.
# Inputs: GG_SOURCE_DIR, WORK_DIR, GENERATOR, MAKE_PROGRAM, CXX.
file(REMOVE_RECURSE ${WORK_DIR})
file(WRITE ${WORK_DIR}/src/CMakeLists.txt "
cmake_minimum_required(VERSION 3.21)
project(parent LANGUAGES CXX)
add_subdirectory(\"${GG_SOURCE_DIR}\" gradgraph)
foreach(t test_ops test_train ops_scalar gradgraph xor_mlp bench_gemm)
  if(TARGET \${t})
    message(FATAL_ERROR \"gradgraph as a subproject defined its program \${t}\")
  endif()
endforeach()
foreach(t gradgraph::gradgraph gradgraph::ops gradgraph::train)
  if(NOT TARGET \${t})
    message(FATAL_ERROR \"gradgraph as a subproject did not define \${t}\")
  endif()
endforeach()
if(CMAKE_BUILD_TYPE)
  message(FATAL_ERROR \"gradgraph set the parent's CMAKE_BUILD_TYPE to '\${CMAKE_BUILD_TYPE}'\")
endif()
")
set(configure ${CMAKE_COMMAND} -S ${WORK_DIR}/src -B ${WORK_DIR}/build -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX})
if(MAKE_PROGRAM)
  list(APPEND configure -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
execute_process(COMMAND ${configure} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "subproject_consumer: configuring the parent failed (${rc}):\n${out}")
endif()

# The cache, too: an empty CMAKE_BUILD_TYPE entry, not a forced Release.
file(STRINGS ${WORK_DIR}/build/CMakeCache.txt type REGEX "^CMAKE_BUILD_TYPE:")
if(type AND NOT type MATCHES "^CMAKE_BUILD_TYPE:[A-Z]*=$")
  message(FATAL_ERROR "subproject_consumer: the parent's cache has '${type}', expected an empty build type")
endif()
message(STATUS "subproject_consumer: parent configured, build type left empty, no gradgraph programs")
