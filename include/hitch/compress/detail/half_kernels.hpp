#pragma once
// float <-> half and float <-> bfloat16 over arrays, rounding to nearest even exactly as hitch::half and
// hitch::bfloat16 do. The AVX2 path uses F16C's vcvtps2ph / vcvtph2ps; the baseline path the scalar conversions of
// core/dtype.hpp. Each encoder also reports whether every result is finite (an overflow to infinity, or a NaN or
// infinity in the input), so the codecs can refuse such buckets without a second pass.
//
// 16-bit outputs are written through std::byte pointers (a message payload) in little-endian order.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hitch/compress/detail/simd.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/core/dtype.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
// ---- baseline ---------------------------------------------------------------------------------------------------

/// out[i] = half(v[i]) where v = in (+ r_in); r_out = v - out when EF. Returns true when all results are finite.
template <bool EF>
inline bool to_half_portable(const float* in, const float* r_in, float* r_out, std::byte* out, std::size_t n) {
    std::uint32_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
        float v = in[i];
        if constexpr (EF) v += r_in[i];
        const std::uint16_t h = hitch::detail::float_to_half_bits(v);
        bad |= static_cast<std::uint32_t>((h & 0x7c00u) == 0x7c00u);
        wire::store_le(out + 2 * i, h);
        if constexpr (EF) r_out[i] = v - hitch::detail::half_bits_to_float(h);
    }
    return bad == 0;
}

template <bool Add>
inline void from_half_portable(const std::byte* in, float* out, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        const float v = hitch::detail::half_bits_to_float(wire::load_le<std::uint16_t>(in + 2 * i));
        if constexpr (Add)
            out[i] += v;
        else
            out[i] = v;
    }
}

/// bfloat16 conversion written without branches so that it vectorises.
HITCH_COMPRESS_ALWAYS_INLINE std::uint16_t bf16_bits(float v) noexcept {
    std::uint32_t x;
    std::memcpy(&x, &v, 4);
    const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const std::uint32_t quiet_nan = (x >> 16) | 0x40u;
    return static_cast<std::uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

HITCH_COMPRESS_ALWAYS_INLINE float bf16_value(std::uint16_t b) noexcept {
    const std::uint32_t x = static_cast<std::uint32_t>(b) << 16;
    float v;
    std::memcpy(&v, &x, 4);
    return v;
}

template <bool EF>
HITCH_COMPRESS_ALWAYS_INLINE bool to_bf16_kernel(const float* in, const float* r_in, float* r_out, std::uint16_t* out,
                                                 std::size_t n) {
    std::uint32_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
        float v = in[i];
        if constexpr (EF) v += r_in[i];
        const std::uint16_t b = bf16_bits(v);
        bad |= static_cast<std::uint32_t>((b & 0x7f80u) == 0x7f80u);
        out[i] = b;
        if constexpr (EF) r_out[i] = v - bf16_value(b);
    }
    return bad == 0;
}

template <bool Add>
HITCH_COMPRESS_ALWAYS_INLINE void from_bf16_kernel(const std::uint16_t* in, float* out, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        if constexpr (Add)
            out[i] += bf16_value(in[i]);
        else
            out[i] = bf16_value(in[i]);
    }
}

// ---- AVX2 + F16C --------------------------------------------------------------------------------------------------

#if HITCH_COMPRESS_X86
template <bool EF>
HITCH_TARGET_AVX2 inline bool to_half_avx2(const float* in, const float* r_in, float* r_out, std::byte* out,
                                           std::size_t n) {
    const __m128i exp_mask = _mm_set1_epi16(0x7c00);
    __m128i bad = _mm_setzero_si128();
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(in + i);
        if constexpr (EF) v = _mm256_add_ps(v, _mm256_loadu_ps(r_in + i));
        const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(h, exp_mask), exp_mask));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
        if constexpr (EF) _mm256_storeu_ps(r_out + i, _mm256_sub_ps(v, _mm256_cvtph_ps(h)));
    }
    const bool ok = _mm_testz_si128(bad, bad) != 0;
    return to_half_portable<EF>(in + i, r_in + (EF ? i : 0), r_out + (EF ? i : 0), out + 2 * i, n - i) && ok;
}

template <bool Add>
HITCH_TARGET_AVX2 inline void from_half_avx2(const std::byte* in, float* out, std::size_t n) {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
        if constexpr (Add) v = _mm256_add_ps(v, _mm256_loadu_ps(out + i));
        _mm256_storeu_ps(out + i, v);
    }
    from_half_portable<Add>(in + 2 * i, out + i, n - i);
}
#endif

