#pragma once
// Stochastic quantisation shared by qsgd and terngrad: reductions over a group (sum of squares, largest magnitude,
// sum), unbiased stochastic rounding to s levels, and packing of the per-element codes into a bit stream.
//
// An element v with unit u = scale / s (scale: the group's norm for QSGD, its largest magnitude for TernGrad) is
// sent as level l in [0, s] with sign:  y = |v| / u,  l = floor(y + U),  U ~ uniform[0, 1), which is floor(y) + 1
// with probability y - floor(y), so E[l u] = |v| (Alistarh et al. 2017, Lemma 3.1; Wen et al. 2017, eq. 3). U comes
// from the counter-based generator, indexed by the element's position, so the result does not depend on the code
// path (the AVX2 and baseline kernels compute the same bits).
//
// Code of an element: (level << 1) | sign, in b = 1 + bit_width(s) bits, element i at bits [i b, (i + 1) b) of
// the stream, least significant bit first. A zero level carries sign 0 (a "negative zero" code is corrupt).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "hitch/compress/detail/parallel.hpp"
#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/simd.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
/// Reductions over a group. Partial results live in 32 float lanes (element i of a block into lane i % 32), are
/// folded into doubles by a fixed tree every `moment_block` elements, so every code path gives the same bits.
struct group_moments {
    double sum = 0.0;
    double sum_squares = 0.0;
    float max_abs = 0.0f;
    bool finite = true;  // no NaN or infinity met
};

inline constexpr std::size_t moment_lanes = 32;

[[nodiscard]] constexpr std::size_t ceil_div_size(std::size_t a, std::size_t b) noexcept { return a / b + (a % b != 0); }
inline constexpr std::size_t moment_block = 4096;

template <bool EF, bool Squares, bool Sum, bool Max = true>
HITCH_COMPRESS_ALWAYS_INLINE void moments_kernel(const float* g, const float* r, std::size_t n, group_moments& out) {
    constexpr std::size_t L = moment_lanes;
    for (std::size_t start = 0; start < n; start += moment_block) {
        const std::size_t end = std::min(n, start + moment_block);
        float s[L] = {}, q[L] = {}, m[L] = {};
        std::uint32_t bad[L] = {};
        std::size_t i = start;
        for (; i + L <= end; i += L)
            for (std::size_t j = 0; j < L; ++j) {
                float v = g[i + j];
                if constexpr (EF) v += r[i + j];
                const float a = std::fabs(v);
                if constexpr (Sum) s[j] += v;
                if constexpr (Squares) {
                    const float square = v * v;
                    q[j] += square;
                }
                if constexpr (Max) {
                    m[j] = a > m[j] ? a : m[j];
                    bad[j] |= a <= 3.40282347e38f ? 0u : 1u;
                }
            }
        for (std::size_t j = 0; i < end; ++i, ++j) {
            float v = g[i];
            if constexpr (EF) v += r[i];
            const float a = std::fabs(v);
            if constexpr (Sum) s[j] += v;
            if constexpr (Squares) {
                const float square = v * v;
                q[j] += square;
            }
            if constexpr (Max) {
                m[j] = a > m[j] ? a : m[j];
                bad[j] |= a <= 3.40282347e38f ? 0u : 1u;
            }
        }
        // The block's partial (its lanes folded in halves, a fixed tree: a chain of 32 dependent additions would
        // cost more than a group of 512 takes to quantise), then added to the total: block by block, in order.
        double ds[L], dq[L];
        std::uint32_t any_bad = 0;
        for (std::size_t j = 0; j < L; ++j) {
            ds[j] = static_cast<double>(s[j]);
            dq[j] = static_cast<double>(q[j]);
            out.max_abs = m[j] > out.max_abs ? m[j] : out.max_abs;
            any_bad |= bad[j];
        }
        for (std::size_t w = L / 2; w >= 1; w /= 2)
            for (std::size_t j = 0; j < w; ++j) {
                ds[j] += ds[j + w];
                dq[j] += dq[j + w];
            }
        out.finite = out.finite && any_bad == 0;
        out.sum += ds[0];
        out.sum_squares += dq[0];
    }
}

