# hitch-bench-exchange: the compressed exchanges (ring all-gather, sparse recursive doubling, sparse hierarchical,
# the compressed ring and halving-doubling) on the examples' MLP and CNN gradients of Fashion-MNIST, over threads and
# a simulated cluster, with the measured overlap of the ranks' top-k selections. Needs CLI11 and the examples'
# toolkit (xtensor, a CBLAS, zlib).
find_package(CLI11 CONFIG QUIET)
include("${PROJECT_SOURCE_DIR}/examples/nn/toolkit.cmake")
if(TARGET CLI11::CLI11 AND TARGET hitch_examples::data)
  add_executable(hitch-bench-exchange "${CMAKE_CURRENT_LIST_DIR}/exchange.cpp")
  target_include_directories(hitch-bench-exchange PRIVATE "${PROJECT_SOURCE_DIR}/examples")
  target_link_libraries(hitch-bench-exchange PRIVATE hitch::hitch hitch_examples::data CLI11::CLI11)
  hitch_target_warnings(hitch-bench-exchange)
else()
  message(STATUS "hitch-bench-exchange skipped: needs CLI11 and the examples' toolkit")
endif()
