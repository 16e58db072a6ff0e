#pragma once
// Stochastic rounding (detail/stochastic_round.hpp) with AVX2 intrinsics, 32 elements per step, byte codes, with a
// faster form for one level (s = 1); the same bits as the portable kernel, which also finishes the tail.
//
// Without error feedback the levels are computed in 32-bit lanes, four vectors are packed to bytes, and the codes
// are put together on the 32 bytes at once: the sign of each element comes from packing its float bits with signed
// saturation (negative stays negative), which takes fewer instructions per element than doing it in each vector.

#include <cstddef>
#include <cstdint>

#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/simd.hpp"
#include "hitch/compress/detail/stochastic_round.hpp"
#include "hitch/compress/detail/x86/counter_rng_avx2.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
#if HITCH_COMPRESS_X86
/// The constants of quantize_avx2, broadcast once.
struct quantize_avx2_constants {
    __m256 abs_mask, sign_mask, clip, to_levels, s, unit, two;
    __m256i one_exp, key, one, m1, m2, levels, top, zero;
};

/// floor(y + f) for the 8 elements at g with counters `counter` (and v = g (+ r), returned in v): the level plus
/// one, before the clamp to s.
template <bool EF, bool Clip, bool Binary>
HITCH_TARGET_AVX2_INLINE __m256 rounded8_avx2(const quantize_avx2_constants& k, const float* g, const float* r_in,
                                              __m256i counter, __m256& v) {
    v = _mm256_loadu_ps(g);
    if constexpr (EF) v = _mm256_add_ps(v, _mm256_loadu_ps(r_in));
    __m256 a = _mm256_and_ps(v, k.abs_mask);
    if constexpr (Clip) a = _mm256_min_ps(a, k.clip);
    // One level: no clamp of y to s is needed (see quantize8_avx2_binary).
    const __m256 y = Binary ? _mm256_mul_ps(a, k.to_levels) : _mm256_min_ps(_mm256_mul_ps(a, k.to_levels), k.s);
    const __m256 f =
        _mm256_castsi256_ps(_mm256_or_si256(mantissa_bits8_avx2(mix8_avx2(counter, k.key, k.m1, k.m2)), k.one_exp));
    return _mm256_add_ps(y, f);
}

/// Codes of the 8 elements at g as 32-bit lanes and, with EF, their residuals: the computation of quantize_kernel.
template <bool EF, bool Clip>
HITCH_TARGET_AVX2_INLINE __m256i quantize8_avx2(const quantize_avx2_constants& k, const float* g, const float* r_in,
                                                float* r_out, __m256i counter) {
    __m256 v;
    const __m256 sum = rounded8_avx2<EF, Clip, false>(k, g, r_in, counter, v);
    const __m256i level = _mm256_min_epi32(_mm256_sub_epi32(_mm256_cvttps_epi32(sum), k.one), k.levels);
    // The sign bit where a level was sent (the compare's all-ones lanes keep it), 0 elsewhere.
    const __m256i negative =
        _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 31), _mm256_cmpgt_epi32(level, k.zero));
    if constexpr (EF) {
        const __m256 sent = _mm256_mul_ps(_mm256_cvtepi32_ps(level), k.unit);
        const __m256 signed_sent = _mm256_xor_ps(sent, _mm256_castsi256_ps(_mm256_slli_epi32(negative, 31)));
        _mm256_storeu_ps(r_out, _mm256_sub_ps(v, signed_sent));
    }
    return _mm256_or_si256(_mm256_slli_epi32(level, 1), negative);
}

/// quantize8_avx2 for s = 1 (TernGrad, QSGD with one level): y + f lies in [1, 3), so the level,
/// min(floor(y + f) - 1, 1), is 1 exactly when y + f >= 2, and y needs no clamp to s (above 1 it still gives 1).
template <bool EF, bool Clip>
HITCH_TARGET_AVX2_INLINE __m256i quantize8_avx2_binary(const quantize_avx2_constants& k, const float* g,
                                                       const float* r_in, float* r_out, __m256i counter) {
    __m256 v;
    const __m256 sum = rounded8_avx2<EF, Clip, true>(k, g, r_in, counter, v);
    const __m256 sent = _mm256_cmp_ps(sum, k.two, _CMP_GE_OQ);
    if constexpr (EF) {
        // v - unit where +unit was sent, v - (-unit) where -unit was, v - 0 where nothing was: the portable
        // kernel's v - (negative ? -sent : sent), operation for operation.
        const __m256 signed_unit = _mm256_xor_ps(k.unit, _mm256_and_ps(v, k.sign_mask));
        _mm256_storeu_ps(r_out, _mm256_sub_ps(v, _mm256_and_ps(sent, signed_unit)));
    }
    const __m256i two_code = _mm256_add_epi32(k.one, k.one);
    return _mm256_and_si256(_mm256_castps_si256(sent),
                            _mm256_or_si256(two_code, _mm256_srli_epi32(_mm256_castps_si256(v), 31)));
}