/// The moments of v = g (+ r) over n elements. Squares/Sum/Max select what is computed; without Max the
/// finiteness check rests on the sums (NaN and infinities propagate into them; a sum of squares beyond float's
/// range is reported as non-finite too).
template <bool EF, bool Squares, bool Sum>
inline group_moments moments(const float* g, const float* r, std::size_t n) {
    group_moments out;
    run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA { moments_kernel<EF, Squares, Sum>(g, r, n, out); });
    out.finite = out.finite && std::isfinite(out.sum_squares) && std::isfinite(out.sum);
    return out;
}

/// moments() over a bucket, in chunks of whole blocks on the thread pool; the blocks' partials are added in block
/// order, so the result equals the one-thread result bit for bit.
template <bool EF, bool Squares, bool Sum>
inline group_moments moments_parallel(const float* g, const float* r, std::size_t n, const parallelism& how) {
    const chunk_plan plan = plan_chunks(n, moment_block, how);
    if (plan.count == 1) return moments<EF, Squares, Sum>(g, r, n);
    std::vector<group_moments> blocks(ceil_div_size(n, moment_block));
    run_chunks(plan, [&](std::size_t, std::size_t lo, std::size_t hi) {
        run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA {
            for (std::size_t b = lo; b < hi; b += moment_block) {
                group_moments part;
                moments_kernel<EF, Squares, Sum>(g + b, EF ? r + b : r, std::min(moment_block, n - b), part);
                blocks[b / moment_block] = part;
            }
        });
    });
    group_moments out;
    for (const auto& part : blocks) {
        out.sum += part.sum;
        out.sum_squares += part.sum_squares;
        out.max_abs = part.max_abs > out.max_abs ? part.max_abs : out.max_abs;
        out.finite = out.finite && part.finite;
    }
    out.finite = out.finite && std::isfinite(out.sum_squares) && std::isfinite(out.sum);
    return out;
}

#if HITCH_COMPRESS_X86
HITCH_COMPRESS_AVX512_WARNINGS_BEGIN
/// moments_kernel<EF, true, false, false>'s sum of squares with AVX-512: the 32 lanes in two vectors (the tail's
/// missing lanes add +0, which leaves a sum of squares unchanged) and the same fixed tree, so the same bits.
template <bool EF>
HITCH_TARGET_AVX512 inline double sum_squares_avx512(const float* g, const float* r, std::size_t n) {
    double total = 0.0;
    for (std::size_t start = 0; start < n; start += moment_block) {
        const std::size_t end = std::min(n, start + moment_block);
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        std::size_t i = start;
        for (; i + 32 <= end; i += 32) {
            __m512 v0 = _mm512_loadu_ps(g + i), v1 = _mm512_loadu_ps(g + i + 16);
            if constexpr (EF) {
                v0 = _mm512_add_ps(v0, _mm512_loadu_ps(r + i));
                v1 = _mm512_add_ps(v1, _mm512_loadu_ps(r + i + 16));
            }
            a0 = _mm512_add_ps(a0, _mm512_mul_ps(v0, v0));
            a1 = _mm512_add_ps(a1, _mm512_mul_ps(v1, v1));
        }
        if (i < end) {
            const std::size_t rest = end - i;
            const auto m0 = static_cast<__mmask16>(rest >= 16 ? 0xffffu : (1u << rest) - 1u);
            const auto m1 = static_cast<__mmask16>(rest <= 16 ? 0u : (1u << (rest - 16)) - 1u);
            __m512 v0 = _mm512_maskz_loadu_ps(m0, g + i), v1 = _mm512_maskz_loadu_ps(m1, g + i + 16);
            if constexpr (EF) {
                v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, r + i));
                v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, r + i + 16));
            }
            a0 = _mm512_add_ps(a0, _mm512_mul_ps(v0, v0));
            a1 = _mm512_add_ps(a1, _mm512_mul_ps(v1, v1));
        }
        // Lanes j and j + 16, then j and j + 8, j + 4, j + 2, j + 1: moments_kernel's tree.
        const __m512d e0 = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(a0)),
                                         _mm512_cvtps_pd(_mm512_castps512_ps256(a1)));
        const __m512d e1 = _mm512_add_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a0), 1))),
                                         _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a1), 1))));
        const __m512d f = _mm512_add_pd(e0, e1);
        const __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(f), _mm512_extractf64x4_pd(f, 1));
        const __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
        total += _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));
    }
    return total;
}
HITCH_COMPRESS_AVX512_WARNINGS_END
#endif

