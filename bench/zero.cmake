# hitch-bench-zero: per-rank memory of the optimizer state and master weights, unsharded and under ZeRO 1 and 2.
add_executable(hitch-bench-zero "${CMAKE_CURRENT_LIST_DIR}/zero.cpp")
target_link_libraries(hitch-bench-zero PRIVATE hitch::hitch)
hitch_target_warnings(hitch-bench-zero)
