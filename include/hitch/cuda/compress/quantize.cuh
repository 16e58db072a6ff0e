#pragma once
// The group reductions of qsgd and terngrad on the GPU, in the host's order (quantize.hpp): one warp per reduction
// block, lane j summing the block's elements j, j + 32, ... in float as the host's lane j does, the lanes folded into
// double by warp shuffles along the host's tree (j + 16, then j + 8, 4, 2, 1); then one thread per group adds its
// blocks in order. nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/quantize.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cstddef>
#include <cstdint>

#include "hitch/cuda/compress/quantize.hpp"
#include "hitch/cuda/detail/launch.cuh"

namespace hitch::cuda::compress::detail {

/// partials[b] = the reductions of block b of v = g (+ r): one warp per block (grid-stride over blocks).
template <bool EF, bool Squares, bool Sum, bool Max>
__global__ void moments_kernel(const float* g, const float* r, moment_plan plan, moments* partials) {
    const unsigned lane = threadIdx.x % 32;
    const std::size_t warps = static_cast<std::size_t>(gridDim.x) * (blockDim.x / 32);
    for (std::size_t b = cuda::detail::grid_index() / 32; b < plan.blocks; b += warps) {
        const std::size_t start = plan.start_of(b), len = plan.length_of(b);
        moment_lane l;
        for (std::size_t i = lane; i < len; i += moment_lanes)
            moment_add<EF, Squares, Sum, Max>(l, g[start + i], EF ? r[start + i] : 0.0f);
        double s = static_cast<double>(l.sum), q = static_cast<double>(l.squares);
        float m = l.max_abs;
        std::uint32_t bad = l.bad;
        // moment_tree: lane j adds lane j + w for w = 16, 8, 4, 2, 1 (lanes past the live ones carry garbage that
        // no live lane reads).
        for (unsigned w = moment_lanes / 2; w >= 1; w /= 2) {
            const double so = __shfl_down_sync(0xffffffffu, s, w);
            const double qo = __shfl_down_sync(0xffffffffu, q, w);
            s = hd::add(s, so);
            q = hd::add(q, qo);
        }
        // The largest magnitude and the flag need no order.
        for (unsigned w = 16; w >= 1; w /= 2) {
            const float mo = __shfl_xor_sync(0xffffffffu, m, w);
            m = mo > m ? mo : m;
            bad |= __shfl_xor_sync(0xffffffffu, bad, w);
        }
        if (lane == 0) partials[b] = moments{s, q, m, bad};
    }
}

/// totals[k] = group k's blocks added in order (moment_accumulate from zero), one thread per group.
static __global__ void moment_groups_kernel(const moments* partials, moment_plan plan, moments* totals) {
    for (std::size_t k = cuda::detail::grid_index(); k < plan.groups; k += cuda::detail::grid_stride()) {
        moments total;
        const std::size_t first = k * plan.per_group;
        const std::size_t end = first + plan.per_group < plan.blocks ? first + plan.per_group : plan.blocks;
        for (std::size_t b = first; b < end; ++b) moment_accumulate(total, partials[b]);
        totals[k] = total;
    }
}

/// Launches moments_kernel over a plan's blocks (one warp each).
template <bool EF, bool Squares, bool Sum, bool Max>
void launch_moments(cudaStream_t stream, const float* g, const float* r, const moment_plan& plan, moments* partials) {
    if (plan.blocks == 0) return;
    moments_kernel<EF, Squares, Sum, Max>
        <<<cuda::detail::grid_blocks(plan.blocks * 32), cuda::detail::block_threads, 0, stream>>>(g, r, plan, partials);
    cuda::detail::check_launch("hitch::cuda::compress moments_kernel");
}

}  // namespace hitch::cuda::compress::detail
