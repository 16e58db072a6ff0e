# hitch-simulate: hitch's all-reduce schedules on a simulated cluster (comm::simulated) at p = 2 ... 1,024, against
# their alpha-beta models. Needs CLI11 only.
find_package(CLI11 CONFIG QUIET)
if(TARGET CLI11::CLI11)
  add_executable(hitch-simulate "${CMAKE_CURRENT_LIST_DIR}/simulate.cpp")
  target_link_libraries(hitch-simulate PRIVATE hitch::hitch CLI11::CLI11)
  hitch_target_warnings(hitch-simulate)
else()
  message(STATUS "hitch-simulate skipped: needs CLI11")
endif()
