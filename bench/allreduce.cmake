# hitch-bench-allreduce: hitch's all-reduce schedules against MPICH's MPI_Allreduce, Gloo over TCP loopback and a
# bound (point-to-point for comm::mpi, memory bandwidth for comm::local). Needs MPI, Gloo and CLI11.
find_package(Gloo CONFIG QUIET HINTS /usr/share/cmake/Gloo)
find_package(CLI11 CONFIG QUIET)
if(TARGET hitch::mpi AND TARGET gloo AND TARGET CLI11::CLI11)
  add_executable(hitch-bench-allreduce "${CMAKE_CURRENT_LIST_DIR}/allreduce.cpp")
  target_link_libraries(hitch-bench-allreduce PRIVATE hitch::mpi gloo CLI11::CLI11)
  hitch_target_warnings(hitch-bench-allreduce)
else()
  message(STATUS "hitch-bench-allreduce skipped: needs MPI, Gloo (libgloo-dev) and CLI11")
endif()
