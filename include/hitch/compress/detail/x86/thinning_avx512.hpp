#pragma once
// Thinning of 2-bit codes (detail/thinning.hpp) with AVX-512 and BMI2, 64 draws per step; the same bits as the
// portable kernel, which also finishes the tail.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/simd.hpp"
#include "hitch/compress/detail/thinning.hpp"
#include "hitch/compress/detail/x86/counter_rng_avx512.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
#if HITCH_COMPRESS_X86
HITCH_COMPRESS_AVX512_WARNINGS_BEGIN
/// The keep mask of 16 elements at `counter`: (bits(i) >> 9) < threshold, the hash folded as in quantize16_avx512.
HITCH_TARGET_AVX512_INLINE __mmask16 keep16_avx512(__m512i counter, __m512i key, __m512i m1, __m512i m2,
                                                   __m512i limit) {
    const __m512i x = mix16_avx512(counter, key, m1, m2);
    return _mm512_cmplt_epu32_mask(_mm512_xor_si512(_mm512_srli_epi32(x, 9), _mm512_srli_epi32(x, 25)), limit);
}

/// thin_kernel, 64 draws per step: four vectors of draws, their keep bits spread over the code pairs with PDEP.
HITCH_TARGET_AVX512 inline void thin_avx512(std::byte* codes, std::size_t n, std::uint32_t first, counter_rng rng,
                                            std::uint32_t threshold) {
    const std::uint32_t k0 = rng.key0();
    const __m512i key = _mm512_set1_epi32(static_cast<int>(k0 ^ (k0 >> 16)));
    const __m512i m1 = _mm512_set1_epi32(0x7feb352d), m2 = _mm512_set1_epi32(static_cast<int>(0x846ca68bu));
    const __m512i limit = _mm512_set1_epi32(static_cast<int>(threshold));
    const __m512i sixteen = _mm512_set1_epi32(16);
    __m512i counter = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first)),
                                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    constexpr std::uint64_t low_bits = 0x5555555555555555ull;
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        std::uint64_t keep[4];
        for (auto& k : keep) {
            k = keep16_avx512(counter, key, m1, m2, limit);
            counter = _mm512_add_epi32(counter, sixteen);
        }
        std::uint64_t word[2];
        std::memcpy(word, codes + i / 4, 16);
        word[0] &= _pdep_u64(keep[0] | keep[1] << 16, low_bits) * 3u;
        word[1] &= _pdep_u64(keep[2] | keep[3] << 16, low_bits) * 3u;
        std::memcpy(codes + i / 4, word, 16);
    }
    thin_kernel(codes + i / 4, n - i, first + static_cast<std::uint32_t>(i), rng, threshold);
}
HITCH_COMPRESS_AVX512_WARNINGS_END
#endif
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
