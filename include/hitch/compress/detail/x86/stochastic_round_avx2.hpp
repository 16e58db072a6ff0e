#pragma once
// Stochastic rounding (detail/stochastic_round.hpp) with AVX2 intrinsics, 32 elements per step, byte codes;
// the same bits as the portable kernel, which also finishes the tail.

#include <cstddef>
#include <cstdint>

#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/simd.hpp"
#include "hitch/compress/detail/stochastic_round.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
#if HITCH_COMPRESS_X86
/// The constants of quantize_avx2, broadcast once.
struct quantize_avx2_constants {
    __m256 abs_mask, clip, to_levels, s, unit;
    __m256i lane, one_exp, k0, one, m1, m2, levels, zero;
};

/// Codes of elements [i, i + 8) as 32-bit lanes (and, with EF, their residuals).
template <bool EF, bool Clip>
HITCH_TARGET_AVX2_INLINE __m256i quantize8_avx2(const quantize_avx2_constants& k, const float* g, const float* r_in,
                                                float* r_out, std::uint32_t index) {
    __m256 v = _mm256_loadu_ps(g);
    if constexpr (EF) v = _mm256_add_ps(v, _mm256_loadu_ps(r_in));
    __m256 a = _mm256_and_ps(v, k.abs_mask);
    if constexpr (Clip) a = _mm256_min_ps(a, k.clip);
    const __m256 y = _mm256_min_ps(_mm256_mul_ps(a, k.to_levels), k.s);
    __m256i x = _mm256_xor_si256(_mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(index)), k.lane), k.k0);
    x = _mm256_mullo_epi32(_mm256_xor_si256(x, _mm256_srli_epi32(x, 16)), k.m1);
    x = _mm256_mullo_epi32(_mm256_xor_si256(x, _mm256_srli_epi32(x, 15)), k.m2);
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    const __m256 f = _mm256_castsi256_ps(_mm256_or_si256(_mm256_srli_epi32(x, 9), k.one_exp));
    const __m256i level = _mm256_min_epi32(_mm256_sub_epi32(_mm256_cvttps_epi32(_mm256_add_ps(y, f)), k.one), k.levels);
    const __m256i negative = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 31),
                                              _mm256_srli_epi32(_mm256_cmpgt_epi32(level, k.zero), 31));
    if constexpr (EF) {
        const __m256 sent = _mm256_mul_ps(_mm256_cvtepi32_ps(level), k.unit);
        const __m256 signed_sent = _mm256_xor_ps(sent, _mm256_castsi256_ps(_mm256_slli_epi32(negative, 31)));
        _mm256_storeu_ps(r_out, _mm256_sub_ps(v, signed_sent));
    }
    return _mm256_or_si256(_mm256_slli_epi32(level, 1), negative);
}

/// The same computation as quantize_kernel, 32 elements per step (four vectors packed to bytes together).
template <bool EF, bool Clip>
HITCH_TARGET_AVX2 inline void quantize_avx2(const float* g, const float* r_in, float* r_out, std::size_t n,
                                            std::uint32_t first, counter_rng rng, quantizer q, std::uint8_t* codes) {
    const quantize_avx2_constants k{_mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)),
                                    _mm256_set1_ps(q.clip),
                                    _mm256_set1_ps(q.to_levels),
                                    _mm256_set1_ps(q.s),
                                    _mm256_set1_ps(q.unit),
                                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                    _mm256_set1_epi32(0x3f800000),
                                    _mm256_set1_epi32(static_cast<int>(rng.key0())),
                                    _mm256_set1_epi32(1),
                                    _mm256_set1_epi32(0x7feb352d),
                                    _mm256_set1_epi32(static_cast<int>(0x846ca68bu)),
                                    _mm256_set1_epi32(q.levels),
                                    _mm256_setzero_si256()};
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    std::size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i c[4];
        for (std::size_t j = 0; j < 4; ++j) {
            const std::size_t at = i + 8 * j;
            c[j] = quantize8_avx2<EF, Clip>(k, g + at, EF ? r_in + at : r_in, EF ? r_out + at : r_out,
                                            first + static_cast<std::uint32_t>(at));
        }
        const __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(c[0], c[1]), _mm256_packus_epi32(c[2], c[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), _mm256_permutevar8x32_epi32(bytes, order));
    }
    quantize_kernel<EF, Clip>(g + i, EF ? r_in + i : r_in, EF ? r_out + i : r_out, n - i,
                              first + static_cast<std::uint32_t>(i), rng, q, codes + i);
}
#endif
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
