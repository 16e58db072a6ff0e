# Helpers for hitch's own tests, examples and benchmarks (not installed).
#
# hitch_add_test(NAME SOURCES s.cpp... [LIBRARIES ...] [LABELS ...] [RANKS 2 3] [TIMEOUT s] [CUDA])
#   Builds one Catch2 executable. Without RANKS it is one test; with RANKS it runs under mpiexec once per rank
#   count (test name NAME.npN, label mpi). CUDA tests skip (CTest skip code 77) when no GPU is present; with RANKS
#   too, every rank skips unless every rank has one (tests/cuda_mpi_main.cpp), and mpiexec returns 77.

set(HITCH_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion)

function(hitch_target_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${HITCH_WARNINGS}>)
endfunction()

function(hitch_add_test name)
  cmake_parse_arguments(T "CUDA" "TIMEOUT" "SOURCES;LIBRARIES;LABELS;RANKS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  add_executable(${name} ${T_SOURCES})
  hitch_target_warnings(${name})
  if(HITCH_TEST_PCH AND NOT T_CUDA)
    target_precompile_headers(${name} REUSE_FROM hitch_test_pch)
  endif()
  if(T_CUDA AND T_RANKS)
    target_link_libraries(${name} PRIVATE hitch_test_main_cuda_mpi ${T_LIBRARIES})
  elseif(T_CUDA)
    target_link_libraries(${name} PRIVATE hitch_test_main_cuda ${T_LIBRARIES})
  elseif(T_RANKS)
    target_link_libraries(${name} PRIVATE hitch_test_main_mpi ${T_LIBRARIES})
  else()
    target_link_libraries(${name} PRIVATE hitch_test_main ${T_LIBRARIES})
  endif()
  set(environment "HITCH_TIMEOUT_S=60")
  if(T_RANKS)
    foreach(n IN LISTS T_RANKS)
      add_test(NAME ${name}.np${n}
               COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS}
                       $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS})
      set_tests_properties(${name}.np${n} PROPERTIES LABELS "mpi;${T_LABELS}" TIMEOUT ${T_TIMEOUT}
                           PROCESSORS ${n} ENVIRONMENT "${environment}")
      if(T_CUDA)
        set_tests_properties(${name}.np${n} PROPERTIES SKIP_RETURN_CODE 77)
      endif()
    endforeach()
  else()
    add_test(NAME ${name} COMMAND ${name})
    set(labels ${T_LABELS})
    if(NOT labels)
      set(labels unit)
    endif()
    set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${environment}")
    if(T_CUDA)
      set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)
    endif()
  endif()
endfunction()

# Adds every immediate subdirectory of the current source directory that has a CMakeLists.txt.
function(hitch_add_subdirectories)
  file(GLOB children RELATIVE "${CMAKE_CURRENT_SOURCE_DIR}" "${CMAKE_CURRENT_SOURCE_DIR}/*")
  list(SORT children)
  foreach(child IN LISTS children)
    if(IS_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}/${child}" AND EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/${child}/CMakeLists.txt")
      add_subdirectory(${child})
    endif()
  endforeach()
endfunction()