/// Elements per random-number block: element i uses counter_rng(key).at_block(i / 65536).bits(i % 65536).
inline constexpr std::size_t rng_block = 65536;

/// Calls f(done, len, first, rng) for the pieces of elements [begin, begin + n) that lie in one random-number block
/// each: elements [begin + done, begin + done + len) are that block's elements first, first + 1, ... and draw from
/// `rng`.
template <class F>
HITCH_COMPRESS_ALWAYS_INLINE void for_rng_blocks(std::size_t begin, std::size_t n, const counter_rng& base, F&& f) {
    for (std::size_t done = 0; done < n;) {
        const std::size_t index = begin + done, offset = index % rng_block;
        const std::size_t len = std::min(n - done, rng_block - offset);
        f(done, len, static_cast<std::uint32_t>(offset), base.at_block(index / rng_block));
        done += len;
    }
}

/// What the quantiser needs for one group: y = min(|v| (clipped) * to_levels, s), level = floor(y + U) with U
/// uniform in [0, 1) from the element's random bits, at most s; decoded magnitude level * unit.
struct quantizer {
    float to_levels;
    float unit;
    float s;
    std::int32_t levels;
    float clip;
};

/// Stochastic rounding by floor(y + U): P(level = floor(y) + 1) = y - floor(y). U = 1.m - 1 with 23 random mantissa
/// bits, so the rounding is unbiased up to 2^-23 of a level (and the rounding of y + U, far below that).
template <bool EF, bool Clip, class Code>
HITCH_COMPRESS_ALWAYS_INLINE void quantize_kernel(const float* g, const float* r_in, float* r_out, std::size_t n,
                                                  std::uint32_t first, counter_rng rng, quantizer q, Code* codes) {
    for (std::size_t i = 0; i < n; ++i) {
        float v = g[i];
        if constexpr (EF) v += r_in[i];
        float a = std::fabs(v);
        if constexpr (Clip) a = std::min(a, q.clip);
        const float y = std::min(a * q.to_levels, q.s);
        const float f = std::bit_cast<float>((rng.bits(first + static_cast<std::uint32_t>(i)) >> 9) | 0x3f800000u);
        const std::int32_t level = std::min(static_cast<std::int32_t>(y + f) - 1, q.levels);
        const std::uint32_t negative = (std::bit_cast<std::uint32_t>(v) >> 31) & (level > 0 ? 1u : 0u);
        codes[i] = static_cast<Code>(static_cast<std::uint32_t>(level) << 1 | negative);
        if constexpr (EF) {
            const float sent = static_cast<float>(level) * q.unit;
            r_out[i] = v - (negative ? -sent : sent);
        }
    }
}

#if HITCH_COMPRESS_X86
/// The constants of quantize_avx2, broadcast once.
struct quantize_avx2_constants {
    __m256 abs_mask, clip, to_levels, s, unit;
    __m256i lane, one_exp, k0, one, m1, m2, levels, zero;
};

