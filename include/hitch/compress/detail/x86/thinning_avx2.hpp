#pragma once
// Thinning of 2-bit codes (detail/thinning.hpp) with AVX2 and BMI2, 32 hashes per 64 codes; the same bits as the
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
/// counter_rng::bits of eight pairs' counters (below 2^16).
HITCH_TARGET_AVX2_INLINE __m256i pair_hashes8_avx2(__m256i counter, __m256i key, __m256i m1, __m256i m2) {
    const __m256i x = mix8_avx2(counter, key, m1, m2);
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

/// The byte movemask, widened for shifting into the upper half of a 64-bit mask.
HITCH_TARGET_AVX2_INLINE std::uint64_t byte_mask_avx2(__m256i x) {
    return static_cast<std::uint32_t>(_mm256_movemask_epi8(x));
}

/// Two bits per element of sixteen 16-bit halves h: set where h < T >> 7 (limit and h with their sign bits
/// flipped: the signed compare is then the unsigned one) or where h ties with it (tie, settled later).
HITCH_TARGET_AVX2_INLINE std::uint64_t keep_mask_avx2(__m256i h, __m256i tie, __m256i limit, __m256i flip) {
    return byte_mask_avx2(_mm256_or_si256(_mm256_cmpgt_epi16(limit, _mm256_xor_si256(h, flip)), tie));
}

/// thin_kernel, 64 codes per step: four vectors of eight pair hashes, each read as sixteen 16-bit halves in element
/// order, compared with T >> 7 (unsigned, by flipping the sign bits); their byte movemask has two bits per element,
/// the code pair's mask itself. Halves equal to T >> 7 keep their codes for thin_ties. Counters first (even) to
/// first + n lie in one random-number block (below 2^16), so the pairs' counters are below 2^15.
HITCH_TARGET_AVX2 inline void thin_avx2(std::byte* codes, std::size_t n, std::uint32_t first, counter_rng rng,
                                        std::uint32_t threshold) {
    if (threshold >= (1u << 23)) return;  // every code survives
    const std::uint32_t k0 = rng.key0();
    const __m256i key = _mm256_set1_epi32(static_cast<int>(k0 ^ (k0 >> 16)));
    const __m256i m1 = _mm256_set1_epi32(0x7feb352d), m2 = _mm256_set1_epi32(static_cast<int>(0x846ca68bu));
    const auto high = static_cast<std::uint16_t>(threshold >> 7);
    const __m256i flip = _mm256_set1_epi16(static_cast<short>(0x8000));
    const __m256i limit = _mm256_set1_epi16(static_cast<short>(high ^ 0x8000u));
    const __m256i tie = _mm256_set1_epi16(static_cast<short>(high));
    const __m256i eight = _mm256_set1_epi32(8), sixteen = _mm256_set1_epi32(16);
    const __m256i twenty_four = _mm256_set1_epi32(24), thirty_two = _mm256_set1_epi32(32);
    __m256i counter =
        _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first / 2)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    constexpr std::uint64_t low_bits = 0x5555555555555555ull;
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        // The codes 1024 elements ahead (a cache line every fourth step), so their reads overlap the hashing.
        if (i % 256 == 0 && i + 1024 < n)
            _mm_prefetch(reinterpret_cast<const char*>(codes + (i + 1024) / 4), _MM_HINT_T0);
        std::uint64_t word[2];
        std::memcpy(word, codes + i / 4, 16);
        if ((word[0] | word[1]) == 0) {  // nothing to thin (the counters still advance)
            counter = _mm256_add_epi32(counter, thirty_two);
            continue;
        }
        // Written out, not looped: the masks stay in registers.
        const __m256i h0 = pair_hashes8_avx2(counter, key, m1, m2);
        const __m256i h1 = pair_hashes8_avx2(_mm256_add_epi32(counter, eight), key, m1, m2);
        const __m256i h2 = pair_hashes8_avx2(_mm256_add_epi32(counter, sixteen), key, m1, m2);
        const __m256i h3 = pair_hashes8_avx2(_mm256_add_epi32(counter, twenty_four), key, m1, m2);
        counter = _mm256_add_epi32(counter, thirty_two);
        const __m256i e0 = _mm256_cmpeq_epi16(h0, tie), e1 = _mm256_cmpeq_epi16(h1, tie);
        const __m256i e2 = _mm256_cmpeq_epi16(h2, tie), e3 = _mm256_cmpeq_epi16(h3, tie);
        word[0] &= keep_mask_avx2(h0, e0, limit, flip) | keep_mask_avx2(h1, e1, limit, flip) << 32;
        word[1] &= keep_mask_avx2(h2, e2, limit, flip) | keep_mask_avx2(h3, e3, limit, flip) << 32;
        std::memcpy(codes + i / 4, word, 16);
        const __m256i any = _mm256_or_si256(_mm256_or_si256(e0, e1), _mm256_or_si256(e2, e3));
        if (!_mm256_testz_si256(any, any)) {
            const std::uint64_t t0 = byte_mask_avx2(e0) | byte_mask_avx2(e1) << 32,
                                t1 = byte_mask_avx2(e2) | byte_mask_avx2(e3) << 32;
            thin_ties(codes + i / 4, _pext_u64(t0, low_bits) | _pext_u64(t1, low_bits) << 32,
                      first + static_cast<std::uint32_t>(i), rng, threshold);
        }
    }
    thin_kernel(codes + i / 4, n - i, first + static_cast<std::uint32_t>(i), rng, threshold);
}
#endif
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
