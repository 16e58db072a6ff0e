#pragma once
// Checks after a kernel launch, and the grid-stride index. nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/detail/launch.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <string_view>

#include "hitch/cuda/detail/launch.hpp"
#include "hitch/cuda/device.hpp"

namespace hitch::cuda::detail {

/// Throws cuda_error naming the kernel when its launch failed (bad geometry, no kernel image for this GPU).
inline void check_launch(std::string_view kernel) { check(cudaGetLastError(), kernel); }

/// The first element of this thread in a grid-stride loop, and the stride.
__device__ __forceinline__ std::size_t grid_index() noexcept {
    return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t grid_stride() noexcept {
    return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

}  // namespace hitch::cuda::detail
