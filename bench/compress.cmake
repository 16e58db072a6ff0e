# hitch-bench-compress: encode/decode throughput of every codec on ResNet-50's gradients against a memory read pass.
# Built with the project's default flags: the codecs pick their AVX2 kernels at run time, as in a user's build.
add_executable(hitch-bench-compress "${CMAKE_CURRENT_LIST_DIR}/compress.cpp")
target_link_libraries(hitch-bench-compress PRIVATE hitch::hitch)
hitch_target_warnings(hitch-bench-compress)
