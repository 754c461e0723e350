# CTest install_consumer: `cmake --install` the build into a fresh prefix, then configure,
# build and run examples/consumer against it (find_package(gradgraph), link
# gradgraph::gradgraph, include <gradgraph/gradgraph.h>) with only that prefix to find it.
# Also checks the umbrella header includes every installed header and no private header
# was installed.
# Inputs: GG_BUILD_DIR, GG_CONFIG, WORK_DIR, CONSUMER_DIR, GENERATOR, MAKE_PROGRAM, CXX, LAUNCHER,
# PRIVATE_HEADERS (GG_PRIVATE_HEADERS, comma-separated).
set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out
                  WORKING_DIRECTORY ${WORK_DIR})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${what} failed (${rc}):\n${out}")
  endif()
  message(STATUS "${what}: ok")
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

set(config_arg)
if(GG_CONFIG)
  set(config_arg --config ${GG_CONFIG})
endif()
run("install" ${CMAKE_COMMAND} --install ${GG_BUILD_DIR} --prefix ${prefix} ${config_arg})

# The installed header set: the umbrella names every one; kernel internals are absent.
file(GLOB_RECURSE installed RELATIVE ${prefix}/include/gradgraph ${prefix}/include/gradgraph/*.h)
file(READ ${prefix}/include/gradgraph/gradgraph.h umbrella)
foreach(h IN LISTS installed)
  if(NOT h STREQUAL "gradgraph.h" AND NOT umbrella MATCHES "#include \"${h}\"")
    message(FATAL_ERROR "install_consumer: installed header ${h} is not included by gradgraph.h")
  endif()
endforeach()
string(REPLACE "," ";" private "${PRIVATE_HEADERS}")
if(NOT private)
  message(FATAL_ERROR "install_consumer: no PRIVATE_HEADERS given")
endif()
foreach(h IN LISTS private)
  if(EXISTS ${prefix}/include/gradgraph/${h})
    message(FATAL_ERROR "install_consumer: private header ${h} was installed")
  endif()
endforeach()
foreach(f lib/cmake/gradgraph/gradgraphConfig.cmake lib/cmake/gradgraph/gradgraphConfigVersion.cmake
          share/gradgraph/data/tinyshakespeare.txt)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "install_consumer: ${f} was not installed")
  endif()
endforeach()

set(configure ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${build} -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release)
if(MAKE_PROGRAM)
  list(APPEND configure -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(LAUNCHER)
  list(APPEND configure -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
run("configure the consumer" ${configure})
run("build the consumer" ${CMAKE_COMMAND} --build ${build} --config Release)

find_program(consumer NAMES consumer PATHS ${build} ${build}/Release NO_DEFAULT_PATH NO_CACHE)
if(NOT consumer)
  message(FATAL_ERROR "install_consumer: no consumer executable in ${build}")
endif()
# From a directory with no data/ and without GRADGRAPH_DATA_DIR: the package tells the
# program where its data is.
unset(ENV{GRADGRAPH_DATA_DIR})
run("run the consumer" ${consumer})
message(STATUS "${run_output}")
