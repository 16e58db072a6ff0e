#pragma once
// Thinning of 2-bit codes (detail/thinning.hpp) with AVX-512 and BMI2, 32 hashes per 64 codes; the same bits as
// the portable kernel, which also finishes the tail.

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
/// thin_kernel, 64 codes per step: two vectors of sixteen pair hashes, each compared as 32 16-bit halves in element
/// order with T >> 7, the keep bits spread over the code pairs with PDEP. Halves equal to T >> 7 keep their codes
/// for thin_ties.
HITCH_TARGET_AVX512 inline void thin_avx512(std::byte* codes, std::size_t n, std::uint32_t first, counter_rng rng,
                                            std::uint32_t threshold) {
    if (threshold >= (1u << 23)) return;  // every code survives
    const std::uint32_t k0 = rng.key0();
    const __m512i key = _mm512_set1_epi32(static_cast<int>(k0 ^ (k0 >> 16)));
    const __m512i m1 = _mm512_set1_epi32(0x7feb352d), m2 = _mm512_set1_epi32(static_cast<int>(0x846ca68bu));
    const __m512i limit = _mm512_set1_epi16(static_cast<short>(threshold >> 7));
    const __m512i sixteen = _mm512_set1_epi32(16);
    __m512i counter = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first / 2)),
                                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    constexpr std::uint64_t low_bits = 0x5555555555555555ull;
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        // The codes 1024 elements ahead (a cache line every fourth step), so their reads overlap the hashing.
        if (i % 256 == 0 && i + 1024 < n)
            _mm_prefetch(reinterpret_cast<const char*>(codes + (i + 1024) / 4), _MM_HINT_T0);
        std::uint64_t keep = 0, ties = 0;
        for (unsigned v = 0; v < 2; ++v) {
            const __m512i x = mix16_avx512(counter, key, m1, m2);
            const __m512i h = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
            const auto lt = static_cast<std::uint64_t>(_mm512_cmplt_epu16_mask(h, limit));
            const auto eq = static_cast<std::uint64_t>(_mm512_cmpeq_epi16_mask(h, limit));
            keep |= (lt | eq) << (32 * v);
            ties |= eq << (32 * v);
            counter = _mm512_add_epi32(counter, sixteen);
        }
        std::uint64_t word[2];
        std::memcpy(word, codes + i / 4, 16);
        word[0] &= _pdep_u64(keep & 0xffffffffull, low_bits) * 3u;
        word[1] &= _pdep_u64(keep >> 32, low_bits) * 3u;
        std::memcpy(codes + i / 4, word, 16);
        if (ties != 0) thin_ties(codes + i / 4, ties, first + static_cast<std::uint32_t>(i), rng, threshold);
    }
    thin_kernel(codes + i / 4, n - i, first + static_cast<std::uint32_t>(i), rng, threshold);
}
HITCH_COMPRESS_AVX512_WARNINGS_END
#endif
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
