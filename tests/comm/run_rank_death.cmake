# Rank death, five ways at three moments, over comm::mpi (tests/comm/rank_death.cpp): -DPROGRAM=... -DMPIEXEC=...
# -DWORK=... -DDEADLINE=seconds. Run with -disable-auto-cleanup, as launchers that leave the survivors running
# (Slurm's srun without --kill-on-bad-exit) do: every job must end non-zero within twice the deadline (plus the
# start-up of 3 processes), and where the survivors outlive rank 2 each names it. MPICH's launcher ends the job
# itself when a rank dies of a signal (it reports the signal), before any survivor's deadline; then the launcher's
# report is what names the death.
cmake_policy(SET CMP0007 NEW)
set(failures "")
foreach(way IN ITEMS exit0 exit1 abort kill term)
  foreach(moment IN ITEMS idle allreduce save)
    file(REMOVE_RECURSE "${WORK}/${way}-${moment}")
    file(MAKE_DIRECTORY "${WORK}/${way}-${moment}")
    string(TIMESTAMP start "%s")
    execute_process(COMMAND ${CMAKE_COMMAND} -E env HITCH_TIMEOUT_S=${DEADLINE}
                            ${MPIEXEC} -disable-auto-cleanup -n 3 ${PROGRAM} ${way} ${moment} ${WORK}/${way}-${moment}
                    RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
    string(TIMESTAMP end "%s")
    math(EXPR took "${end} - ${start}")
    math(EXPR limit "2 * ${DEADLINE} + 3")
    set(text "${out}${err}")
    set(case "${way} at ${moment} (exit ${status}, ${took} s)")
    message(STATUS "${case}")
    # Under -disable-auto-cleanup MPICH 4.0's launcher sometimes reports the status of the first process to end:
    # 0 when rank 2 ended with _Exit(0). The survivors' own status is then shown by the watchdog's line (it ends
    # a process with status 1): both must have printed it.
    string(REGEX MATCHALL "MPI_Finalize did not return within" ended "${text}")
    list(LENGTH ended ended)
    if(NOT status MATCHES "^[0-9]+$" OR (status EQUAL 0 AND NOT (way STREQUAL "exit0" AND ended EQUAL 2)))
      string(APPEND failures "${case}: the job did not end with a non-zero status\n${text}\n")
    endif()
    if(took GREATER limit)
      string(APPEND failures "${case}: took more than ${limit} s\n${text}\n")
    endif()
    foreach(rank IN ITEMS 0 1)
      string(REGEX MATCH "rank ${rank}: [^\n]*" said "${text}")
      if(said STREQUAL "")
        # No word from this survivor: only acceptable when the launcher ended the job for a signal death.
        # (With -disable-auto-cleanup, MPICH 4.0's launcher sometimes ends in its own assertion instead of its
        # report; the job still ends at once, non-zero.)
        if(NOT text MATCHES "BAD TERMINATION|EXIT STRING|signal|Killed|Aborted|Terminated|HYDU_sock_write")
          string(APPEND failures "${case}: rank ${rank} said nothing and the launcher reported no death\n${text}\n")
        endif()
      elseif(NOT said MATCHES "(rank |, |and )2 did not arrive|from rank 2|to rank 2")
        # (Rank 2 may be named with the other survivor, when that one had finished the call and gone on.)
        string(APPEND failures "${case}: rank ${rank} does not name rank 2: ${said}\n")
      endif()
    endforeach()
    if(way MATCHES "exit" AND NOT text MATCHES "hitch: MPI_Finalize did not return within")
      string(APPEND failures "${case}: the survivors' MPI_Finalize did not end through the watchdog\n${text}\n")
    endif()
  endforeach()
endforeach()
if(NOT failures STREQUAL "")
  message(FATAL_ERROR "${failures}")
endif()
