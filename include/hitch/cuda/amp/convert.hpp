#pragma once
// FP16 and BF16 conversions that give hitch::half's and hitch::bfloat16's bits (hitch/core/dtype.hpp) on the host
// and on a GPU: the same integer algorithm, written once for both. Round to nearest even; a NaN stays a quiet NaN
// and keeps the top of its payload; inf stays inf. CUDA's __float2half_rn and __float2bfloat16_rn return a canonical
// NaN instead, so they are not used. Needs no CUDA header: the host tests compare these with core/dtype.hpp on
// every 16-bit pattern and on the float patterns around every rounding boundary.

#include <cstdint>

#include "hitch/cuda/detail/hd.hpp"

#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

namespace hitch::cuda::amp {

/// Leading zero bits of a 32-bit word (32 for 0).
[[nodiscard]] HITCH_HD_INLINE int count_leading_zeros(std::uint32_t x) noexcept {
#if defined(__CUDA_ARCH__)
    return __clz(static_cast<int>(x));
#else
    return std::countl_zero(x);
#endif
}

/// float -> binary16 bits, round to nearest even (hitch::half(float)).
[[nodiscard]] HITCH_HD_INLINE std::uint16_t float_to_half_bits(float value) noexcept {
    const std::uint32_t x = hd::bits(value);
    const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    const std::uint32_t mag = x & 0x7fffffffu;
    if (mag >= 0x7f800000u) {  // inf or NaN; a NaN stays a (quiet) NaN and keeps the top of its payload
        if (mag == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
        return static_cast<std::uint16_t>(sign | 0x7e00u | ((mag >> 13) & 0x3ffu));
    }
    if (mag >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
    if (mag >= 0x38800000u) {  // normal half: rebias the exponent (127 -> 15), round 13 dropped bits to even
        const std::uint32_t rounded = mag + 0x0fffu + ((mag >> 13) & 1u);
        return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
    }
    if (mag <= 0x33000000u) return sign;  // <= 2^-25 (half the smallest subnormal) rounds to (signed) zero
    // Subnormal half: value = m * 2^-24.
    const std::uint32_t exponent = mag >> 23;
    const std::uint32_t mantissa = (mag & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exponent;  // in [14, 24]
    std::uint32_t m = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (m & 1u) != 0)) ++m;  // may carry into the smallest normal: still right
    return static_cast<std::uint16_t>(sign | m);
}

/// binary16 bits -> float, exact (float(hitch::half)).
[[nodiscard]] HITCH_HD_INLINE float half_bits_to_float(std::uint16_t h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1fu;
    std::uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1fu) return hd::from_bits(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
        if (mantissa == 0) return hd::from_bits(sign);
        const int shift = count_leading_zeros(mantissa) - 21;  // bring the leading one to bit 10
        mantissa = (mantissa << shift) & 0x3ffu;
        return hd::from_bits(sign | (static_cast<std::uint32_t>(113 - shift) << 23) | (mantissa << 13));
    }
    return hd::from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/// float -> bfloat16 bits, round to nearest even; a NaN stays a quiet NaN (hitch::bfloat16(float)).
[[nodiscard]] HITCH_HD_INLINE std::uint16_t float_to_bfloat16_bits(float value) noexcept {
    const std::uint32_t x = hd::bits(value);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
    const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
    return static_cast<std::uint16_t>(rounded >> 16);
}

/// bfloat16 bits -> float, exact.
[[nodiscard]] HITCH_HD_INLINE float bfloat16_bits_to_float(std::uint16_t b) noexcept {
    return hd::from_bits(static_cast<std::uint32_t>(b) << 16);
}

/// The conversions of a 16-bit storage type, by a tag: IsHalf true for binary16, false for bfloat16.
template <bool IsHalf>
struct low16 {
    [[nodiscard]] HITCH_HD_INLINE static float to_float(std::uint16_t bits) noexcept {
        if constexpr (IsHalf)
            return half_bits_to_float(bits);
        else
            return bfloat16_bits_to_float(bits);
    }
    [[nodiscard]] HITCH_HD_INLINE static std::uint16_t from_float(float x) noexcept {
        if constexpr (IsHalf)
            return float_to_half_bits(x);
        else
            return float_to_bfloat16_bits(x);
    }
};

/// The loss scaler's unscale of one element: float(g) * inv, one rounding (amp::loss_scaler::unscale).
[[nodiscard]] HITCH_HD_INLINE float unscale(float g, float inv) noexcept { return hd::mul(g, inv); }

}  // namespace hitch::cuda::amp
