#pragma once
// The optimizer kernels: element-wise updates over chunks of one tensor or of many (the fused multi-tensor step),
// the per-chunk sums of squares in the lane order of hitch/optim/detail/norm.hpp, and the per-layer finish (block
// sums added in order, then the trust ratio). The arithmetic is hitch/cuda/optim/math.hpp's, through rules.hpp.
// nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/optim/detail/kernels.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hitch/cuda/detail/launch.cuh"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/optim/math.hpp"
#include "hitch/cuda/optim/multi_tensor.hpp"
#include "hitch/cuda/optim/rules.hpp"
#include "hitch/cuda/optim/tuning.hpp"

namespace hitch::cuda::optim::detail {

using hitch::cuda::detail::check;
using hitch::cuda::detail::check_launch;
using hitch::cuda::detail::max_grid_blocks;

// ---- where a launch's chunks, scalars and gradient scales come from ---------------------------------------------

/// A chunk's tensor (its row and index in the tensor table) and which of its chunks.
struct located_chunk {
    const tensor_entry* tensor;
    std::uint32_t tensor_index;
    std::uint32_t index;
};

/// The fused step's chunks: the chunk and tensor tables in device memory.
struct table_chunks {
    const chunk_entry* chunks = nullptr;
    const tensor_entry* tensors = nullptr;
    std::uint64_t count = 0;
    __device__ __forceinline__ located_chunk locate(std::uint64_t c) const noexcept {
        const chunk_entry e = chunks[c];
        return {tensors + e.tensor, e.tensor, e.index};
    }
};

/// One tensor, passed by value: chunk c is its chunk c.
struct single_chunks {
    tensor_entry tensor;
    std::uint64_t count = 0;
    __device__ __forceinline__ located_chunk locate(std::uint64_t c) const noexcept {
        return {&tensor, 0u, static_cast<std::uint32_t>(c)};
    }
};

/// The tensors of a finish launch: the table, or one row by value.
struct table_tensors {
    const tensor_entry* rows = nullptr;
    std::uint32_t count = 0;
    __device__ __forceinline__ const tensor_entry& operator[](std::uint32_t t) const noexcept { return rows[t]; }
};
struct single_tensor {
    tensor_entry row;
    std::uint32_t count = 1;
    __device__ __forceinline__ const tensor_entry& operator[](std::uint32_t /*t*/) const noexcept { return row; }
};

/// Per-tensor scalars from a table in device memory, or the same for every tensor (by value).
template <class K>
struct table_rows {
    const K* rows = nullptr;
    __device__ __forceinline__ K operator()(std::uint32_t t) const noexcept { return rows[t]; }
};
template <class K>
struct same_row {
    K value;
    __device__ __forceinline__ K operator()(std::uint32_t /*t*/) const noexcept { return value; }
};

// ---- element-wise updates ---------------------------------------------------------------------------------------

/// Whether a rule's element reads the gradient and writes its state back (lamb's second pass does neither).
template <class R>
constexpr bool reads_grad() {
    if constexpr (requires { R::reads_grad; })
        return R::reads_grad;
    else
        return true;
}
template <class R>
constexpr bool writes_state() {
    if constexpr (requires { R::writes_state; })
        return R::writes_state;
    else
        return true;
}

/// LAMB's second pass as an element rule: w = w - rate * r from the stored moments (the scale is the rate).
struct lamb_apply_rule {
    using scalars = lamb_scalars;
    static constexpr int min_states = 2, max_states = 2;
    static constexpr bool reads_grad = false;
    static constexpr bool writes_state = false;
    __device__ __forceinline__ static void apply(float& w, float /*g*/, float* s, float rate,
                                                 const scalars& k) noexcept {
        w = lamb_apply_element(w, s[0], s[1], rate, k);
    }
};

__device__ __forceinline__ float lane_of(const float4& v, int j) noexcept {
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}
__device__ __forceinline__ void set_lane(float4& v, int j, float x) noexcept {
    if (j == 0)
        v.x = x;
    else if (j == 1)
        v.y = x;
    else if (j == 2)
        v.z = x;
    else
        v.w = x;
}

/// One element i of tensor t.
template <class R, int States>
__device__ __forceinline__ void update_one(const tensor_entry& t, std::uint64_t i, float scale,
                                           const typename R::scalars& k) noexcept {
    float w = t.w[i];
    const float g = reads_grad<R>() ? t.g[i] : 0.0f;
    float s[3] = {0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int q = 0; q < States; ++q) s[q] = t.state[q][i];
    R::apply(w, g, s, scale, k);
    t.w[i] = w;
    if constexpr (writes_state<R>()) {
#pragma unroll
        for (int q = 0; q < States; ++q) t.state[q][i] = s[q];
    }
}

/// Elements [begin, end) of tensor t by the threads of one block: four at a time where the row is 16-byte aligned.
template <class R, int States>
__device__ __forceinline__ void update_range(const tensor_entry& t, std::uint64_t begin, std::uint64_t end, float scale,
                                             const typename R::scalars& k) noexcept {
    std::uint64_t i = begin + threadIdx.x;
    if ((t.flags & flag_aligned16) != 0) {
        // begin is a multiple of chunk_elements, so every quad below is 16-byte aligned.
        const std::uint64_t quads = (end - begin) / 4;
        for (std::uint64_t q = threadIdx.x; q < quads; q += blockDim.x) {
            const std::uint64_t at = begin + 4 * q;
            float4 w4 = *reinterpret_cast<const float4*>(t.w + at);
            float4 g4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if constexpr (reads_grad<R>()) g4 = *reinterpret_cast<const float4*>(t.g + at);
            float4 s4[3];
#pragma unroll
            for (int q2 = 0; q2 < States; ++q2) s4[q2] = *reinterpret_cast<const float4*>(t.state[q2] + at);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float w = lane_of(w4, j);
                float s[3] = {0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int q2 = 0; q2 < States; ++q2) s[q2] = lane_of(s4[q2], j);
                R::apply(w, lane_of(g4, j), s, scale, k);
                set_lane(w4, j, w);
#pragma unroll
                for (int q2 = 0; q2 < States; ++q2) set_lane(s4[q2], j, s[q2]);
            }
            *reinterpret_cast<float4*>(t.w + at) = w4;
            if constexpr (writes_state<R>()) {
#pragma unroll
                for (int q2 = 0; q2 < States; ++q2) *reinterpret_cast<float4*>(t.state[q2] + at) = s4[q2];
            }
        }
        i = begin + 4 * quads + threadIdx.x;
    }
    for (; i < end; i += blockDim.x) update_one<R, States>(t, i, scale, k);
}

