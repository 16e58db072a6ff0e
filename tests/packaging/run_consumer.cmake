# ctest driver: builds and runs tests/packaging/consumer in one mode.
#   -DMODE=package|subdirectory|fetchcontent -DHITCH_SOURCE_DIR=... -DHITCH_BINARY_DIR=... -DWORK_DIR=...
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${what} failed (${result}):\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok\n${out}")
endfunction()

set(configure_args -S "${HITCH_SOURCE_DIR}/tests/packaging/consumer" -B "${WORK_DIR}/build"
    -DHITCH_CONSUMER_MODE=${MODE} -DHITCH_SOURCE_DIR=${HITCH_SOURCE_DIR} -DCMAKE_BUILD_TYPE=Release)
if(MODE STREQUAL "package")
  run_step("install hitch" ${CMAKE_COMMAND} --install "${HITCH_BINARY_DIR}" --prefix "${WORK_DIR}/prefix")
  if(NOT EXISTS "${WORK_DIR}/prefix/lib/cmake/hitch/hitchConfigVersion.cmake")
    message(FATAL_ERROR "the install has no version file")
  endif()
  list(APPEND configure_args -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
endif()
run_step("configure consumer (${MODE})" ${CMAKE_COMMAND} ${configure_args})
run_step("build consumer (${MODE})" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run_step("run consumer (${MODE})" "${WORK_DIR}/build/consumer")

if(MODE STREQUAL "package")
  # The integrator's example (examples/integrate), copied out of the tree and built against the installation alone:
  # it trains over threads and over 2 MPI processes, and both must end with the same parameters.
  file(COPY "${HITCH_SOURCE_DIR}/examples/integrate" DESTINATION "${WORK_DIR}")
  run_step("configure examples/integrate" ${CMAKE_COMMAND} -S "${WORK_DIR}/integrate" -B "${WORK_DIR}/integrate/build"
           -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
  run_step("build examples/integrate" ${CMAKE_COMMAND} --build "${WORK_DIR}/integrate/build")
  set(integrate "${WORK_DIR}/integrate/build/hitch-integrate")
  execute_process(COMMAND "${integrate}" RESULT_VARIABLE result OUTPUT_VARIABLE threads ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "examples/integrate over threads failed (${result}):\n${threads}\n${err}")
  endif()
  if(MPIEXEC)
    execute_process(COMMAND "${MPIEXEC}" -n 2 "${integrate}" --mpi RESULT_VARIABLE result OUTPUT_VARIABLE mpi
                    ERROR_VARIABLE err)
    if(NOT result EQUAL 0)
      message(FATAL_ERROR "examples/integrate over MPI failed (${result}):\n${mpi}\n${err}")
    endif()
    string(REGEX MATCH "parameters hash [0-9a-f]+" threads_hash "${threads}")
    string(REGEX MATCH "parameters hash [0-9a-f]+" mpi_hash "${mpi}")
    if(threads_hash STREQUAL "" OR NOT threads_hash STREQUAL mpi_hash)
      message(FATAL_ERROR "examples/integrate: threads and MPI differ ('${threads_hash}' vs '${mpi_hash}')")
    endif()
    message(STATUS "examples/integrate: threads and MPI agree (${threads_hash})")
  endif()
  # A component the installation does not have must fail find_package with a clear message.
  file(WRITE "${WORK_DIR}/missing/CMakeLists.txt"
       "cmake_minimum_required(VERSION 3.25)\nproject(m CXX)\nfind_package(hitch CONFIG REQUIRED COMPONENTS no_such_component)\n")
  execute_process(COMMAND ${CMAKE_COMMAND} -S "${WORK_DIR}/missing" -B "${WORK_DIR}/missing/build"
                          -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
                  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(result EQUAL 0 OR NOT err MATCHES "no_such_component")
    message(FATAL_ERROR "find_package with an unknown component did not fail clearly:\n${out}\n${err}")
  endif()
  # A version the installation cannot satisfy must be refused.
  file(WRITE "${WORK_DIR}/version/CMakeLists.txt"
       "cmake_minimum_required(VERSION 3.25)\nproject(v CXX)\nfind_package(hitch 99.0 CONFIG REQUIRED)\n")
  execute_process(COMMAND ${CMAKE_COMMAND} -S "${WORK_DIR}/version" -B "${WORK_DIR}/version/build"
                          -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
                  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(result EQUAL 0)
    message(FATAL_ERROR "find_package(hitch 99.0) succeeded against version ${out}")
  endif()
endif()
