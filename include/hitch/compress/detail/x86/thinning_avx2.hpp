#pragma once
// Thinning of 2-bit codes (detail/thinning.hpp) with AVX2 and BMI2, 64 draws per step; the same bits as the
// portable kernel, which also finishes the tail.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/simd.hpp"
#include "hitch/compress/detail/thinning.hpp"
#include "hitch/compress/detail/x86/counter_rng_avx2.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
#if HITCH_COMPRESS_X86
/// thin_kernel, 64 draws per step: eight vectors of draws, their keep bits (one per lane, by movemask) spread over
/// the code pairs with PDEP. A draw (bits >> 9) and the threshold (at most 2^23) are below 2^31, so the signed
/// compare is the unsigned one. Counters first to first + n lie in one random-number block (below 2^16).
HITCH_TARGET_AVX2 inline void thin_avx2(std::byte* codes, std::size_t n, std::uint32_t first, counter_rng rng,
                                        std::uint32_t threshold) {
    const std::uint32_t k0 = rng.key0();
    const __m256i key = _mm256_set1_epi32(static_cast<int>(k0 ^ (k0 >> 16)));
    const __m256i m1 = _mm256_set1_epi32(0x7feb352d), m2 = _mm256_set1_epi32(static_cast<int>(0x846ca68bu));
    const __m256i limit = _mm256_set1_epi32(static_cast<int>(threshold));
    const __m256i eight = _mm256_set1_epi32(8);
    __m256i counter =
        _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    constexpr std::uint64_t low_bits = 0x5555555555555555ull;
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        std::uint64_t word[2];
        std::memcpy(word, codes + i / 4, 16);
        if ((word[0] | word[1]) == 0) {  // nothing to thin (the counters still advance)
            counter = _mm256_add_epi32(counter, _mm256_set1_epi32(64));
            continue;
        }
        std::uint64_t keep = 0;
        for (unsigned j = 0; j < 8; ++j) {
            const __m256i draw = mantissa_bits8_avx2(mix8_avx2(counter, key, m1, m2));
            const auto lanes =
                static_cast<std::uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(limit, draw))));
            keep |= static_cast<std::uint64_t>(lanes) << (8 * j);
            counter = _mm256_add_epi32(counter, eight);
        }
        word[0] &= _pdep_u64(keep & 0xffffffffull, low_bits) * 3u;
        word[1] &= _pdep_u64(keep >> 32, low_bits) * 3u;
        std::memcpy(codes + i / 4, word, 16);
    }
    thin_kernel(codes + i / 4, n - i, first + static_cast<std::uint32_t>(i), rng, threshold);
}
#endif
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
