#pragma once
// Sums of squares for the layer-wise optimizers (LARS, LAMB), defined so the result does not depend on the
// number of threads or on the device:
//
//   the layer is cut into blocks of norm_block elements; inside a block, lane j (j < norm_lanes) adds
//   (double)x[i] * (double)x[i] for i = j, j + 16, j + 32, ... in increasing i; the 16 lanes are combined
//   pairwise ((l0 + l1) + (l2 + l3)) + ... ; the block sums are added in block order, starting from 0.0.
//
// Squares of floats are exact in double, so a fused multiply-add gives the same bits as a multiply and an add.

#include <array>
#include <cmath>
#include <cstddef>
#include <vector>

#include "hitch/core/parallel.hpp"
#include "hitch/optim/detail/strict_fp.hpp"
#include "hitch/optim/detail/tiers.hpp"

namespace hitch::optim::detail {

inline constexpr std::size_t norm_block = 4096;
inline constexpr std::size_t norm_lanes = 16;

/// Combines the 16 lane sums in the fixed pairwise order above.
[[nodiscard]] HITCH_OPTIM_KERNEL double combine_lanes(const std::array<double, norm_lanes>& lane) noexcept {
    std::array<double, norm_lanes> a = lane;
    for (std::size_t width = norm_lanes / 2; width >= 1; width /= 2)
        for (std::size_t j = 0; j < width; ++j) a[j] = a[2 * j] + a[2 * j + 1];
    return a[0];
}

/// Adds x[i]^2 (in double) to lane (i - begin) % 16 for i in [begin, end); begin is a block start.
HITCH_OPTIM_KERNEL void accumulate_squares(const float* x, std::size_t begin, std::size_t end,
                                           std::array<double, norm_lanes>& lane) noexcept {
    std::size_t i = begin;
    for (; i + norm_lanes <= end; i += norm_lanes)
        for (std::size_t j = 0; j < norm_lanes; ++j) {
            const double v = static_cast<double>(x[i + j]);
            lane[j] += v * v;
        }
    for (std::size_t j = 0; i < end; ++i, ++j) {
        const double v = static_cast<double>(x[i]);
        lane[j] += v * v;
    }
}

/// Sum of squares of x[0, n) in the order described above, on `threads` threads (the bits never depend on it).
[[nodiscard]] inline double sum_of_squares(const float* x, std::size_t n, const parallel_options& options) {
    const std::size_t blocks = (n + norm_block - 1) / norm_block;
    std::vector<double> block_sum(blocks, 0.0);
    parallel_options o = options;
    o.align = norm_block;
    parallel_for(
        n,
        [&](std::size_t begin, std::size_t end) {
            run_tiered([&](auto) HITCH_OPTIM_INLINE_LAMBDA {
                for (std::size_t b = begin; b < end; b += norm_block) {
                    std::array<double, norm_lanes> lane{};
                    accumulate_squares(x, b, std::min(end, b + norm_block), lane);
                    block_sum[b / norm_block] = combine_lanes(lane);
                }
            });
        },
        o);
    double total = 0.0;
    for (double s : block_sum) total += s;
    return total;
}

/// sqrt of a sum of squares, rounded once to float.
[[nodiscard]] inline float norm_from_sum(double sum_sq) noexcept { return static_cast<float>(std::sqrt(sum_sq)); }

}  // namespace hitch::optim::detail
