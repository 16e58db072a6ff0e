# hitch-bench-optim: one step of each optimizer on a ResNet-50-sized model against a memory-bandwidth pass.
# Built with the project's default flags, as in a user's build: the optimizer kernels pick their AVX2 or AVX-512
# build at run time (hitch/optim/detail/tiers.hpp), and --isa pins one. (With -march=native every tier would be
# compiled for the machine's widest vectors, and --isa could not measure the narrower ones.)
add_executable(hitch-bench-optim "${CMAKE_CURRENT_LIST_DIR}/optim.cpp")
target_link_libraries(hitch-bench-optim PRIVATE hitch::hitch)
hitch_target_warnings(hitch-bench-optim)
