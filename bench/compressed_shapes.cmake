# hitch-bench-compressed-shapes: the compressed ring, halving-doubling and hierarchical exchanges on a simulated
# cluster (comm::simulated): virtual time and bytes per rank on one switch and on nodes of 4 ranks.
add_executable(hitch-bench-compressed-shapes "${CMAKE_CURRENT_LIST_DIR}/compressed_shapes.cpp")
target_link_libraries(hitch-bench-compressed-shapes PRIVATE hitch::hitch)
hitch_target_warnings(hitch-bench-compressed-shapes)
