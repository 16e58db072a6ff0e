# Configures tests/fuzz/harness with clang++, builds the harnesses, writes seed corpora and runs every harness for
# SECONDS seconds. Run by ctest (hitch_test_readers_fuzz):
#   cmake -DSOURCE_DIR=<tests/fuzz/harness> -DBINARY_DIR=<dir> -DSECONDS=3 -P run_fuzzers.cmake
# Prints "SKIPPED: ..." (the test's skip expression) when no clang++ with libFuzzer is found.
if(NOT SECONDS)
  set(SECONDS 3)
endif()
find_program(CLANGXX NAMES clang++ clang++-18 clang++-17 clang++-16 clang++-15 clang++-14)
if(NOT CLANGXX)
  message("SKIPPED: no clang++ found to build the libFuzzer harnesses")
  return()
endif()

execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${BINARY_DIR}" -DCMAKE_CXX_COMPILER=${CLANGXX}
                        -DCMAKE_BUILD_TYPE=RelWithDebInfo
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the fuzz harnesses failed:\n${out}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BINARY_DIR}" -j 2
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the fuzz harnesses failed:\n${out}")
endif()

set(seeds "${BINARY_DIR}/seeds")
file(REMOVE_RECURSE "${seeds}")
execute_process(COMMAND "${BINARY_DIR}/make_seeds" "${seeds}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make_seeds failed:\n${out}")
endif()

# Each harness starts from its seeds and from the inputs kept in tests/fuzz/corpus/<harness>/ (ones that found a
# bug).
set(harnesses checkpoint optimizer_state codec_state sync_state agreement idx cifar)
foreach(harness IN LISTS harnesses)
  set(corpus "${BINARY_DIR}/corpus/${harness}")
  file(REMOVE_RECURSE "${corpus}")
  file(MAKE_DIRECTORY "${corpus}")
  file(GLOB seed_files "${seeds}/${harness}/*" "${SOURCE_DIR}/../corpus/${harness}/*")
  file(COPY ${seed_files} DESTINATION "${corpus}")
  execute_process(COMMAND "${BINARY_DIR}/fuzz_${harness}" -max_total_time=${SECONDS} -rss_limit_mb=2048
                          -max_len=20000 -print_final_stats=1 "${corpus}"
                  WORKING_DIRECTORY "${BINARY_DIR}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  string(REGEX MATCH "stat::number_of_executed_units: *[0-9]+" runs "${out}")
  if(NOT rc EQUAL 0)
    string(LENGTH "${out}" len)
    if(len GREATER 6000)
      math(EXPR start "${len} - 6000")
      string(SUBSTRING "${out}" ${start} 6000 out)
    endif()
    message(FATAL_ERROR "fuzz_${harness} found a problem (exit ${rc}):\n${out}")
  endif()
  message("fuzz_${harness}: ${SECONDS} s, ${runs}, no finding")
endforeach()
