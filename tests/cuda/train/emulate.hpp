#pragma once
// Host replays of data_parallel's GPU kernels (include/hitch/cuda/train/kernels.cuh): the same rows, the same chunk
// tables (hitch/cuda/optim/multi_tensor.hpp), the same per-element functions (hitch/cuda/train/intake.hpp), launch
// by launch in the order gradients.cuh queues them. The host tests compare these with the CPU's gradient intake,
// clipping and exchange results bit for bit, so a machine without a GPU checks everything in the kernels but the
// launch itself.

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hitch/cuda/detail/hd.hpp"
#include "hitch/cuda/optim/math.hpp"
#include "hitch/cuda/optim/multi_tensor.hpp"
#include "hitch/cuda/train/intake.hpp"

namespace hitch_test {

namespace ct = hitch::cuda::train;
namespace co = hitch::cuda::optim;

/// The chunk table of rows `layers` (one bucket's), as gradients::build_tables makes it (make_intake_layout).
inline std::vector<co::chunk_entry> chunks_of(const std::vector<ct::intake_row>& rows,
                                              const std::vector<std::size_t>& layers) {
    std::vector<std::size_t> sizes(rows.size());
    for (std::size_t k = 0; k < rows.size(); ++k) sizes[k] = static_cast<std::size_t>(rows[k].n);
    hitch::train::bucket_plan bucket;
    bucket.layers = layers;
    return ct::make_intake_layout(std::span<const hitch::train::bucket_plan>(&bucket, 1), sizes).chunks;
}

/// reset_reports_kernel, take_kernel and (without loss scaling) capture_kernel over `layers`.
template <bool IsHalf>
void emulate_take(const std::vector<ct::intake_row>& rows, const std::vector<std::size_t>& layers,
                  const std::vector<std::uint8_t>& unused, const ct::intake_scalars& k,
                  std::vector<ct::intake_report>& reports) {
    for (std::size_t t : layers) reports[t] = ct::intake_report{};
    for (const co::chunk_entry& e : chunks_of(rows, layers)) {
        const ct::intake_row& r = rows[e.tensor];
        const std::uint64_t end = co::chunk_end(r.n, e.index);
        if (unused[e.tensor] != 0) {
            for (std::uint64_t i = co::chunk_begin(e.index); i < end; ++i) r.g[i] = 0.0f;
            continue;
        }
        const bool write = r.low != nullptr || k.scale != 0;
        bool bad = false;
        for (std::uint64_t i = co::chunk_begin(e.index); i < end; ++i) {
            const float x = ct::take_element<IsHalf>(r, i, k);
            if (write) r.g[i] = x;
            if (hitch::cuda::hd::non_finite(x)) {
                bad = true;
                if (k.locate != 0 && i < reports[e.tensor].first) reports[e.tensor].first = i;
            }
        }
        if (bad) reports[e.tensor].bad |= 1u;
    }
    if (k.locate != 0)
        for (std::size_t t : layers)
            if (reports[t].first != ~0ull) reports[t].value = rows[t].g[reports[t].first];
}

/// finish_kernel over `layers`: the window's mean, and the bucket.
inline void emulate_finish(const std::vector<ct::intake_row>& rows, const std::vector<std::size_t>& layers,
                           const ct::intake_scalars& k) {
    if (k.taken == 0 && k.pack == 0) return;
    for (const co::chunk_entry& e : chunks_of(rows, layers)) {
        const ct::intake_row& r = rows[e.tensor];
        const std::uint64_t end = co::chunk_end(r.n, e.index);
        for (std::uint64_t i = co::chunk_begin(e.index); i < end; ++i) {
            float x = r.g[i];
            if (k.taken != 0) {
                x = ct::window_mean(r.sum[i], x, k.count);
                r.g[i] = x;
            }
            if (k.pack != 0) r.packed[i] = x;
        }
    }
}

/// add_kernel over `layers`.
inline void emulate_add(const std::vector<ct::intake_row>& rows, const std::vector<std::size_t>& layers,
                        std::uint32_t taken) {
    for (const co::chunk_entry& e : chunks_of(rows, layers)) {
        const ct::intake_row& r = rows[e.tensor];
        const std::uint64_t end = co::chunk_end(r.n, e.index);
        for (std::uint64_t i = co::chunk_begin(e.index); i < end; ++i)
            r.sum[i] = ct::window_add(r.sum[i], r.g[i], taken);
    }
}

/// squares_kernel and gradients::gradient_sum_of_squares' host sum: each chunk's lanes (lane j adds elements j,
/// j + 16, ... in order), combined pairwise; the chunks of a layer added in order from 0.0, the layers in order.
inline double emulate_sum_of_squares(const std::vector<std::vector<float>>& layers) {
    std::vector<std::size_t> sizes;
    for (const auto& l : layers) sizes.push_back(l.size());
    const co::chunk_layout layout = co::make_chunk_layout(sizes);
    std::vector<double> partial(layout.chunks.size());
    for (std::size_t c = 0; c < layout.chunks.size(); ++c) {
        const co::chunk_entry e = layout.chunks[c];
        const std::vector<float>& x = layers[e.tensor];
        double lanes[co::norm_lanes] = {};
        for (std::size_t lane = 0; lane < co::norm_lanes; ++lane)
            for (std::uint64_t i = co::chunk_begin(e.index) + lane; i < co::chunk_end(x.size(), e.index);
                 i += co::norm_lanes)
                co::add_square(lanes[lane], x[i]);
        partial[c] = co::combine_lanes(lanes);
    }
    double total = 0.0;
    for (std::size_t t = 0; t < layers.size(); ++t) {
        double layer_sum = 0.0;
        const std::uint64_t first = t < layout.first_chunk.size() ? layout.first_chunk[t] : 0;
        for (std::uint64_t c = 0; c < co::chunk_count(layers[t].size()); ++c) layer_sum += partial[first + c];
        total += layer_sum;
    }
    return total;
}

}  // namespace hitch_test
