#pragma once
// Stochastic rounding (detail/stochastic_round.hpp) with AVX-512 intrinsics, 64 elements per step, byte codes,
// with a faster form for one level (s = 1); the same bits as the portable kernel, which also finishes the tail.

#include <cstddef>
#include <cstdint>

#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/simd.hpp"
#include "hitch/compress/detail/stochastic_round.hpp"
#include "hitch/compress/detail/x86/counter_rng_avx512.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
#if HITCH_COMPRESS_X86
HITCH_COMPRESS_AVX512_WARNINGS_BEGIN
/// The constants of quantize_avx512, broadcast once.
struct quantize_avx512_constants {
    __m512 abs_mask, clip, to_levels, s, unit;
    __m512i m1, m2, one_exp, levels, minus_one, zero, key;
    __m512 two;
    __m512i two_code;
};

/// Codes of the 16 elements at g (counters `counter`) as 32-bit lanes (and, with EF, their residuals): the
/// computation of quantize_kernel, with the random bits of mix16_avx512 (the last xor-shift folded into the
/// mantissa extraction); the bits are those of counter_rng::bits.
template <bool EF, bool Clip>
HITCH_TARGET_AVX512_INLINE __m512i quantize16_avx512(const quantize_avx512_constants& k, const float* g,
                                                     const float* r_in, float* r_out, __m512i counter) {
    __m512 v = _mm512_loadu_ps(g);
    if constexpr (EF) v = _mm512_add_ps(v, _mm512_loadu_ps(r_in));
    __m512 a = _mm512_and_ps(v, k.abs_mask);
    if constexpr (Clip) a = _mm512_min_ps(a, k.clip);
    const __m512 y = _mm512_min_ps(_mm512_mul_ps(a, k.to_levels), k.s);
    const __m512i x = mix16_avx512(counter, k.key, k.m1, k.m2);
    const __m512i mantissa =
        _mm512_ternarylogic_epi32(_mm512_srli_epi32(x, 9), _mm512_srli_epi32(x, 25), k.one_exp, 0xbe);  // (a ^ b) | c
    const __m512i level = _mm512_min_epi32(
        _mm512_add_epi32(_mm512_cvttps_epi32(_mm512_add_ps(y, _mm512_castsi512_ps(mantissa))), k.minus_one), k.levels);
    const __mmask16 sent_any = _mm512_cmpgt_epi32_mask(level, k.zero);
    const __m512i bits = _mm512_castps_si512(v);
    if constexpr (EF) {
        // v - (-sent) is v + sent exactly, so the negative lanes add.
        const __m512 sent = _mm512_mul_ps(_mm512_cvtepi32_ps(level), k.unit);
        const __mmask16 negative = _mm512_mask_cmplt_epi32_mask(sent_any, bits, k.zero);
        _mm512_storeu_ps(r_out, _mm512_mask_add_ps(_mm512_sub_ps(v, sent), negative, v, sent));
    }
    return _mm512_or_si512(_mm512_slli_epi32(level, 1), _mm512_maskz_srli_epi32(sent_any, bits, 31));
}

/// quantize16_avx512 for s = 1 (TernGrad, QSGD with one level): y + f lies in [1, 3), so the level,
/// min(floor(y + f) - 1, 1), is 1 exactly when y + f >= 2, and y needs no clamp to s (above 1 it still gives 1).
template <bool EF, bool Clip>
HITCH_TARGET_AVX512_INLINE __m512i quantize16_avx512_binary(const quantize_avx512_constants& k, const float* g,
                                                            const float* r_in, float* r_out, __m512i counter) {
    __m512 v = _mm512_loadu_ps(g);
    if constexpr (EF) v = _mm512_add_ps(v, _mm512_loadu_ps(r_in));
    __m512 a = _mm512_and_ps(v, k.abs_mask);
    if constexpr (Clip) a = _mm512_min_ps(a, k.clip);
    const __m512 y = _mm512_mul_ps(a, k.to_levels);
    const __m512i x = mix16_avx512(counter, k.key, k.m1, k.m2);
    const __m512i mantissa =
        _mm512_ternarylogic_epi32(_mm512_srli_epi32(x, 9), _mm512_srli_epi32(x, 25), k.one_exp, 0xbe);
    const __mmask16 sent = _mm512_cmp_ps_mask(_mm512_add_ps(y, _mm512_castsi512_ps(mantissa)), k.two, _CMP_GE_OQ);
    const __m512i bits = _mm512_castps_si512(v);
    if constexpr (EF) {
        // v - unit where +unit was sent, v + unit where -unit was, v itself (v - 0) where nothing was.
        const __mmask16 negative = _mm512_mask_cmplt_epi32_mask(sent, bits, k.zero);
        const __m512 r = _mm512_mask_sub_ps(v, sent & static_cast<__mmask16>(~negative), v, k.unit);
        _mm512_storeu_ps(r_out, _mm512_mask_add_ps(r, negative, v, k.unit));
    }
    return _mm512_maskz_or_epi32(sent, k.two_code, _mm512_srli_epi32(bits, 31));  // (1 << 1) | sign
}