/// The codes of 32 elements without error feedback, as bytes in the packed order (dword j holds vector j's elements
/// 0-3, dword 4 + j its elements 4-7): levels or sent-masks packed from four vectors, the signs packed from the
/// floats' bits, and code = (level << 1) | (sign where level > 0) put together on bytes.
template <bool Clip, bool Binary>
HITCH_TARGET_AVX2_INLINE __m256i codes32_avx2(const quantize_avx2_constants& k, const float* g, __m256i& counter,
                                              __m256i eight) {
    __m256i x[4], bits[4];
    for (std::size_t j = 0; j < 4; ++j) {
        __m256 v;
        const __m256 sum = rounded8_avx2<false, Clip, Binary>(k, g + 8 * j, nullptr, counter, v);
        if constexpr (Binary)
            x[j] = _mm256_castps_si256(_mm256_cmp_ps(sum, k.two, _CMP_GE_OQ));  // 0 or -1
        else
            x[j] = _mm256_min_epi32(_mm256_cvttps_epi32(sum), k.top);  // level + 1, at most s + 1 <= 128
        bits[j] = _mm256_castps_si256(v);
        counter = _mm256_add_epi32(counter, eight);
    }
    const __m256i sign = _mm256_packs_epi16(_mm256_packs_epi32(bits[0], bits[1]), _mm256_packs_epi32(bits[2], bits[3]));
    const __m256i zero = k.zero;
    const __m256i negative = _mm256_cmpgt_epi8(zero, sign);  // -1 where the float is negative
    const __m256i one = _mm256_set1_epi8(1);
    if constexpr (Binary) {
        const __m256i sent = _mm256_packs_epi16(_mm256_packs_epi32(x[0], x[1]), _mm256_packs_epi32(x[2], x[3]));
        // 2 | sign = 2 - (-1 or 0) where sent.
        return _mm256_and_si256(sent, _mm256_sub_epi8(_mm256_add_epi8(one, one), negative));
    } else {
        const __m256i level =
            _mm256_sub_epi8(_mm256_packus_epi16(_mm256_packus_epi32(x[0], x[1]), _mm256_packus_epi32(x[2], x[3])), one);
        // 2 level + 1 where a level is sent from a negative float (level <= 127: no byte overflows).
        const __m256i negative_sent = _mm256_and_si256(negative, _mm256_cmpgt_epi8(level, zero));
        return _mm256_sub_epi8(_mm256_add_epi8(level, level), negative_sent);
    }
}

template <bool EF, bool Clip, bool Binary>
HITCH_TARGET_AVX2_INLINE __m256i quantize8_avx2_any(const quantize_avx2_constants& k, const float* g, const float* r_in,
                                                    float* r_out, __m256i counter) {
    if constexpr (Binary)
        return quantize8_avx2_binary<EF, Clip>(k, g, r_in, r_out, counter);
    else
        return quantize8_avx2<EF, Clip>(k, g, r_in, r_out, counter);
}

/// The same computation as quantize_kernel, 32 elements per step, for elements first to first + n of one
/// random-number block (counters below 2^16, see mix8_avx2), s <= 127 (byte codes). With `ahead`, the n floats
/// there are prefetched, two cache lines per step.
template <bool EF, bool Clip, bool Binary>
HITCH_TARGET_AVX2 inline void quantize_avx2(const float* g, const float* r_in, float* r_out, std::size_t n,
                                            std::uint32_t first, counter_rng rng, quantizer q, std::uint8_t* codes,
                                            const float* ahead = nullptr) {
    const std::uint32_t k0 = rng.key0();
    const quantize_avx2_constants k{_mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)),
                                    _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u))),
                                    _mm256_set1_ps(q.clip),
                                    _mm256_set1_ps(q.to_levels),
                                    _mm256_set1_ps(q.s),
                                    _mm256_set1_ps(q.unit),
                                    _mm256_set1_ps(2.0f),
                                    _mm256_set1_epi32(0x3f800000),
                                    _mm256_set1_epi32(static_cast<int>(k0 ^ (k0 >> 16))),
                                    _mm256_set1_epi32(1),
                                    _mm256_set1_epi32(0x7feb352d),
                                    _mm256_set1_epi32(static_cast<int>(0x846ca68bu)),
                                    _mm256_set1_epi32(q.levels),
                                    _mm256_set1_epi32(q.levels + 1),
                                    _mm256_setzero_si256()};
    const __m256i eight = _mm256_set1_epi32(8);
    // After the two packs, dword j holds vector j's elements 0-3 and dword 4 + j its elements 4-7: gather them
    // back in element order.
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i counter =
        _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    std::size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        if (ahead != nullptr) {
            _mm_prefetch(reinterpret_cast<const char*>(ahead + i), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(ahead + i + 16), _MM_HINT_T0);
        }
        __m256i bytes;
        if constexpr (EF) {
            __m256i c[4];
            for (std::size_t j = 0; j < 4; ++j) {
                const std::size_t at = i + 8 * j;
                c[j] = quantize8_avx2_any<EF, Clip, Binary>(k, g + at, r_in + at, r_out + at, counter);
                counter = _mm256_add_epi32(counter, eight);
            }
            bytes = _mm256_packus_epi16(_mm256_packus_epi32(c[0], c[1]), _mm256_packus_epi32(c[2], c[3]));
        } else {
            bytes = codes32_avx2<Clip, Binary>(k, g + i, counter, eight);
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), _mm256_permutevar8x32_epi32(bytes, order));
    }
    quantize_kernel<EF, Clip>(g + i, EF ? r_in + i : r_in, EF ? r_out + i : r_out, n - i,
                              first + static_cast<std::uint32_t>(i), rng, q, codes + i);
}
#endif
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
