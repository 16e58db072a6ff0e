#pragma once
// Element conversions of the GPU codecs, for host and device (no CUDA header): float <-> half and float <->
// bfloat16 with hitch's exact rules (core/dtype.hpp: round to nearest even in integer arithmetic, a NaN kept quiet
// with the top of its payload), the element types of a bucket held as their storage on the device (half and
// bfloat16 as 16-bit words), and the per-element steps of the fp16 / bf16 codecs (compress/detail/half_kernels.hpp).
// The host tests compare every function here with the host's, bit for bit.

#include <cstdint>
#include <type_traits>

#include "hitch/core/dtype.hpp"
#include "hitch/cuda/detail/hd.hpp"

namespace hitch::cuda::compress::detail {

namespace hd = hitch::cuda::hd;

// ---- bits ---------------------------------------------------------------------------------------------------------

[[nodiscard]] HITCH_HD_INLINE int countl_zero32(std::uint32_t x) noexcept {
#if defined(__CUDA_ARCH__)
    return __clz(static_cast<int>(x));
#else
    return std::countl_zero(x);
#endif
}

[[nodiscard]] HITCH_HD_INLINE std::uint64_t double_bits(double x) noexcept {
#if defined(__CUDA_ARCH__)
    return static_cast<std::uint64_t>(__double_as_longlong(x));
#else
    return std::bit_cast<std::uint64_t>(x);
#endif
}

[[nodiscard]] HITCH_HD_INLINE double double_from_bits(std::uint64_t b) noexcept {
#if defined(__CUDA_ARCH__)
    return __longlong_as_double(static_cast<long long>(b));
#else
    return std::bit_cast<double>(b);
#endif
}

/// static_cast<double>(float) as x86-64 computes it (cvtss2sd), NaN included: a NaN comes out quiet with its payload
/// (a GPU's conversion gives its canonical NaN instead).
[[nodiscard]] HITCH_HD_INLINE double widen(float x) noexcept {
    const std::uint32_t b = hd::bits(x);
    if ((b & 0x7fffffffu) <= 0x7f800000u) return static_cast<double>(x);
    return double_from_bits(static_cast<std::uint64_t>(b >> 31) << 63 | 0x7ff8000000000000ull |
                            static_cast<std::uint64_t>(b & 0x7fffffu) << 29);
}

/// static_cast<float>(double) as x86-64 computes it (cvtsd2ss, round to nearest even), NaN included: a NaN comes out
/// quiet with the top of its payload.
[[nodiscard]] HITCH_HD_INLINE float narrow(double x) noexcept {
    const std::uint64_t b = double_bits(x);
    if ((b & 0x7fffffffffffffffull) <= 0x7ff0000000000000ull) return static_cast<float>(x);
    return hd::from_bits(static_cast<std::uint32_t>(b >> 63) << 31 | 0x7fc00000u |
                         static_cast<std::uint32_t>((b >> 29) & 0x7fffffu));
}

/// a - b in double, rounded to nearest even (hd.hpp has float's).
[[nodiscard]] HITCH_HD_INLINE double dsub(double a, double b) noexcept {
#if defined(__CUDA_ARCH__)
    return __dsub_rn(a, b);
#else
    return a - b;
#endif
}

/// std::isfinite by the bits.
[[nodiscard]] HITCH_HD_INLINE bool finite(float x) noexcept { return !hd::non_finite(x); }
[[nodiscard]] HITCH_HD_INLINE bool finite(double x) noexcept {
    return (double_bits(x) & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}
/// std::signbit by the bits.
[[nodiscard]] HITCH_HD_INLINE bool sign_bit(float x) noexcept { return (hd::bits(x) >> 31) != 0; }
/// std::fabs by the bits.
[[nodiscard]] HITCH_HD_INLINE float abs_value(float x) noexcept { return hd::from_bits(hd::bits(x) & 0x7fffffffu); }

// ---- half and bfloat16 --------------------------------------------------------------------------------------------

/// hitch::detail::float_to_half_bits.
[[nodiscard]] HITCH_HD_INLINE std::uint16_t half_bits(float value) noexcept {
    const std::uint32_t x = hd::bits(value);
    const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    const std::uint32_t mag = x & 0x7fffffffu;
    if (mag >= 0x7f800000u) {
        if (mag == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
        return static_cast<std::uint16_t>(sign | 0x7e00u | ((mag >> 13) & 0x3ffu));
    }
    if (mag >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
    if (mag >= 0x38800000u) {
        const std::uint32_t rounded = mag + 0x0fffu + ((mag >> 13) & 1u);
        return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
    }
    if (mag <= 0x33000000u) return sign;
    const std::uint32_t exponent = mag >> 23;
    const std::uint32_t mantissa = (mag & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exponent;
    std::uint32_t m = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (m & 1u))) ++m;
    return static_cast<std::uint16_t>(sign | m);
}

/// hitch::detail::half_bits_to_float.
[[nodiscard]] HITCH_HD_INLINE float half_value(std::uint16_t h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1fu;
    std::uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1fu) return hd::from_bits(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
        if (mantissa == 0) return hd::from_bits(sign);
        const int shift = countl_zero32(mantissa) - 21;
        mantissa = (mantissa << shift) & 0x3ffu;
        return hd::from_bits(sign | (static_cast<std::uint32_t>(113 - shift) << 23) | (mantissa << 13));
    }
    return hd::from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/// hitch::detail::float_to_bfloat16_bits (and compress::detail::bf16_bits: the same rule).
[[nodiscard]] HITCH_HD_INLINE std::uint16_t bf16_bits(float value) noexcept {
    const std::uint32_t x = hd::bits(value);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
    return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

[[nodiscard]] HITCH_HD_INLINE float bf16_value(std::uint16_t b) noexcept {
    return hd::from_bits(static_cast<std::uint32_t>(b) << 16);
}

// ---- bucket elements ----------------------------------------------------------------------------------------------

/// How an element type of a bucket is held and converted on the device: half and bfloat16 as their 16-bit words,
/// with the conversions of hitch::half and hitch::bfloat16 (from double: to float first, as their constructors do).
template <class T>
struct element;

template <>
struct element<float> {
    using storage = float;
    [[nodiscard]] HITCH_HD_INLINE static float to_float(float x) noexcept { return x; }
    [[nodiscard]] HITCH_HD_INLINE static double to_double(float x) noexcept { return widen(x); }
    [[nodiscard]] HITCH_HD_INLINE static float from_float(float x) noexcept { return x; }
    [[nodiscard]] HITCH_HD_INLINE static float from_double(double x) noexcept { return narrow(x); }
};
template <>
struct element<double> {
    using storage = double;
    [[nodiscard]] HITCH_HD_INLINE static float to_float(double x) noexcept { return narrow(x); }
    [[nodiscard]] HITCH_HD_INLINE static double to_double(double x) noexcept { return x; }
    [[nodiscard]] HITCH_HD_INLINE static double from_float(float x) noexcept { return widen(x); }
    [[nodiscard]] HITCH_HD_INLINE static double from_double(double x) noexcept { return x; }
};
template <>
struct element<half> {
    using storage = std::uint16_t;
    [[nodiscard]] HITCH_HD_INLINE static float to_float(std::uint16_t x) noexcept { return half_value(x); }
    [[nodiscard]] HITCH_HD_INLINE static double to_double(std::uint16_t x) noexcept { return widen(half_value(x)); }
    [[nodiscard]] HITCH_HD_INLINE static std::uint16_t from_float(float x) noexcept { return half_bits(x); }
    [[nodiscard]] HITCH_HD_INLINE static std::uint16_t from_double(double x) noexcept { return half_bits(narrow(x)); }
};
template <>
struct element<bfloat16> {
    using storage = std::uint16_t;
    [[nodiscard]] HITCH_HD_INLINE static float to_float(std::uint16_t x) noexcept { return bf16_value(x); }
    [[nodiscard]] HITCH_HD_INLINE static double to_double(std::uint16_t x) noexcept { return widen(bf16_value(x)); }
    [[nodiscard]] HITCH_HD_INLINE static std::uint16_t from_float(float x) noexcept { return bf16_bits(x); }
    [[nodiscard]] HITCH_HD_INLINE static std::uint16_t from_double(double x) noexcept { return bf16_bits(narrow(x)); }
};

template <class T>
using storage_t = typename element<std::remove_const_t<T>>::storage;

/// compress::detail::store_floats for one element: out = v, or out = T(float(out) + v) (float arithmetic), what the
/// host codecs' decode and decode_add do for a bucket of T (through a float buffer when T is not float).
template <bool Add, class T>
[[nodiscard]] HITCH_HD_INLINE storage_t<T> store_float(storage_t<T> out, float v) noexcept {
    if constexpr (Add)
        return element<T>::from_float(hd::add(element<T>::to_float(out), v));
    else
        return element<T>::from_float(v);
}

// ---- the 16-bit casts ---------------------------------------------------------------------------------------------

/// IEEE binary16 (compress::fp16).
struct half_format {
    static constexpr std::uint16_t exponent_mask = 0x7c00u;
    [[nodiscard]] HITCH_HD_INLINE static std::uint16_t bits(float v) noexcept { return half_bits(v); }
    [[nodiscard]] HITCH_HD_INLINE static float value(std::uint16_t b) noexcept { return half_value(b); }
};
/// bfloat16 (compress::bf16).
struct bf16_format {
    static constexpr std::uint16_t exponent_mask = 0x7f80u;
    [[nodiscard]] HITCH_HD_INLINE static std::uint16_t bits(float v) noexcept { return bf16_bits(v); }
    [[nodiscard]] HITCH_HD_INLINE static float value(std::uint16_t b) noexcept { return bf16_value(b); }
};

/// One element of a 16-bit cast's encode (compress/detail/half_kernels.hpp's to_half / to_bf16): the word sent for
/// v = g (+ r_in), `bad` set when it is not finite, and with EF the residual r_out = v - value(word).
template <class Format, bool EF>
[[nodiscard]] HITCH_HD_INLINE std::uint16_t cast16_encode(float g, float r_in, float& r_out, bool& bad) noexcept {
    float v = g;
    if constexpr (EF) v = hd::add(v, r_in);
    const std::uint16_t w = Format::bits(v);
    bad = bad || (w & Format::exponent_mask) == Format::exponent_mask;
    if constexpr (EF) r_out = hd::sub(v, Format::value(w));
    return w;
}

/// compress::none's decode of one element of type D into a bucket of T: the bits themselves when D is T (none.hpp
/// copies them, NaN payloads included), else in double when either is double, else in float (none.hpp's convert).
template <bool Add, class D, class T>
[[nodiscard]] HITCH_HD_INLINE storage_t<T> none_store(storage_t<T> out, storage_t<D> in) noexcept {
    constexpr bool wide = std::is_same_v<D, double> || std::is_same_v<T, double>;
    if constexpr (!Add && std::is_same_v<D, T>) {
        return in;
    } else if constexpr (wide) {
        const double v = element<D>::to_double(in);
        if constexpr (Add)
            return element<T>::from_double(hd::add(element<T>::to_double(out), v));
        else
            return element<T>::from_double(v);
    } else {
        const float v = element<D>::to_float(in);
        if constexpr (Add)
            return element<T>::from_float(hd::add(element<T>::to_float(out), v));
        else
            return element<T>::from_float(v);
    }
}

}  // namespace hitch::cuda::compress::detail
