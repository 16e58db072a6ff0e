#pragma once
// The per-element math of data_parallel's gradient intake on a GPU (train/gradient_intake.hpp's, element by element)
// and the rows its kernels read, written once for the kernels (hitch/cuda/train/kernels.cuh) and the host tests:
//
//   take        x = float(g_low) or g (FP32); with loss scaling x = x * (1/S) (one rounding); x is inf or NaN: bad
//   mean        at the window's last micro-batch: g = (sum + g) / K, K = micro-batches in the window (as float)
//   add         a micro-batch that is not the window's last: sum = g (the first) or sum + g
//   scale       clipping and joins: g = g * c
//
// each operation rounded on its own (hitch/cuda/detail/hd.hpp), in the CPU's order, so the bits are the CPU's.
// Needs no CUDA header.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "hitch/cuda/amp/convert.hpp"
#include "hitch/cuda/detail/hd.hpp"
#include "hitch/cuda/optim/multi_tensor.hpp"
#include "hitch/train/buckets.hpp"

namespace hitch::cuda::train {

/// One layer of an intake launch: where its gradient is read and written, and where the bucket holds it.
struct intake_row {
    float* g = nullptr;                  // the FP32 gradient: the model's own, or the master gradient (mixed precision)
    const std::uint16_t* low = nullptr;  // mixed precision: the model's FP16 or BF16 gradient; else null
    float* sum = nullptr;                // accumulation: the window's sum so far; else null
    float* packed = nullptr;             // the layer's place in its bucket
    std::uint64_t n = 0;
};

/// What a launch reports per layer: whether some value was inf or NaN, the first such index (without loss scaling,
/// for the message) and its value once captured.
struct intake_report {
    std::uint32_t bad = 0;
    std::uint32_t reserved = 0;
    unsigned long long first = ~0ull;
    float value = 0.0f;
    std::uint32_t reserved2 = 0;
};

/// The launch's scalars.
struct intake_scalars {
    float inv = 1.0f;          // 1/S, the loss scaler's inverse_scale()
    std::uint32_t scale = 0;   // loss scaling on: x * inv
    std::uint32_t locate = 0;  // without loss scaling: find each layer's first inf or NaN
    std::uint32_t taken = 0;   // micro-batches of the window already added up (> 0: take the mean)
    float count = 1.0f;        // taken + 1, as float
    std::uint32_t pack = 0;    // copy the result into the bucket
};

/// The chunk table of the intake's launches (hitch/cuda/optim/multi_tensor.hpp's chunks of 4096 elements): bucket
/// b's launches walk chunks [first[b], first[b + 1]), each naming its layer by index (the row of the layer table);
/// the whole table is every layer's chunks (an accumulation's launch).
struct intake_layout {
    std::vector<hitch::cuda::optim::chunk_entry> chunks;
    std::vector<std::uint64_t> first;  // per bucket, and one past the last
};

/// The intake's chunk table for buckets `plan` of layers of `sizes` elements (train/buckets.hpp's plan).
[[nodiscard]] inline intake_layout make_intake_layout(std::span<const hitch::train::bucket_plan> plan,
                                                      std::span<const std::size_t> sizes) {
    intake_layout out;
    out.first.assign(1, 0);
    for (const hitch::train::bucket_plan& bucket : plan) {
        std::vector<std::size_t> bucket_sizes;
        for (const std::size_t k : bucket.layers) bucket_sizes.push_back(sizes[k]);
        for (hitch::cuda::optim::chunk_entry e : hitch::cuda::optim::make_chunk_layout(bucket_sizes).chunks) {
            e.tensor = static_cast<std::uint32_t>(bucket.layers[e.tensor]);
            out.chunks.push_back(e);
        }
        out.first.push_back(out.chunks.size());
    }
    return out;
}

/// The value a layer's gradient element takes in: the low-precision gradient widened (IsHalf: FP16, else BF16), or
/// the FP32 one, unscaled with loss scaling.
template <bool IsHalf>
[[nodiscard]] HITCH_HD_INLINE float take_element(const intake_row& r, std::uint64_t i,
                                                 const intake_scalars& k) noexcept {
    float x = r.low != nullptr ? amp::low16<IsHalf>::to_float(r.low[i]) : r.g[i];
    if (k.scale != 0) x = amp::unscale(x, k.inv);
    return x;
}

/// The window's mean at its last micro-batch: (sum + g) / count.
[[nodiscard]] HITCH_HD_INLINE float window_mean(float sum, float g, float count) noexcept {
    return hd::div(hd::add(sum, g), count);
}

/// The window's running sum after one more micro-batch (taken: those added before).
[[nodiscard]] HITCH_HD_INLINE float window_add(float sum, float g, std::uint32_t taken) noexcept {
    return taken == 0 ? g : hd::add(sum, g);
}

/// g * c: clipping's coefficient, a join's rescale.
[[nodiscard]] HITCH_HD_INLINE float scaled(float g, float c) noexcept { return hd::mul(g, c); }

/// The mean of an exchange's sum over p ranks, as compress::detail::write_result writes it: v * (1/p) (the factor
/// rounded once), or v itself.
[[nodiscard]] HITCH_HD_INLINE float result_element(float v, bool average, float inv_p) noexcept {
    return average ? hd::mul(v, inv_p) : v;
}

}  // namespace hitch::cuda::train
