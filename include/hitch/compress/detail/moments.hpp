#pragma once
// Reductions over a group of a quantising codec (qsgd, terngrad): sum, sum of squares, largest magnitude and
// finiteness of v = g (+ r), in a fixed summation order, so every build and thread count gives the same bits.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hitch/compress/detail/parallel.hpp"
#include "hitch/compress/detail/simd.hpp"
#include "hitch/compress/tuning.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
/// Reductions over a group. Partial results live in 32 float lanes (element i of a block into lane i % 32), are
/// folded into doubles by a fixed tree every `tuning::moment_block` elements, so every code path gives the same bits.
struct group_moments {
    double sum = 0.0;
    double sum_squares = 0.0;
    float max_abs = 0.0f;
    bool finite = true;  // no NaN or infinity met
};

inline constexpr std::size_t moment_lanes = 32;

[[nodiscard]] constexpr std::size_t ceil_div_size(std::size_t a, std::size_t b) noexcept {
    return a / b + (a % b != 0);
}

template <bool EF, bool Squares, bool Sum, bool Max = true>
HITCH_COMPRESS_ALWAYS_INLINE void moments_kernel(const float* g, const float* r, std::size_t n, group_moments& out) {
    constexpr std::size_t L = moment_lanes;
    for (std::size_t start = 0; start < n; start += tuning::moment_block) {
        const std::size_t end = std::min(n, start + tuning::moment_block);
        float s[L] = {}, q[L] = {}, m[L] = {};
        std::uint32_t bad[L] = {};
        std::size_t i = start;
        for (; i + L <= end; i += L)
            for (std::size_t j = 0; j < L; ++j) {
                float v = g[i + j];
                if constexpr (EF) v += r[i + j];
                const float a = std::fabs(v);
                if constexpr (Sum) s[j] += v;
                if constexpr (Squares) {
                    const float square = v * v;
                    q[j] += square;
                }
                if constexpr (Max) {
                    m[j] = a > m[j] ? a : m[j];
                    bad[j] |= a <= 3.40282347e38f ? 0u : 1u;
                }
            }
        for (std::size_t j = 0; i < end; ++i, ++j) {
            float v = g[i];
            if constexpr (EF) v += r[i];
            const float a = std::fabs(v);
            if constexpr (Sum) s[j] += v;
            if constexpr (Squares) {
                const float square = v * v;
                q[j] += square;
            }
            if constexpr (Max) {
                m[j] = a > m[j] ? a : m[j];
                bad[j] |= a <= 3.40282347e38f ? 0u : 1u;
            }
        }
        // The block's partial (its lanes folded in halves, a fixed tree: a chain of 32 dependent additions would
        // cost more than a group of 512 takes to quantise), then added to the total: block by block, in order.
        double ds[L], dq[L];
        std::uint32_t any_bad = 0;
        for (std::size_t j = 0; j < L; ++j) {
            ds[j] = static_cast<double>(s[j]);
            dq[j] = static_cast<double>(q[j]);
            out.max_abs = m[j] > out.max_abs ? m[j] : out.max_abs;
            any_bad |= bad[j];
        }
        for (std::size_t w = L / 2; w >= 1; w /= 2)
            for (std::size_t j = 0; j < w; ++j) {
                ds[j] += ds[j + w];
                dq[j] += dq[j + w];
            }
        out.finite = out.finite && any_bad == 0;
        out.sum += ds[0];
        out.sum_squares += dq[0];
    }
}

/// The largest |g[i]| over n elements as its float bits, by an integer maximum over the bits with the sign cleared
/// (for non-negative floats the order of the bits is the order of the values): a NaN or an infinity gives bits
/// >= 0x7f800000, so one pass finds both the maximum and whether every element is finite.
HITCH_COMPRESS_ALWAYS_INLINE std::uint32_t max_abs_bits(const float* g, std::size_t n) {
    constexpr std::size_t L = moment_lanes;
    std::uint32_t m[L] = {};
    std::size_t i = 0;
    for (; i + L <= n; i += L)
        for (std::size_t j = 0; j < L; ++j) {
            const std::uint32_t a = std::bit_cast<std::uint32_t>(g[i + j]) & 0x7fffffffu;
            m[j] = a > m[j] ? a : m[j];
        }
    for (std::size_t j = 0; i < n; ++i, ++j) {
        const std::uint32_t a = std::bit_cast<std::uint32_t>(g[i]) & 0x7fffffffu;
        m[j] = a > m[j] ? a : m[j];
    }
    std::uint32_t out = 0;
    for (std::size_t j = 0; j < L; ++j) out = m[j] > out ? m[j] : out;
    return out;
}

/// Bits of float infinity: max_abs_bits at or above it means a non-finite element.
inline constexpr std::uint32_t infinity_bits = 0x7f800000u;

/// The moments of v = g (+ r) over n elements. Squares/Sum/Max select what is computed; without Max the
/// finiteness check rests on the sums (NaN and infinities propagate into them; a sum of squares beyond float's
/// range is reported as non-finite too).
template <bool EF, bool Squares, bool Sum>
inline group_moments moments(const float* g, const float* r, std::size_t n) {
    group_moments out;
    run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA { moments_kernel<EF, Squares, Sum>(g, r, n, out); });
    out.finite = out.finite && std::isfinite(out.sum_squares) && std::isfinite(out.sum);
    return out;
}

/// moments() over a bucket, in chunks of whole blocks on the thread pool; the blocks' partials are added in block
/// order, so the result equals the one-thread result bit for bit.
template <bool EF, bool Squares, bool Sum>
inline group_moments moments_parallel(const float* g, const float* r, std::size_t n, const parallelism& how) {
    const chunk_plan plan = plan_chunks(n, tuning::moment_block, how);
    if (plan.count == 1) return moments<EF, Squares, Sum>(g, r, n);
    std::vector<group_moments> blocks(ceil_div_size(n, tuning::moment_block));
    run_chunks(plan, [&](std::size_t, std::size_t lo, std::size_t hi) {
        run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA {
            for (std::size_t b = lo; b < hi; b += tuning::moment_block) {
                group_moments part;
                moments_kernel<EF, Squares, Sum>(g + b, EF ? r + b : r, std::min(tuning::moment_block, n - b), part);
                blocks[b / tuning::moment_block] = part;
            }
        });
    });
    group_moments out;
    for (const auto& part : blocks) {
        out.sum += part.sum;
        out.sum_squares += part.sum_squares;
        out.max_abs = part.max_abs > out.max_abs ? part.max_abs : out.max_abs;
        out.finite = out.finite && part.finite;
    }
    out.finite = out.finite && std::isfinite(out.sum_squares) && std::isfinite(out.sum);
    return out;
}
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