/// Codes of elements [i, i + 8) as 32-bit lanes (and, with EF, their residuals).
template <bool EF, bool Clip>
HITCH_TARGET_AVX2_INLINE __m256i quantize8_avx2(
    const quantize_avx2_constants& k, const float* g, const float* r_in, float* r_out, std::uint32_t index) {
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

HITCH_COMPRESS_AVX512_WARNINGS_BEGIN
/// The constants of quantize_avx512, broadcast once.
struct quantize_avx512_constants {
    __m512 abs_mask, clip, to_levels, s, unit;
    __m512i m1, m2, one_exp, levels, minus_one, zero, key;
    __m512 two;
    __m512i two_code;
};

/// counter_rng::bits of 16 counters up to its last xor-shift: the first two steps folded into one three-way xor,
/// ((c ^ k) ^ ((c ^ k) >> 16) = c ^ (c >> 16) ^ (k ^ (k >> 16)), key = k ^ (k >> 16)). The last step,
/// x ^= x >> 16, is left to the caller, who shifts the result anyway: (x ^ (x >> 16)) >> 9 = (x >> 9) ^ (x >> 25).
HITCH_TARGET_AVX512_INLINE __m512i
mix16_avx512(__m512i counter, __m512i key, __m512i m1, __m512i m2) {
    __m512i x = _mm512_ternarylogic_epi32(counter, _mm512_srli_epi32(counter, 16), key, 0x96);  // a ^ b ^ c
    x = _mm512_mullo_epi32(x, m1);
    return _mm512_mullo_epi32(_mm512_xor_si512(x, _mm512_srli_epi32(x, 15)), m2);
}

/// Codes of the 16 elements at g (counters `counter`) as 32-bit lanes (and, with EF, their residuals): the
/// computation of quantize_kernel, with the random bits of mix16_avx512 (the last xor-shift folded into the
/// mantissa extraction); the bits are those of counter_rng::bits.
template <bool EF, bool Clip>
HITCH_TARGET_AVX512_INLINE __m512i
quantize16_avx512(const quantize_avx512_constants& k, const float* g, const float* r_in, float* r_out, __m512i counter) {
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
HITCH_TARGET_AVX512_INLINE __m512i
quantize16_avx512_binary(const quantize_avx512_constants& k, const float* g, const float* r_in, float* r_out,
                         __m512i counter) {
    __m512 v = _mm512_loadu_ps(g);
    if constexpr (EF) v = _mm512_add_ps(v, _mm512_loadu_ps(r_in));
    __m512 a = _mm512_and_ps(v, k.abs_mask);
    if constexpr (Clip) a = _mm512_min_ps(a, k.clip);
    const __m512 y = _mm512_mul_ps(a, k.to_levels);
    const __m512i x = mix16_avx512(counter, k.key, k.m1, k.m2);
    const __m512i mantissa = _mm512_ternarylogic_epi32(_mm512_srli_epi32(x, 9), _mm512_srli_epi32(x, 25), k.one_exp, 0xbe);
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
HITCH_TARGET_AVX512_INLINE __m512i
quantize16_avx512_any(const quantize_avx512_constants& k, const float* g, const float* r_in, float* r_out,
                      __m512i counter) {
    if constexpr (Binary) return quantize16_avx512_binary<EF, Clip>(k, g, r_in, r_out, counter);
    else return quantize16_avx512<EF, Clip>(k, g, r_in, r_out, counter);
}

/// The same computation as quantize_kernel, 64 elements per step (four vectors packed to bytes together).
template <bool EF, bool Clip, bool Binary>
HITCH_TARGET_AVX512 inline void quantize_avx512(const float* g, const float* r_in, float* r_out, std::size_t n,
                                                std::uint32_t first, counter_rng rng, quantizer q, std::uint8_t* codes) {
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

/// Quantises [begin, begin + n) of a bucket (indices global, for the random numbers) into codes[0, n); with EF
/// also writes r_out = v - decoded. `tier` (decided once per encode) picks the AVX-512 or AVX2 intrinsics kernel
/// for byte codes; otherwise the generic kernel runs, vectorised by whichever build the caller runs in.
template <bool EF, bool Clip, class Code>
HITCH_COMPRESS_ALWAYS_INLINE void quantize(const float* g, const float* r_in, float* r_out, std::size_t n,
                                           std::size_t begin, const counter_rng& base, const quantizer& q, Code* codes,
                                           [[maybe_unused]] isa tier) {
    for_rng_blocks(begin, n, base, [&](std::size_t done, std::size_t len, std::uint32_t first, const counter_rng& rng)
                                       HITCH_COMPRESS_INLINE_LAMBDA {
        const float* gp = g + done;
        const float* rp = EF ? r_in + done : r_in;
        float* op = EF ? r_out + done : r_out;
        Code* cp = codes + done;
#if HITCH_COMPRESS_X86
        if constexpr (sizeof(Code) == 1) {
            if (tier == isa::avx512) {
                if (q.levels == 1) quantize_avx512<EF, Clip, true>(gp, rp, op, len, first, rng, q, cp);
                else quantize_avx512<EF, Clip, false>(gp, rp, op, len, first, rng, q, cp);
                return;
            }
            if (tier == isa::avx2) {
                quantize_avx2<EF, Clip>(gp, rp, op, len, first, rng, q, cp);
                return;
            }
        }
#endif
        quantize_kernel<EF, Clip>(gp, rp, op, len, first, rng, q, cp);
    });
}

// ---- thinning of 2-bit codes (one-pass TernGrad) ---------------------------------------------------------------
//
// A non-zero code of element i survives with probability T / 2^23: it does iff (bits(i) >> 9) < T, bits from a
// counter-based generator of its own (so the draws are independent of the rounding's). `codes` holds elements
// [first, first + n) of one random-number block, 2 bits each, element first at bit 0 of codes[0] (first and n
// multiples of 16 but for the block's last piece).

HITCH_COMPRESS_ALWAYS_INLINE void thin_kernel(std::byte* codes, std::size_t n, std::uint32_t first, counter_rng rng,
                                              std::uint32_t threshold) {
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        std::uint32_t word;
        std::memcpy(&word, codes + i / 4, 4);
        if (word == 0) continue;
        std::uint32_t keep = 0;
        for (std::uint32_t j = 0; j < 16; ++j)
            keep |= static_cast<std::uint32_t>((rng.bits(first + static_cast<std::uint32_t>(i) + j) >> 9) < threshold) << j;
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

#if HITCH_COMPRESS_X86
HITCH_COMPRESS_AVX512_WARNINGS_BEGIN
/// The keep mask of 16 elements at `counter`: (bits(i) >> 9) < threshold, the hash folded as in quantize16_avx512.
HITCH_TARGET_AVX512_INLINE __mmask16
keep16_avx512(__m512i counter, __m512i key, __m512i m1, __m512i m2, __m512i limit) {
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

/// Thins the 2-bit codes of elements [begin, begin + n) of a bucket (begin a multiple of 4, codes at its byte).
HITCH_COMPRESS_ALWAYS_INLINE void thin(std::byte* codes, std::size_t n, std::size_t begin, const counter_rng& base,
                                       std::uint32_t threshold, [[maybe_unused]] isa tier) {
    for_rng_blocks(begin, n, base, [&](std::size_t done, std::size_t len, std::uint32_t first, const counter_rng& rng)
                                       HITCH_COMPRESS_INLINE_LAMBDA {
#if HITCH_COMPRESS_X86
        if (tier == isa::avx512) {
            thin_avx512(codes + done / 4, len, first, rng, threshold);
            return;
        }
#endif
        thin_kernel(codes + done / 4, len, first, rng, threshold);
    });
}

HITCH_COMPRESS_STRICT_FP_END

// ---- bit streams of b-bit codes (b in [2, 16]) ----------------------------------------------------------------

/// Bytes of n codes of b bits.
[[nodiscard]] constexpr std::size_t code_bytes(std::size_t n, unsigned b) noexcept { return (n * b + 7) / 8; }

HITCH_COMPRESS_ALWAYS_INLINE void pack_nibbles(const std::uint8_t* codes, std::byte* out, std::size_t pairs) {
    for (std::size_t j = 0; j < pairs; ++j)
        out[j] = static_cast<std::byte>(codes[2 * j] | codes[2 * j + 1] << 4);
}
HITCH_COMPRESS_ALWAYS_INLINE void pack_pairs_of_bits(const std::uint8_t* codes, std::byte* out, std::size_t quads) {
    for (std::size_t j = 0; j < quads; ++j)
        out[j] = static_cast<std::byte>(codes[4 * j] | codes[4 * j + 1] << 2 | codes[4 * j + 2] << 4 | codes[4 * j + 3] << 6);
}

/// Writes n codes of b bits at `out`, which starts on a byte boundary of the stream; the last byte is zero-padded.
template <class Code>
HITCH_COMPRESS_ALWAYS_INLINE void pack_codes(const Code* codes, std::size_t n, unsigned b, std::byte* out) {
    if constexpr (sizeof(Code) == 1) {
        if (b == 8) {
            std::memcpy(out, codes, n);
            return;
        }
        if (b == 4) {
            const std::size_t pairs = n / 2;
            pack_nibbles(codes, out, pairs);
            if (n % 2) out[pairs] = static_cast<std::byte>(codes[n - 1]);
            return;
        }
        if (b == 2) {
            const std::size_t quads = n / 4;
            pack_pairs_of_bits(codes, out, quads);
            if (n % 4) {
                unsigned last = 0;
                for (std::size_t i = quads * 4; i < n; ++i) last |= static_cast<unsigned>(codes[i]) << (2 * (i - quads * 4));
                out[quads] = static_cast<std::byte>(last);
            }
            return;
        }
    }
    std::uint64_t acc = 0;
    unsigned bits = 0;
    std::byte* p = out;
    for (std::size_t i = 0; i < n; ++i) {
        acc |= static_cast<std::uint64_t>(codes[i]) << bits;
        bits += b;
        while (bits >= 8) {
            *p++ = static_cast<std::byte>(acc);
            acc >>= 8;
            bits -= 8;
        }
    }
    if (bits > 0) *p = static_cast<std::byte>(acc);
}

/// Reads n codes of b bits from a stream starting on a byte boundary into codes[0, n).
template <class Code>
HITCH_COMPRESS_ALWAYS_INLINE void unpack_codes(const std::byte* in, std::size_t n, unsigned b, Code* codes) {
    if constexpr (sizeof(Code) == 1) {
        const auto* p = reinterpret_cast<const std::uint8_t*>(in);
        if (b == 8) {
            std::memcpy(codes, in, n);
            return;
        }
        if (b == 4) {
            for (std::size_t j = 0; j < n / 2; ++j) {
                codes[2 * j] = static_cast<Code>(p[j] & 15u);
                codes[2 * j + 1] = static_cast<Code>(p[j] >> 4);
            }
            if (n % 2) codes[n - 1] = static_cast<Code>(p[n / 2] & 15u);
            return;
        }
        if (b == 2) {
            for (std::size_t j = 0; j < n / 4; ++j)
                for (std::size_t k = 0; k < 4; ++k) codes[4 * j + k] = static_cast<Code>((p[j] >> (2 * k)) & 3u);
            for (std::size_t i = n / 4 * 4; i < n; ++i) codes[i] = static_cast<Code>((p[i / 4] >> (2 * (i % 4))) & 3u);
            return;
        }
    }
    for (std::size_t i = 0; i < n; ++i) {
        const std::size_t bit = i * b, first = bit / 8, last = (bit + b - 1) / 8;
        std::uint32_t word = 0;
        for (std::size_t k = first; k <= last; ++k) word |= static_cast<std::uint32_t>(in[k]) << (8 * (k - first));
        codes[i] = static_cast<Code>((word >> (bit % 8)) & ((1u << b) - 1u));
    }
}

/// Byte-at-a-time decoding of streams of b-bit codes, b in {2, 4, 8}: for each byte value, the signed levels of the
/// 8 / b codes it holds (in stream order) and whether all of them are valid (level <= s, no negative zero).
struct byte_tables {
    unsigned per_byte = 1;
    float level[256][4] = {};
    bool valid[256] = {};

    byte_tables(unsigned b, std::uint32_t s) : per_byte(8 / b) {
        const unsigned mask = (1u << b) - 1u;
        for (unsigned v = 0; v < 256; ++v) {
            bool ok = true;
            for (unsigned k = 0; k < per_byte; ++k) {
                const unsigned c = (v >> (b * k)) & mask;
                const auto magnitude = static_cast<float>(c >> 1);
                level[v][k] = (c & 1u) ? -magnitude : magnitude;
                ok = ok && (c >> 1) <= s && c != 1u;
            }
            valid[v] = ok;
        }
    }
    /// The first invalid code in byte value v (which must be invalid).
    [[nodiscard]] unsigned first_invalid(unsigned v, unsigned b, std::uint32_t s) const noexcept {
        const unsigned mask = (1u << b) - 1u;
        for (unsigned k = 0; k < per_byte; ++k) {
            const unsigned c = (v >> (b * k)) & mask;
            if ((c >> 1) > s || c == 1u) return k;
        }
        return 0;
    }
};

/// Index of the first invalid code among n codes in `bytes` (n when all are valid).
[[nodiscard]] inline std::size_t first_invalid_code(const byte_tables& t, const std::byte* bytes, std::size_t n,
                                                    unsigned b, std::uint32_t s) {
    const std::size_t count = code_bytes(n, b);
    for (std::size_t j = 0; j < count; ++j) {
        const auto v = static_cast<unsigned>(bytes[j]);
        if (!t.valid[v]) return std::min(n, j * t.per_byte + t.first_invalid(v, b, s));
    }
    return n;
}

/// out[i] (+)= scale * level of code i, for n codes starting at `bytes` (n a multiple of per_byte but for the last
/// piece of a stream).
template <bool Add>
HITCH_COMPRESS_ALWAYS_INLINE void decode_bytes(const byte_tables& t, const std::byte* bytes, std::size_t n, float scale,
                                               float* out) {
    const unsigned per = t.per_byte;
    const std::size_t whole = n / per;
    for (std::size_t j = 0; j < whole; ++j) {
        const float* lv = t.level[static_cast<unsigned>(bytes[j])];
        for (unsigned k = 0; k < per; ++k) {
            const float v = lv[k] * scale;
            if constexpr (Add) out[j * per + k] += v;
            else out[j * per + k] = v;
        }
    }
    for (std::size_t i = whole * per; i < n; ++i) {
        const float v = t.level[static_cast<unsigned>(bytes[i / per])][i % per] * scale;
        if constexpr (Add) out[i] += v;
        else out[i] = v;
    }
}

/// Code i of a stream of b-bit codes (the stream holds at least code_bytes(i + 1, b) bytes).
[[nodiscard]] inline std::uint32_t code_at(const std::byte* stream, std::size_t i, unsigned b) noexcept {
    const std::size_t bit = i * b;
    const std::size_t first = bit / 8, last = (bit + b - 1) / 8;
    std::uint32_t word = 0;
    for (std::size_t k = first; k <= last; ++k) word |= static_cast<std::uint32_t>(stream[k]) << (8 * (k - first));
    return (word >> (bit % 8)) & ((1u << b) - 1u);
}

// ---- Elias-gamma codes (Elias 1975), most significant bit first --------------------------------------------------

class bit_writer {
public:
    explicit bit_writer(std::byte* out) : out_(out) {}
    void put(std::uint64_t value, unsigned count) {  // the low `count` bits of value, highest first
        for (unsigned k = count; k-- > 0;) {
            cur_ = static_cast<std::uint8_t>(cur_ << 1 | ((value >> k) & 1u));
            if (++filled_ == 8) flush();
        }
    }
    /// gamma(x), x >= 1: bit_width(x) - 1 zeros, then x in bit_width(x) bits.
    void gamma(std::uint64_t x) {
        const unsigned w = static_cast<unsigned>(std::bit_width(x));
        put(0, w - 1);
        put(x, w);
    }
    /// Bytes written, after padding the last byte with zeros.
    std::size_t finish() {
        if (filled_ != 0) {
            cur_ = static_cast<std::uint8_t>(cur_ << (8 - filled_));
            flush();
        }
        return written_;
    }
    [[nodiscard]] static std::size_t gamma_bits(std::uint64_t x) noexcept {
        return 2 * static_cast<std::size_t>(std::bit_width(x)) - 1;
    }

private:
    void flush() {
        out_[written_++] = static_cast<std::byte>(cur_);
        cur_ = 0;
        filled_ = 0;
    }
    std::byte* out_;
    std::size_t written_ = 0;
    std::uint8_t cur_ = 0;
    unsigned filled_ = 0;
};

/// Reads what bit_writer wrote; reading past the end is reported, never performed.
class bit_reader {
public:
    bit_reader(const std::byte* data, std::size_t bytes) : data_(data), bits_(bytes * 8) {}
    [[nodiscard]] bool get(unsigned& bit) {
        if (pos_ >= bits_) return false;
        bit = (static_cast<unsigned>(data_[pos_ / 8]) >> (7 - pos_ % 8)) & 1u;
        ++pos_;
        return true;
    }
    /// gamma-coded value; false if the stream ends first or the value would exceed 63 bits.
    [[nodiscard]] bool gamma(std::uint64_t& x) {
        unsigned zeros = 0, bit = 0;
        for (;;) {
            if (!get(bit)) return false;
            if (bit) break;
            if (++zeros > 62) return false;
        }
        x = 1;
        for (unsigned k = 0; k < zeros; ++k) {
            if (!get(bit)) return false;
            x = x << 1 | bit;
        }
        return true;
    }
    /// The unread bits: fewer than 8, all zero, for a well-formed stream.
    [[nodiscard]] bool only_padding_left() const noexcept {
        if (bits_ - pos_ >= 8) return false;
        for (std::size_t p = pos_; p < bits_; ++p)
            if ((static_cast<unsigned>(data_[p / 8]) >> (7 - p % 8)) & 1u) return false;
        return true;
    }

private:
    const std::byte* data_;
    std::size_t bits_;
    std::size_t pos_ = 0;
};

}  // namespace hitch::compress::detail
