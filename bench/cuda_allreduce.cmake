# hitch-bench-cuda-allreduce: hitch's schedules on GPU buffers (staged through pinned memory, or direct over a
# CUDA-aware MPI) against the same schedules on host buffers and MPI_Allreduce. Needs CUDA and MPI.
if(TARGET hitch::cuda AND TARGET hitch::mpi)
  add_executable(hitch-bench-cuda-allreduce "${CMAKE_CURRENT_LIST_DIR}/cuda_allreduce.cu")
  target_link_libraries(hitch-bench-cuda-allreduce PRIVATE hitch::cuda hitch::mpi)
  hitch_target_warnings(hitch-bench-cuda-allreduce)
else()
  message(STATUS "hitch-bench-cuda-allreduce skipped: needs CUDA and MPI")
endif()