/// Every chunk of `chunks`, one block per chunk (a grid-stride loop over the chunks).
template <class R, int States, class Chunks, class Scalars, class Scales>
__global__ void __launch_bounds__(elementwise_threads)
    elementwise_kernel(Chunks chunks, Scalars scalars, Scales scales) {
    for (std::uint64_t c = blockIdx.x; c < chunks.count; c += gridDim.x) {
        const located_chunk at = chunks.locate(c);
        const tensor_entry t = *at.tensor;
        const typename R::scalars k = scalars(at.tensor_index);
        const float scale = scales(at.tensor_index);
        update_range<R, States>(t, chunk_begin(at.index), chunk_end(t.n, at.index), scale, k);
    }
}

// ---- sums of squares in lane order ------------------------------------------------------------------------------

/// LARS's first pass: ||w||^2 and ||g||^2 of the chunk (nothing for a layer excluded from adaptation).
struct lars_norms_pass {
    using scalars = lars_scalars;  // unused: the pass needs none
    struct values {
        float w, g;
    };
    __device__ __forceinline__ static bool skip(const tensor_entry& t) noexcept {
        return (t.flags & flag_exclude_from_adaptation) != 0;
    }
    __device__ __forceinline__ static values load(const tensor_entry& t, std::uint64_t i) noexcept {
        return {t.w[i], t.g[i]};
    }
    __device__ __forceinline__ static void process(const tensor_entry& /*t*/, std::uint64_t /*i*/, const values& x,
                                                   const scalars& /*k*/, double& a, double& b) noexcept {
        add_square(a, x.w);
        add_square(b, x.g);
    }
};

