# Runs a set of libFuzzer harnesses for the test suite: configures SOURCE_DIR with clang++, builds it, writes seed
# corpora with its make_seeds program and runs every harness for SECONDS seconds from its seeds (and from the inputs
# kept in KEPT/<name>/, ones that once found a bug). Run by ctest (hitch_test_compress_fuzz, hitch_test_readers_fuzz):
#   cmake -DSOURCE_DIR=<dir> -DBINARY_DIR=<dir> -DSECONDS=3 -DHARNESSES=a,b [-DSEED_DIRS=0,1] [-DKEPT=<dir>]
#         -P HitchRunFuzzers.cmake
# Harness h is the program fuzz_<h>; its seeds are in <seeds>/<SEED_DIRS[i]> (default: <seeds>/<h>). Prints
# "SKIPPED: ..." (the tests' skip expression) when no clang++ with libFuzzer is found.
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

string(REPLACE "," ";" HARNESSES "${HARNESSES}")
string(REPLACE "," ";" SEED_DIRS "${SEED_DIRS}")
if(NOT SEED_DIRS)
  set(SEED_DIRS ${HARNESSES})
endif()
set(index 0)
foreach(harness IN LISTS HARNESSES)
  list(GET SEED_DIRS ${index} seed_dir)
  math(EXPR index "${index} + 1")
  set(corpus "${BINARY_DIR}/corpus/${harness}")
  file(REMOVE_RECURSE "${corpus}")
  file(MAKE_DIRECTORY "${corpus}")
  file(GLOB seed_files "${seeds}/${seed_dir}/*")
  if(KEPT)
    file(GLOB kept_files "${KEPT}/${harness}/*")
    list(APPEND seed_files ${kept_files})
  endif()
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
