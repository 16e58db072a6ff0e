#pragma once
// data_parallel's kernels on a GPU: the gradient intake (take, capture, mean and pack, add), the sums of squares of
// gradient clipping in the order of hitch/optim/detail/norm.hpp, and the element-wise scale, add and result
// writes. The per-element math is hitch/cuda/train/intake.hpp's. Launches over many layers walk a chunk table
// (hitch/cuda/optim/multi_tensor.hpp: chunks of 4096 elements, a block per chunk). nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/train/kernels.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "hitch/cuda/detail/hd.hpp"
#include "hitch/cuda/detail/launch.cuh"
#include "hitch/cuda/optim/math.hpp"
#include "hitch/cuda/optim/multi_tensor.hpp"
#include "hitch/cuda/train/intake.hpp"

namespace hitch::cuda::train::kernels {

using hitch::cuda::optim::chunk_begin;
using hitch::cuda::optim::chunk_end;
using hitch::cuda::optim::chunk_entry;

/// Threads per block of the chunk kernels: one chunk of 4096 elements per block, 16 per thread.
inline constexpr unsigned chunk_threads = 256;

/// Blocks for a launch over `chunks` chunks (at least 1, at most launch.hpp's cap).
[[nodiscard]] inline unsigned chunk_blocks(std::uint64_t chunks) noexcept {
    return chunks < hitch::cuda::detail::max_grid_blocks ? static_cast<unsigned>(chunks == 0 ? 1 : chunks)
                                                         : hitch::cuda::detail::max_grid_blocks;
}

/// Resets the reports of rows [0, count).
static __global__ void reset_reports_kernel(intake_report* reports, std::uint64_t count) {
    for (std::uint64_t i = hitch::cuda::detail::grid_index(); i < count; i += hitch::cuda::detail::grid_stride())
        reports[i] = intake_report{};
}

/// take: every element of the chunks' rows widened and unscaled into the FP32 gradient (the rows of unused layers
/// zeroed instead), each row's bad flag raised (a block ORs its threads' flags), its first inf or NaN located.
template <bool IsHalf>
__global__ void __launch_bounds__(chunk_threads)
    take_kernel(const chunk_entry* chunks, std::uint64_t count, const intake_row* rows, const std::uint8_t* unused,
                intake_scalars k, intake_report* reports) {
    for (std::uint64_t c = blockIdx.x; c < count; c += gridDim.x) {
        const chunk_entry e = chunks[c];
        const intake_row r = rows[e.tensor];
        const std::uint64_t end = chunk_end(r.n, e.index);
        if (unused[e.tensor] != 0) {  // the same for every thread of the block
            for (std::uint64_t i = chunk_begin(e.index) + threadIdx.x; i < end; i += blockDim.x) r.g[i] = 0.0f;
            continue;
        }
        const bool write = r.low != nullptr || k.scale != 0;
        bool bad = false;
        for (std::uint64_t i = chunk_begin(e.index) + threadIdx.x; i < end; i += blockDim.x) {
            const float x = take_element<IsHalf>(r, i, k);
            if (write) r.g[i] = x;
            if (hd::non_finite(x)) {
                bad = true;
                if (k.locate != 0) atomicMin(&reports[e.tensor].first, static_cast<unsigned long long>(i));
            }
        }
        if (__syncthreads_or(bad ? 1 : 0) != 0 && threadIdx.x == 0) atomicOr(&reports[e.tensor].bad, 1u);
    }
}

/// capture: each row's first inf or NaN, as taken in (before the window's mean changes it), for the message.
static __global__ void capture_kernel(const intake_row* rows, intake_report* reports, std::uint64_t count) {
    for (std::uint64_t t = hitch::cuda::detail::grid_index(); t < count; t += hitch::cuda::detail::grid_stride()) {
        const unsigned long long i = reports[t].first;
        if (i != ~0ull) reports[t].value = rows[t].g[i];
    }
}

/// mean and pack: at the window's last micro-batch g = (sum + g) / K; the result into the bucket.
static __global__ void __launch_bounds__(chunk_threads)
    finish_kernel(const chunk_entry* chunks, std::uint64_t count, const intake_row* rows, intake_scalars k) {
    for (std::uint64_t c = blockIdx.x; c < count; c += gridDim.x) {
        const chunk_entry e = chunks[c];
        const intake_row r = rows[e.tensor];
        const std::uint64_t end = chunk_end(r.n, e.index);
        for (std::uint64_t i = chunk_begin(e.index) + threadIdx.x; i < end; i += blockDim.x) {
            float x = r.g[i];
            if (k.taken != 0) {
                x = window_mean(r.sum[i], x, k.count);
                r.g[i] = x;
            }
            if (k.pack != 0) r.packed[i] = x;
        }
    }
}

/// add: a micro-batch that is not its window's last joins the window's sum.
static __global__ void __launch_bounds__(chunk_threads)
    add_kernel(const chunk_entry* chunks, std::uint64_t count, const intake_row* rows, std::uint32_t taken) {
    for (std::uint64_t c = blockIdx.x; c < count; c += gridDim.x) {
        const chunk_entry e = chunks[c];
        const intake_row r = rows[e.tensor];
        const std::uint64_t end = chunk_end(r.n, e.index);
        for (std::uint64_t i = chunk_begin(e.index) + threadIdx.x; i < end; i += blockDim.x)
            r.sum[i] = window_add(r.sum[i], r.g[i], taken);
    }
}

/// One tensor of a sum-of-squares launch.
struct square_row {
    const float* x = nullptr;
    std::uint64_t n = 0;
};

/// Chunks per block of the sums of squares: a group of norm_lanes threads per chunk.
inline constexpr unsigned square_groups = 16;

/// Each chunk's sum of squares into partial[c]: lane j of the chunk's group adds x[i]^2 (in double) for i = j, j +
/// 16, ... of the chunk in increasing order; the 16 lanes combine pairwise (norm.hpp's order).
static __global__ void __launch_bounds__(square_groups * 16)
    squares_kernel(const chunk_entry* chunks, std::uint64_t count, const square_row* rows, double* partial) {
    constexpr unsigned lanes = static_cast<unsigned>(hitch::cuda::optim::norm_lanes);
    static_assert(lanes == 16, "the groups of squares_kernel are norm_lanes threads");
    __shared__ double lane_sums[square_groups][lanes];
    const unsigned group = threadIdx.x / lanes;
    const unsigned lane = threadIdx.x % lanes;
    for (std::uint64_t first = static_cast<std::uint64_t>(blockIdx.x) * square_groups; first < count;
         first += static_cast<std::uint64_t>(gridDim.x) * square_groups) {
        const std::uint64_t c = first + group;
        double acc = 0.0;
        if (c < count) {
            const chunk_entry e = chunks[c];
            const square_row r = rows[e.tensor];
            const std::uint64_t end = chunk_end(r.n, e.index);
            for (std::uint64_t i = chunk_begin(e.index) + lane; i < end; i += lanes)
                hitch::cuda::optim::add_square(acc, r.x[i]);
        }
        lane_sums[group][lane] = acc;
        __syncthreads();
        if (lane == 0 && c < count) partial[c] = hitch::cuda::optim::combine_lanes(lane_sums[group]);
        __syncthreads();
    }
}

/// g = g * c over n elements.
static __global__ void scale_kernel(float* g, std::size_t n, float c) {
    for (std::size_t i = hitch::cuda::detail::grid_index(); i < n; i += hitch::cuda::detail::grid_stride())
        g[i] = scaled(g[i], c);
}

/// a = a + b over n elements (the compression-aware ring adds this rank's chunk to the partial sum it received).
static __global__ void add_into_kernel(float* a, const float* b, std::size_t n) {
    for (std::size_t i = hitch::cuda::detail::grid_index(); i < n; i += hitch::cuda::detail::grid_stride())
        a[i] = hd::add(a[i], b[i]);
}

/// out = v (times 1/p for the mean), compress::detail::write_result's values.
static __global__ void result_kernel(const float* v, float* out, std::size_t n, bool average, float inv_p) {
    for (std::size_t i = hitch::cuda::detail::grid_index(); i < n; i += hitch::cuda::detail::grid_stride())
        out[i] = result_element(v[i], average, inv_p);
}

}  // namespace hitch::cuda::train::kernels
