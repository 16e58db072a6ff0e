# hitch-bench-core-latency: the cache-line round trip between two cores and a model of the staged path's pipe
# between them, copies through the cache and streamed: which placement of the ranks a benchmark run met.
add_executable(hitch-bench-core-latency "${CMAKE_CURRENT_LIST_DIR}/core_latency.cpp")
target_link_libraries(hitch-bench-core-latency PRIVATE hitch::hitch Threads::Threads)
hitch_target_warnings(hitch-bench-core-latency)