/// LAMB's first pass: the moments move; ||w||^2 and ||r||^2 of the chunk.
struct lamb_moments_pass {
    using scalars = lamb_scalars;
    struct values {
        float w, g, m, v;
    };
    __device__ __forceinline__ static bool skip(const tensor_entry& /*t*/) noexcept { return false; }
    __device__ __forceinline__ static values load(const tensor_entry& t, std::uint64_t i) noexcept {
        return {t.w[i], t.g[i], t.state[0][i], t.state[1][i]};
    }
    __device__ __forceinline__ static void process(const tensor_entry& t, std::uint64_t i, values x, const scalars& k,
                                                   double& a, double& b) noexcept {
        const float r = lamb_moments_element(x.w, x.g, x.m, x.v, k);
        t.state[0][i] = x.m;
        t.state[1][i] = x.v;
        add_square(a, x.w);
        add_square(b, r);
    }
};

/// Elements a lane loads before it adds any of them (its additions stay in increasing order).
inline constexpr unsigned lane_batch = 4;

/// Each chunk's two sums of squares into partial[2c] and partial[2c + 1]: a group of norm_lanes threads per chunk,
/// thread j being lane j (elements j, j + 16, ... of the chunk, in order), the lanes combined by combine_lanes.
template <class Pass, class Chunks, class Scalars>
__global__ void __launch_bounds__(norm_threads) lane_sums_kernel(Chunks chunks, Scalars scalars, double* partial) {
    __shared__ double lanes[2][norm_groups][norm_lanes];
    const unsigned group = threadIdx.x / norm_lanes;
    const unsigned lane = threadIdx.x % norm_lanes;
    for (std::uint64_t first = static_cast<std::uint64_t>(blockIdx.x) * norm_groups; first < chunks.count;
         first += static_cast<std::uint64_t>(gridDim.x) * norm_groups) {
        const std::uint64_t c = first + group;
        double a = 0.0;
        double b = 0.0;
        if (c < chunks.count) {
            const located_chunk at = chunks.locate(c);
            const tensor_entry t = *at.tensor;
            if (!Pass::skip(t)) {
                const typename Pass::scalars k = scalars(at.tensor_index);
                const std::uint64_t end = chunk_end(t.n, at.index);
                // Loads of lane_batch elements in flight at once: the stores of one batch would otherwise keep the
                // compiler from starting the next batch's loads early.
                for (std::uint64_t i = chunk_begin(at.index) + lane; i < end; i += lane_batch * norm_lanes) {
                    typename Pass::values x[lane_batch];
#pragma unroll
                    for (unsigned u = 0; u < lane_batch; ++u)
                        if (i + u * norm_lanes < end) x[u] = Pass::load(t, i + u * norm_lanes);
#pragma unroll
                    for (unsigned u = 0; u < lane_batch; ++u)
                        if (i + u * norm_lanes < end) Pass::process(t, i + u * norm_lanes, x[u], k, a, b);
                }
            }
        }
        lanes[0][group][lane] = a;
        lanes[1][group][lane] = b;
        __syncthreads();
        if (lane < 2 && c < chunks.count) partial[2 * c + lane] = combine_lanes(lanes[lane][group]);
        __syncthreads();
    }
}

// ---- per-layer finish -------------------------------------------------------------------------------------------

/// LARS: the trust ratio from the sums (options in `base`, the layer's flags from its row).
struct lars_finish {
    lars_scalars base;
    __device__ __forceinline__ float operator()(const tensor_entry& t, double sw, double sg) const noexcept {
        lars_scalars k = base;
        if ((t.flags & flag_exclude_from_weight_decay) != 0) k.wd = 0.0f;
        k.exclude = (t.flags & flag_exclude_from_adaptation) != 0 ? 1u : 0u;
        return lars_trust(sw, sg, k);
    }
};
/// LAMB: the rate lr * trust from the sums.
struct lamb_finish {
    float lr;
    __device__ __forceinline__ float operator()(const tensor_entry& t, double sw, double sr) const noexcept {
        return lamb_rate(sw, sr, (t.flags & flag_exclude_from_adaptation) != 0, lr);
    }
};
/// Only the sums (the host asked for them: the layer-wise rules' first phase).
struct sums_only {
    __device__ __forceinline__ float operator()(const tensor_entry&, double, double) const noexcept { return 1.0f; }
};

