#pragma once
// Thinning of 2-bit codes (one-pass TernGrad): each non-zero code survives with a given probability, drawn from
// its own counter-based stream, one 32-bit hash per two elements. The portable kernel and the decision rule.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/simd.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
/// Counter of the draw that settles a tie (thin_keeps): above every pair's counter (below 2^15).
inline constexpr std::uint32_t thin_tie_counter = 32768;

/// Whether a non-zero code of element i survives: with probability T / 2^23, T at most 2^23. Element i's draw is
/// the 23-bit number D = H << 7 | E, kept iff D < T: H is half of a counter-based hash of i's pair (counter i / 2;
/// the low half for even i, the high half for odd i, independent of each other as halves of a bijection of the
/// 32-bit counter hash), E 7 bits of a second hash (counter thin_tie_counter + i / 2) read only when H = T >> 7
/// (probability 2^-16). So one hash decides two elements, and a vector of 32-bit hashes compares as 16-bit lanes.
/// The draws are independent of the rounding's (a generator of their own).
HITCH_COMPRESS_ALWAYS_INLINE bool thin_keeps(const counter_rng& rng, std::uint32_t i, std::uint32_t threshold) {
    if (threshold >= (1u << 23)) return true;
    const unsigned shift = 16 * (i & 1u);
    const std::uint32_t h = (rng.bits(i >> 1) >> shift) & 0xffffu, high = threshold >> 7;
    if (h != high) return h < high;
    return ((rng.bits(thin_tie_counter + (i >> 1)) >> shift) & 127u) < (threshold & 127u);
}

/// Thins the codes of elements [first, first + n) of one random-number block, 2 bits each, element first at bit 0
/// of codes[0] (first even): each non-zero code survives iff thin_keeps. The portable kernel;
/// detail/x86/thinning_avx2.hpp and thinning_avx512.hpp compute the same bits.
HITCH_COMPRESS_ALWAYS_INLINE void thin_kernel(std::byte* codes, std::size_t n, std::uint32_t first, counter_rng rng,
                                              std::uint32_t threshold) {
    for (std::size_t i = 0; i < n; ++i) {
        const std::size_t at = i / 4;
        const auto shift = static_cast<unsigned>(2 * (i % 4));
        const auto byte = static_cast<unsigned>(codes[at]);
        if (((byte >> shift) & 3u) == 0) continue;
        if (!thin_keeps(rng, first + static_cast<std::uint32_t>(i), threshold))
            codes[at] = static_cast<std::byte>(byte & ~(3u << shift));
    }
}

/// Settles the ties of one step of a wide kernel: `ties` has bit j set where element first + j's half-hash equals
/// T >> 7; each such non-zero code is decided by thin_keeps (rare: probability 2^-16 per element).
HITCH_COMPRESS_ALWAYS_INLINE void thin_ties(std::byte* codes, std::uint64_t ties, std::uint32_t first,
                                            const counter_rng& rng, std::uint32_t threshold) {
    for (; ties != 0; ties &= ties - 1) {
        const auto j = static_cast<unsigned>(std::countr_zero(ties));
        const unsigned shift = 2 * (j % 4);
        const auto byte = static_cast<unsigned>(codes[j / 4]);
        if (((byte >> shift) & 3u) != 0 && !thin_keeps(rng, first + j, threshold))
            codes[j / 4] = static_cast<std::byte>(byte & ~(3u << shift));
    }
}
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
