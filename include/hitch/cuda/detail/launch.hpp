#pragma once
// Launch geometry of hitch's CUDA kernels, as plain host code (no CUDA header), so the host tests check it on a
// machine without a GPU: grid-stride loops over n elements, a grid capped so that a launch never exceeds the
// hardware's limits, and an even cut of many tensors into blocks for the fused multi-tensor kernels.

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace hitch::cuda::detail {

/// Threads per block of the element-wise kernels.
inline constexpr unsigned block_threads = 256;
/// Blocks at most per launch of a grid-stride kernel: enough to fill any current GPU many times over (132 SMs x 16
/// resident blocks on an H100), small enough that the per-block bookkeeping stays negligible.
inline constexpr unsigned max_grid_blocks = 8192;

/// Blocks for a grid-stride loop over n elements with `threads` per block, `per_thread` elements a thread per
/// stride: at least 1 (a launch of zero blocks is an error), at most max_grid_blocks.
[[nodiscard]] constexpr unsigned grid_blocks(std::size_t n, unsigned threads = block_threads,
                                             unsigned per_thread = 1) noexcept {
    const std::size_t per_block = static_cast<std::size_t>(threads) * per_thread;
    const std::size_t wanted = (n + per_block - 1) / per_block;
    return static_cast<unsigned>(std::clamp<std::size_t>(wanted, 1, max_grid_blocks));
}

}  // namespace hitch::cuda::detail
