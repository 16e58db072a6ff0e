#pragma once
// Thinning of 2-bit codes (one-pass TernGrad): each non-zero code survives with a given probability, drawn from
// its own counter-based stream. The portable kernel; detail/x86/thinning_avx512.hpp computes the same bits.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/simd.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
/// A non-zero code of element i survives with probability T / 2^23: it does iff (bits(i) >> 9) < T, bits from a
/// counter-based generator of its own (so the draws are independent of the rounding's). `codes` holds elements
/// [first, first + n) of one random-number block, 2 bits each, element first at bit 0 of codes[0] (first and n
/// multiples of 16 but for the block's last piece).
HITCH_COMPRESS_ALWAYS_INLINE void thin_kernel(std::byte* codes, std::size_t n, std::uint32_t first, counter_rng rng,
                                              std::uint32_t threshold) {
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        std::uint32_t word;
        std::memcpy(&word, codes + i / 4, 4);
        if (word == 0) continue;
        std::uint32_t keep = 0;
        for (std::uint32_t j = 0; j < 16; ++j)
            keep |= static_cast<std::uint32_t>((rng.bits(first + static_cast<std::uint32_t>(i) + j) >> 9) < threshold)
                    << j;
        std::uint32_t mask = 0;
        for (std::uint32_t j = 0; j < 16; ++j) mask |= ((keep >> j) & 1u) * (3u << (2 * j));
        word &= mask;
        std::memcpy(codes + i / 4, &word, 4);
    }
    for (; i < n; ++i) {
        const std::size_t at = i / 4;
        const auto shift = static_cast<unsigned>(2 * (i % 4));
        const auto byte = static_cast<unsigned>(codes[at]);
        if (((byte >> shift) & 3u) == 0) continue;
        if ((rng.bits(first + static_cast<std::uint32_t>(i)) >> 9) >= threshold)
            codes[at] = static_cast<std::byte>(byte & ~(3u << shift));
    }
}
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