/// One thread per tensor: its block sums added in block order into sums[2t], sums[2t + 1] (0 for a layer whose
/// pass skipped it), then scales[t] = finish(row, sums) unless scales is null.
template <class Pass, class Tensors, class Finish>
__global__ void __launch_bounds__(finish_threads)
    finish_kernel(Tensors tensors, const double* partial, double* sums, float* scales, Finish finish) {
    const std::uint64_t t = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= tensors.count) return;
    const tensor_entry& row = tensors[static_cast<std::uint32_t>(t)];
    double sw = 0.0;
    double sg = 0.0;
    if (!Pass::skip(row)) {
        const std::uint64_t blocks = chunk_count(row.n);
        sw = add_block_sums(partial + 2 * row.first_chunk, blocks, 2);
        sg = add_block_sums(partial + 2 * row.first_chunk + 1, blocks, 2);
    }
    if (sums != nullptr) {
        sums[2 * t] = sw;
        sums[2 * t + 1] = sg;
    }
    if (scales != nullptr) scales[t] = finish(row, sw, sg);
}

// ---- launches ---------------------------------------------------------------------------------------------------

/// Makes dev's GPU current for this thread (a launch goes to the current GPU; the stream must be on it).
inline void activate(cuda::device& dev) { check(cudaSetDevice(dev.ordinal()), "cudaSetDevice"); }

/// The element-wise kernel of rule R with `states` state buffers (built for R's possible counts only).
template <class R, int States = R::min_states, class Chunks, class Scalars, class Scales>
void launch_elementwise_with(unsigned blocks, cudaStream_t stream, int states, Chunks chunks, Scalars scalars,
                             Scales scales) {
    if constexpr (States < R::max_states) {
        if (states != States) {
            launch_elementwise_with<R, States + 1>(blocks, stream, states, chunks, scalars, scales);
            return;
        }
    }
    elementwise_kernel<R, States><<<blocks, elementwise_threads, 0, stream>>>(chunks, scalars, scales);
}

template <class R, class Chunks, class Scalars, class Scales>
void launch_elementwise(cuda::device& dev, int states, Chunks chunks, Scalars scalars, Scales scales) {
    if (chunks.count == 0) return;
    activate(dev);
    const unsigned blocks = static_cast<unsigned>(
        chunks.count < max_grid_blocks ? chunks.count : static_cast<std::uint64_t>(max_grid_blocks));
    launch_elementwise_with<R>(blocks, dev.stream(), states, chunks, scalars, scales);
    check_launch("hitch::cuda::optim elementwise_kernel");
}

template <class Pass, class Chunks, class Scalars>
void launch_lane_sums(cuda::device& dev, Chunks chunks, Scalars scalars, double* partial) {
    if (chunks.count == 0) return;
    activate(dev);
    const std::uint64_t groups = (chunks.count + norm_groups - 1) / norm_groups;
    const unsigned blocks =
        static_cast<unsigned>(groups < max_grid_blocks ? groups : static_cast<std::uint64_t>(max_grid_blocks));
    lane_sums_kernel<Pass><<<blocks, norm_threads, 0, dev.stream()>>>(chunks, scalars, partial);
    check_launch("hitch::cuda::optim lane_sums_kernel");
}

template <class Pass, class Tensors, class Finish>
void launch_finish(cuda::device& dev, Tensors tensors, const double* partial, double* sums, float* scales,
                   Finish finish) {
    if (tensors.count == 0) return;
    activate(dev);
    const unsigned blocks = (tensors.count + finish_threads - 1) / finish_threads;
    finish_kernel<Pass><<<blocks, finish_threads, 0, dev.stream()>>>(tensors, partial, sums, scales, finish);
    check_launch("hitch::cuda::optim finish_kernel");
}

}  // namespace hitch::cuda::optim::detail
