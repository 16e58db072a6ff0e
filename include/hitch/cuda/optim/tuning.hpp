#pragma once
// Launch shapes of the optimizer kernels (hitch/cuda/optim/detail/kernels.cuh), apart from the kernels. Each says
// why it was chosen; none has been tuned by measurement yet: bench/cuda_optim.cu prints the figures that would.

#include "hitch/cuda/optim/math.hpp"

namespace hitch::cuda::optim::detail {

/// Threads of a block of the element-wise kernels: a block takes one chunk of 4096 elements, 16 per thread, as four
/// 16-byte loads of each buffer (enough bytes in flight per SM at 8 resident blocks for HBM3's latency).
inline constexpr unsigned elementwise_threads = 256;

/// Chunks (norm blocks) per block of the sums-of-squares kernels; each chunk takes norm_lanes (16) threads, one per
/// lane of the defined order, so a block has norm_groups * 16 threads.
inline constexpr unsigned norm_groups = 16;
inline constexpr unsigned norm_threads = norm_groups * static_cast<unsigned>(norm_lanes);

/// Threads of a block of the per-layer finish (one thread adds one layer's block sums in order).
inline constexpr unsigned finish_threads = 128;

}  // namespace hitch::cuda::optim::detail
