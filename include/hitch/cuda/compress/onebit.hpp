#pragma once
// compress::onebit's arithmetic for host and device (no CUDA header): how a bucket is cut into groups and 512-element
// sign blocks, the sixteen double lanes of a block in the host's order (compress/onebit.hpp's sign_pass: element o of
// a block into lane o % 16, the lanes folded in lane order), the order the block sums are added in, the two
// reconstruction values and the decoder's checks. onebit.cuh runs these per thread; the host tests run them against
// the CPU codec.

#include <cstddef>
#include <cstdint>

#include "hitch/cuda/compress/cast.hpp"
#include "hitch/cuda/detail/hd.hpp"

namespace hitch::cuda::compress::detail {

/// Elements per sign block and lanes per block (compress::detail::sign_block, sign_lanes), and the run of block sums a
/// one-group bucket adds before adding the runs (compress::detail::sign_sum_blocks).
inline constexpr std::size_t onebit_block = 512;
inline constexpr unsigned onebit_lanes = 16;
inline constexpr std::size_t onebit_sum_blocks = 128;

/// One lane's sums of the non-negative and the negative elements (by the sign bit).
struct sign_lane {
    double positive = 0.0;
    double negative = 0.0;
};

/// Adds v to a lane; returns its sign bit.
HITCH_HD_INLINE bool sign_add(sign_lane& l, float v) noexcept {
    const bool s = sign_bit(v);
    l.positive = hd::add(l.positive, s ? 0.0 : static_cast<double>(v));
    l.negative = hd::add(l.negative, s ? static_cast<double>(v) : 0.0);
    return s;
}

/// A block's (or a run's, or a group's) sums.
struct sign_sums {
    double positive = 0.0;
    double negative = 0.0;
    std::uint64_t negatives = 0;
};

HITCH_HD_INLINE void sign_accumulate(sign_sums& total, const sign_sums& part) noexcept {
    total.positive = hd::add(total.positive, part.positive);
    total.negative = hd::add(total.negative, part.negative);
    total.negatives += part.negatives;
}

/// How a bucket of n elements is cut: groups of `size` elements (the last may be shorter), each into sign blocks of
/// 512 from its start; block b is block b % per_group of group b / per_group. The block sums are added in runs of
/// `run` blocks (a group's blocks; or onebit_sum_blocks when the bucket is one group), then the runs in order.
struct onebit_plan {
    std::size_t n = 0;
    std::size_t size = 0;       // elements per group
    std::size_t groups = 0;     // G
    std::size_t per_group = 0;  // sign blocks of a full group
    std::size_t blocks = 0;     // sign blocks of the bucket
    std::size_t run = 1;        // blocks per run of sums
    std::size_t runs = 0;       // runs per group (1 unless the bucket is one group)

    [[nodiscard]] HITCH_HD_INLINE std::size_t group_of(std::size_t b) const noexcept { return b / per_group; }
    [[nodiscard]] HITCH_HD_INLINE std::size_t start_of(std::size_t b) const noexcept {
        return group_of(b) * size + (b % per_group) * onebit_block;
    }
    [[nodiscard]] HITCH_HD_INLINE std::size_t length_of(std::size_t b) const noexcept {
        const std::size_t start = start_of(b), group_end = (group_of(b) + 1) * size;
        const std::size_t end = group_end < n ? group_end : n;
        return end - start < onebit_block ? end - start : onebit_block;
    }
    /// The group's field of the message: 0 when the bucket is one group.
    [[nodiscard]] HITCH_HD_INLINE std::uint64_t group_field(std::size_t group_size) const noexcept {
        return group_size >= n ? 0 : group_size;
    }
};

[[nodiscard]] HITCH_HD_INLINE constexpr std::size_t onebit_ceil(std::size_t a, std::size_t b) noexcept {
    return a / b + (a % b != 0);
}

/// The plan for n elements with the codec's group_size option (0: the whole bucket).
[[nodiscard]] HITCH_HD_INLINE onebit_plan make_onebit_plan(std::size_t n, std::size_t group_size) noexcept {
    onebit_plan p;
    p.n = n;
    p.size = group_size == 0 || group_size >= n ? n : group_size;
    p.groups = n == 0 ? 0 : onebit_ceil(n, p.size);
    p.per_group = p.size == 0 ? 1 : onebit_ceil(p.size, onebit_block);
    if (p.groups != 0) {
        const std::size_t last = n - (p.groups - 1) * p.size;
        p.blocks = (p.groups - 1) * p.per_group + onebit_ceil(last, onebit_block);
    }
    if (p.groups == 1) {
        p.run = onebit_sum_blocks;
        p.runs = onebit_ceil(p.blocks, onebit_sum_blocks);
    } else {
        p.run = p.per_group;
        p.runs = 1;
    }
    return p;
}

/// The two reconstruction values of a group of `len` elements with these sums (onebit's `values`).
struct onebit_pair {
    float a = 0.0f;  // mean of the non-negative elements
    float b = 0.0f;  // mean of the negative elements
};
[[nodiscard]] HITCH_HD_INLINE onebit_pair onebit_values(const sign_sums& s, std::size_t len) noexcept {
    const std::uint64_t negatives = s.negatives, positives = len - negatives;
    onebit_pair p;
    p.a = positives == 0 ? 0.0f : static_cast<float>(hd::div(s.positive, static_cast<double>(positives)));
    p.b = negatives == 0 ? 0.0f : static_cast<float>(hd::div(s.negative, static_cast<double>(negatives)));
    return p;
}

/// Whether a group's sums refuse the bucket (NaN or an infinity met).
[[nodiscard]] HITCH_HD_INLINE bool onebit_finite(const sign_sums& s) noexcept {
    return finite(s.positive) && finite(s.negative);
}

/// The residual of one element: (g + r_in) - D(message).
[[nodiscard]] HITCH_HD_INLINE float onebit_residual(float g, float r_in, onebit_pair p) noexcept {
    const float v = hd::add(g, r_in);
    return hd::sub(v, sign_bit(v) ? p.b : p.a);
}

/// The decoder's check of a group's values: true when they are refused.
[[nodiscard]] HITCH_HD_INLINE bool onebit_pair_invalid(float a, float b) noexcept {
    return !finite(a) || !finite(b) || sign_bit(a) || !(b <= 0.0f);
}

}  // namespace hitch::cuda::compress::detail
