# hitch-bench-cuda-nccl: hitch's all-reduces over cuda::nccl (ring direct over NCCL, the other schedules staged,
# native, automatic) against ncclAllReduce itself, one rank per GPU on threads, or one per process under mpiexec
# with --mpi where hitch::mpi is found (bench/cuda_nccl.cu). Needs NCCL.
if(TARGET hitch::nccl)
  add_executable(hitch-bench-cuda-nccl "${CMAKE_CURRENT_LIST_DIR}/cuda_nccl.cu")
  target_link_libraries(hitch-bench-cuda-nccl PRIVATE hitch::nccl)
  if(TARGET hitch::mpi)
    target_link_libraries(hitch-bench-cuda-nccl PRIVATE hitch::mpi)
    target_compile_definitions(hitch-bench-cuda-nccl PRIVATE HITCH_BENCH_MPI=1)
  endif()
  hitch_target_warnings(hitch-bench-cuda-nccl)
else()
  message(STATUS "hitch-bench-cuda-nccl skipped: needs CUDA and NCCL")
endif()