template <bool EF, bool Clip, bool Binary>
HITCH_TARGET_AVX512_INLINE __m512i quantize16_avx512_any(const quantize_avx512_constants& k, const float* g,
                                                         const float* r_in, float* r_out, __m512i counter) {
    if constexpr (Binary)
        return quantize16_avx512_binary<EF, Clip>(k, g, r_in, r_out, counter);
    else
        return quantize16_avx512<EF, Clip>(k, g, r_in, r_out, counter);
}

/// The same computation as quantize_kernel, 64 elements per step (four vectors packed to bytes together).
/// With `ahead`, the n floats there are prefetched, four cache lines per step.
template <bool EF, bool Clip, bool Binary>
HITCH_TARGET_AVX512 inline void quantize_avx512(const float* g, const float* r_in, float* r_out, std::size_t n,
                                                std::uint32_t first, counter_rng rng, quantizer q, std::uint8_t* codes,
                                                const float* ahead = nullptr) {
    const std::uint32_t k0 = rng.key0();
    const quantize_avx512_constants k{_mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff)),
                                      _mm512_set1_ps(q.clip),
                                      _mm512_set1_ps(q.to_levels),
                                      _mm512_set1_ps(q.s),
                                      _mm512_set1_ps(q.unit),
                                      _mm512_set1_epi32(0x7feb352d),
                                      _mm512_set1_epi32(static_cast<int>(0x846ca68bu)),
                                      _mm512_set1_epi32(0x3f800000),
                                      _mm512_set1_epi32(q.levels),
                                      _mm512_set1_epi32(-1),
                                      _mm512_setzero_si512(),
                                      _mm512_set1_epi32(static_cast<int>(k0 ^ (k0 >> 16))),
                                      _mm512_set1_ps(2.0f),
                                      _mm512_set1_epi32(2)};
    const __m512i sixteen = _mm512_set1_epi32(16);
    // After the two packs, dword 4 l + j holds vector j's lane l: gather them back in element order.
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512i counter = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first)),
                                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        if (ahead != nullptr)
            for (std::size_t line = 0; line < 64; line += 16)
                _mm_prefetch(reinterpret_cast<const char*>(ahead + i + line), _MM_HINT_T0);
        __m512i c[4];
        for (std::size_t j = 0; j < 4; ++j) {
            const std::size_t at = i + 16 * j;
            c[j] = quantize16_avx512_any<EF, Clip, Binary>(k, g + at, EF ? r_in + at : r_in, EF ? r_out + at : r_out,
                                                           counter);
            counter = _mm512_add_epi32(counter, sixteen);
        }
        const __m512i bytes = _mm512_packus_epi16(_mm512_packus_epi32(c[0], c[1]), _mm512_packus_epi32(c[2], c[3]));
        _mm512_storeu_si512(codes + i, _mm512_permutexvar_epi32(order, bytes));
    }
    for (; i + 16 <= n; i += 16) {
        const __m512i c =
            quantize16_avx512_any<EF, Clip, Binary>(k, g + i, EF ? r_in + i : r_in, EF ? r_out + i : r_out, counter);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi32_epi8(c));
        counter = _mm512_add_epi32(counter, sixteen);
    }
    quantize_kernel<EF, Clip>(g + i, EF ? r_in + i : r_in, EF ? r_out + i : r_out, n - i,
                              first + static_cast<std::uint32_t>(i), rng, q, codes + i);
}
HITCH_COMPRESS_AVX512_WARNINGS_END
#endif
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
