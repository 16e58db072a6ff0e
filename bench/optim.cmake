# hitch-bench-optim: one step of each optimizer on a ResNet-50-sized model against a memory-bandwidth pass.
add_executable(hitch-bench-optim "${CMAKE_CURRENT_LIST_DIR}/optim.cpp")
target_link_libraries(hitch-bench-optim PRIVATE hitch::hitch)
hitch_target_warnings(hitch-bench-optim)
# The kernels vectorise at the default flags; -march=native lets them use the machine's widest vectors. FMA
# contraction stays off inside the optimizer kernels (hitch/optim/detail/strict_fp.hpp), so the bits are the
# reference bits either way.
include(CheckCXXCompilerFlag)
check_cxx_compiler_flag(-march=native HITCH_BENCH_HAS_MARCH_NATIVE)
if(HITCH_BENCH_HAS_MARCH_NATIVE)
  target_compile_options(hitch-bench-optim PRIVATE -O3 -march=native)
endif()
