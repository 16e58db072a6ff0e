# hitch-bench-rerank-sim: automatic's online ranking driven by simulated calls (no communicator), under a load that
# comes and goes: how close the calls it plans come to the fastest candidate's, over many seeds.
add_executable(hitch-bench-rerank-sim "${CMAKE_CURRENT_LIST_DIR}/rerank_sim.cpp")
target_link_libraries(hitch-bench-rerank-sim PRIVATE hitch::hitch)
hitch_target_warnings(hitch-bench-rerank-sim)
