# ctest driver: each benchmark with bad option values. -DPROGRAM=allreduce|compress|optim|core-latency -DEXE=... -DMPIEXEC=...
# -DWORK=... A row is "option|value|phrase": the one stderr line must name the option and the value as typed, and
# hold the phrase when there is one (what is accepted).
cmake_policy(SET CMP0007 NEW)  # rows keep their empty last field
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# Runs with stderr going to a file (as under a batch system, not a terminal) and checks the refusal: exit status 2,
# exactly one line of at most 200 characters holding every fragment, nothing of a crash, nothing on stdout.
function(expect_refused)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_FILE "${WORK}/stderr.txt")
  file(READ "${WORK}/stderr.txt" text)
  set(where "(${ARGN}: exit ${result}) stdout:\n${output}\nstderr:\n${text}")
  if(NOT "${result}" STREQUAL "2")
    message(FATAL_ERROR "expected exit status 2 ${where}")
  endif()
  string(REGEX MATCHALL "\n" newlines "${text}")
  list(LENGTH newlines n)
  string(LENGTH "${text}" length)
  if(NOT n EQUAL 1 OR NOT text MATCHES "\n$" OR length GREATER 201)
    message(FATAL_ERROR "expected one line of at most 200 characters on stderr ${where}")
  endif()
  if(text MATCHES "terminate called|what\\(\\)|Abort|signal|Segmentation")
    message(FATAL_ERROR "a crash instead of a message ${where}")
  endif()
  if(NOT "${output}" STREQUAL "")
    message(FATAL_ERROR "a refused run printed on stdout ${where}")
  endif()
  foreach(fragment IN LISTS fragments)
    string(FIND "${text}" "${fragment}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "stderr does not contain '${fragment}' ${where}")
    endif()
  endforeach()
endfunction()

# negative, zero, not a number, overflowing, not finite, out of range, not whole
set(overflow 99999999999999999999999)
if(PROGRAM STREQUAL "allreduce")
  set(rows "--ranks|-1|from 1 to 64" "--ranks|0|from 1 to 64" "--ranks|abc|is not a number" "--ranks|${overflow}|"
           "--ranks|65|from 1 to 64" "--ranks|inf|whole number" "--rounds|-3|from 1 to 1000" "--rounds|0|"
           "--rounds|x|is not a number" "--rounds|1.5|whole number" "--rounds|${overflow}|from 1 to 1000"
           "--min-bytes|-4096|whole number" "--min-bytes|0|from 4 to 17179869184" "--min-bytes|4k|is not a number"
           "--max-bytes|18446744073709551616|from 4 to 17179869184" "--max-bytes|1e30|whole number"
           "--min-sample-ms|-1|finite number from 0 to 1000" "--min-sample-ms|nan|finite number"
           "--min-sample-ms|inf|" "--min-sample-ms|1e999|" "--min-sample-ms|abc|is not a number"
           "--comm|tcp|mpi, local")
elseif(PROGRAM STREQUAL "compress")
  set(rows "--repeats|-1|from 1 to 1000" "--repeats|0|" "--repeats|abc|is not a number" "--repeats|${overflow}|"
           "--repeats|nan|whole number" "--repeats|2.5|whole number" "--bucket-mib|-1|finite number from 0 to 1024"
           "--bucket-mib|inf|" "--bucket-mib|nan|" "--bucket-mib|1e999|" "--bucket-mib|4096|" "--bucket-mib|x|is not a number"
           "--isa|bogus|is not one of portable, avx2, avx512" "--isa|AVX2|is not one of portable, avx2, avx512")
elseif(PROGRAM STREQUAL "optim")
  set(rows "--repeats|-1|from 1 to 1000" "--repeats|0|" "--repeats|abc|is not a number" "--repeats|${overflow}|"
           "--repeats|inf|whole number" "--threads|0|from 1 to 1024" "--threads|-2|" "--threads|two|is not a number"
           "--threads|${overflow}|from 1 to 1024" "--threads|1.5|whole number"
           "--isa|bogus|is not one of portable, avx2, avx512" "--isa|sse2|is not one of portable, avx2, avx512")
elseif(PROGRAM STREQUAL "core-latency")
  set(rows "--repeat|0|whole number >= 1" "--repeat|-2|" "--repeat|x|" "--repeat|1.5|" "--repeat|${overflow}|"
           "--every-ms|-1|whole number >= 0" "--every-ms|soon|" "--cpus|0|two CPUs as A,B" "--cpus|1,1|two different"
           "--cpus|0,x|two whole CPU numbers" "--cpus|0,99999|two whole CPU numbers below" "--cpus|0,1000|cannot run on both")
else()
  message(FATAL_ERROR "unknown PROGRAM '${PROGRAM}'")
endif()

foreach(row IN LISTS rows)
  string(REPLACE "|" ";" fields "${row}")
  list(GET fields 0 flag)
  list(GET fields 1 value)
  list(GET fields 2 phrase)
  set(fragments "hitch-bench-${PROGRAM}: " "${flag}" "${value}")
  if(NOT phrase STREQUAL "")
    list(APPEND fragments "${phrase}")
  endif()
  expect_refused(${EXE} ${flag} ${value})
endforeach()

if(PROGRAM STREQUAL "optim")
  # A list names the element refused.
  set(fragments "--threads" "got ${overflow}" "from 1 to 1024")
  expect_refused(${EXE} --threads 1,${overflow})
  set(fragments "--threads" "'' is not a number")
  expect_refused(${EXE} --threads 1,,2)
endif()

# An option without its value, and one the program does not know.
set(fragments "--repeats")
if(PROGRAM STREQUAL "allreduce")
  set(fragments "--rounds")
  expect_refused(${EXE} --rounds)
elseif(PROGRAM STREQUAL "core-latency")
  set(fragments "--repeat")
  expect_refused(${EXE} --repeat)
else()
  expect_refused(${EXE} --repeats)
endif()
set(fragments "--no-such-option")
expect_refused(${EXE} --no-such-option)

if(PROGRAM STREQUAL "compress" OR PROGRAM STREQUAL "optim")
  # A tier the processor lacks is refused, naming the widest it has. Which tiers this machine has is read from
  # /proc/cpuinfo (Linux); a tier it has would start the whole benchmark, so only missing ones are tried.
  set(cpu_flags "")
  if(EXISTS /proc/cpuinfo)
    file(STRINGS /proc/cpuinfo cpu_flags REGEX "^flags" LIMIT_COUNT 1)
  endif()
  if(cpu_flags MATCHES "^flags")
    set(has_avx2 TRUE)
    foreach(flag IN ITEMS avx2 f16c bmi2 popcnt)
      if(NOT cpu_flags MATCHES " ${flag}( |$)")
        set(has_avx2 FALSE)
      endif()
    endforeach()
    set(has_avx512 ${has_avx2})
    foreach(flag IN ITEMS avx512f avx512bw avx512vl avx512dq)
      if(NOT cpu_flags MATCHES " ${flag}( |$)")
        set(has_avx512 FALSE)
      endif()
    endforeach()
    foreach(tier IN ITEMS avx2 avx512)
      if(NOT has_${tier})
        set(fragments "hitch-bench-${PROGRAM}: " "--isa ${tier}" "cannot run the ${tier} kernels" "widest tier is")
        expect_refused(${EXE} --isa ${tier})
      endif()
    endforeach()
  endif()
endif()

if(PROGRAM STREQUAL "allreduce")
  # Both sides of a combination that cannot work are named.
  set(fragments "--min-bytes 1048576" "--max-bytes 4096")
  expect_refused(${EXE} --min-bytes 1048576 --max-bytes 4096)
  # Under mpiexec every rank finds the mistake, rank 0 alone prints it, and the line reaches a captured stderr.
  if(MPIEXEC)
    set(fragments "hitch-bench-allreduce: " "--rounds" "-3" "from 1 to 1000")
    expect_refused(${MPIEXEC} -n 2 ${EXE} --rounds -3)
    set(fragments "--min-sample-ms" "inf")
    expect_refused(${MPIEXEC} -n 2 ${EXE} --min-sample-ms inf)
  endif()
endif()