/// float -> bfloat16 (round to nearest even, NaN kept quiet), sixteen elements per step; the same bits as bf16_bits.
template <bool EF>
HITCH_TARGET_AVX2 inline bool to_bf16_avx2(const float* in, const float* r_in, float* r_out, std::byte* out,
                                           std::size_t n) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i one = _mm256_set1_epi32(1), half_ulp = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x40);
    const __m256i exp_mask = _mm256_set1_epi32(0x7f80);
    __m256i bad = _mm256_setzero_si256();
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i b[2];
        for (std::size_t h = 0; h < 2; ++h) {
            __m256 v = _mm256_loadu_ps(in + i + 8 * h);
            if constexpr (EF) v = _mm256_add_ps(v, _mm256_loadu_ps(r_in + i + 8 * h));
            const __m256i x = _mm256_castps_si256(v);
            const __m256i bias = _mm256_add_epi32(half_ulp, _mm256_and_si256(_mm256_srli_epi32(x, 16), one));
            const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
            const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
            b[h] = _mm256_blendv_epi8(rounded, _mm256_or_si256(_mm256_srli_epi32(x, 16), quiet), nan);
            bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(b[h], exp_mask), exp_mask));
            if constexpr (EF)
                _mm256_storeu_ps(r_out + i + 8 * h, _mm256_sub_ps(v, _mm256_castsi256_ps(_mm256_slli_epi32(b[h], 16))));
        }
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(b[0], b[1]), 0xd8);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i), packed);
    }
    const bool ok = _mm256_testz_si256(bad, bad) != 0;
    const auto* rest_in = in + i;
    auto* rest_out = reinterpret_cast<std::uint16_t*>(out + 2 * i);
    return to_bf16_kernel<EF>(rest_in, EF ? r_in + i : r_in, EF ? r_out + i : r_out, rest_out, n - i) && ok;
}

// ---- dispatch -----------------------------------------------------------------------------------------------------

/// Encodes n floats (plus residual when EF) as little-endian half bits; false if any result is not finite.
template <bool EF>
inline bool to_half(const float* in, const float* r_in, float* r_out, std::byte* out, std::size_t n) {
#if HITCH_COMPRESS_X86
    if (use_wide()) return to_half_avx2<EF>(in, r_in, r_out, out, n);
#endif
    return to_half_portable<EF>(in, r_in, r_out, out, n);
}

template <bool Add>
inline void from_half(const std::byte* in, float* out, std::size_t n) {
#if HITCH_COMPRESS_X86
    if (use_wide()) return from_half_avx2<Add>(in, out, n);
#endif
    from_half_portable<Add>(in, out, n);
}

/// As to_half, for bfloat16. The 16-bit words are written in host order through a byte pointer (little-endian hosts;
/// big-endian hosts take the portable byte-order path).
template <bool EF>
inline bool to_bf16(const float* in, const float* r_in, float* r_out, std::byte* out, std::size_t n) {
    if constexpr (std::endian::native == std::endian::little) {
#if HITCH_COMPRESS_X86
        if (use_wide()) return to_bf16_avx2<EF>(in, r_in, r_out, out, n);
#endif
        auto* o = reinterpret_cast<std::uint16_t*>(out);
        return to_bf16_kernel<EF>(in, r_in, r_out, o, n);
    } else {
        bool ok = true;
        for (std::size_t i = 0; i < n; ++i) {
            float v = in[i];
            if constexpr (EF) v += r_in[i];
            const std::uint16_t b = bf16_bits(v);
            ok = ok && (b & 0x7f80u) != 0x7f80u;
            wire::store_le(out + 2 * i, b);
            if constexpr (EF) r_out[i] = v - bf16_value(b);
        }
        return ok;
    }
}

template <bool Add>
inline void from_bf16(const std::byte* in, float* out, std::size_t n) {
    if constexpr (std::endian::native == std::endian::little) {
        const auto* p = reinterpret_cast<const std::uint16_t*>(in);
        run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA { from_bf16_kernel<Add>(p, out, n); });
    } else {
        for (std::size_t i = 0; i < n; ++i) {
            const float v = bf16_value(wire::load_le<std::uint16_t>(in + 2 * i));
            if constexpr (Add)
                out[i] += v;
            else
                out[i] = v;
        }
    }
}

HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
