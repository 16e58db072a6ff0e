#pragma once
// Element types: float, double and the 16-bit host storage types hitch::half (IEEE 754 binary16) and
// hitch::bfloat16 (the upper half of a binary32). Conversions from float round to nearest, ties to even,
// in integer arithmetic, so they do not depend on the floating-point environment.

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

namespace hitch {

namespace detail {

[[nodiscard]] constexpr std::uint16_t float_to_half_bits(float value) noexcept {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
    const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    const std::uint32_t mag = x & 0x7fffffffu;
    if (mag >= 0x7f800000u) {  // inf or NaN; a NaN stays a (quiet) NaN and keeps the top of its payload
        if (mag == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
        return static_cast<std::uint16_t>(sign | 0x7e00u | ((mag >> 13) & 0x3ffu));
    }
    if (mag >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
    if (mag >= 0x38800000u) {  // normal half: rebias exponent (127 -> 15), round 13 dropped bits to even
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
    if (rest > halfway || (rest == halfway && (m & 1u))) ++m;  // may carry into the smallest normal: still right
    return static_cast<std::uint16_t>(sign | m);
}

[[nodiscard]] constexpr float half_bits_to_float(std::uint16_t h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    std::uint32_t exponent = (h >> 10) & 0x1fu;
    std::uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
        if (mantissa == 0) return std::bit_cast<float>(sign);
        const int shift = std::countl_zero(mantissa) - 21;  // bring the leading one to bit 10
        mantissa = (mantissa << shift) & 0x3ffu;
        return std::bit_cast<float>(sign | (static_cast<std::uint32_t>(113 - shift) << 23) | (mantissa << 13));
    }
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

[[nodiscard]] constexpr std::uint16_t float_to_bfloat16_bits(float value) noexcept {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
    const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
    return static_cast<std::uint16_t>(rounded >> 16);
}

[[nodiscard]] constexpr float bfloat16_bits_to_float(std::uint16_t b) noexcept {
    return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

}  // namespace detail

/// IEEE 754 binary16, a storage type: arithmetic happens in float (the conversion to float is implicit and exact;
/// the conversion from float is explicit and rounds to nearest even).
class half {
public:
    constexpr half() noexcept = default;
    constexpr explicit half(float value) noexcept : bits_(detail::float_to_half_bits(value)) {}
    constexpr explicit half(double value) noexcept : half(static_cast<float>(value)) {}
    constexpr operator float() const noexcept { return detail::half_bits_to_float(bits_); }

    [[nodiscard]] static constexpr half from_bits(std::uint16_t bits) noexcept {
        half h;
        h.bits_ = bits;
        return h;
    }
    [[nodiscard]] constexpr std::uint16_t bits() const noexcept { return bits_; }

private:
    std::uint16_t bits_ = 0;
};

/// bfloat16: the upper 16 bits of a binary32. A storage type like hitch::half.
class bfloat16 {
public:
    constexpr bfloat16() noexcept = default;
    constexpr explicit bfloat16(float value) noexcept : bits_(detail::float_to_bfloat16_bits(value)) {}
    constexpr explicit bfloat16(double value) noexcept : bfloat16(static_cast<float>(value)) {}
    constexpr operator float() const noexcept { return detail::bfloat16_bits_to_float(bits_); }

    [[nodiscard]] static constexpr bfloat16 from_bits(std::uint16_t bits) noexcept {
        bfloat16 b;
        b.bits_ = bits;
        return b;
    }
    [[nodiscard]] constexpr std::uint16_t bits() const noexcept { return bits_; }

private:
    std::uint16_t bits_ = 0;
};

static_assert(sizeof(half) == 2 && std::is_trivially_copyable_v<half>);
static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>);

/// Run-time tag for an element type; travels in message headers and cross-rank checks.
enum class dtype : std::uint8_t {
    u8 = 1,
    i8 = 2,
    i32 = 3,
    u32 = 4,
    i64 = 5,
    u64 = 6,
    f16 = 7,
    bf16 = 8,
    f32 = 9,
    f64 = 10,
};

template <class T>
inline constexpr bool is_dtype_v = false;
template <>
inline constexpr bool is_dtype_v<std::uint8_t> = true;
template <>
inline constexpr bool is_dtype_v<std::int8_t> = true;
template <>
inline constexpr bool is_dtype_v<std::byte> = true;
template <>
inline constexpr bool is_dtype_v<std::int32_t> = true;
template <>
inline constexpr bool is_dtype_v<std::uint32_t> = true;
template <>
inline constexpr bool is_dtype_v<std::int64_t> = true;
template <>
inline constexpr bool is_dtype_v<std::uint64_t> = true;
template <>
inline constexpr bool is_dtype_v<half> = true;
template <>
inline constexpr bool is_dtype_v<bfloat16> = true;
template <>
inline constexpr bool is_dtype_v<float> = true;
template <>
inline constexpr bool is_dtype_v<double> = true;

/// The element types hitch moves and reduces.
template <class T>
concept element_type = is_dtype_v<std::remove_cv_t<T>>;

/// The floating-point element types (those the reduce ops and optimizers accept).
template <class T>
concept floating_element = std::same_as<std::remove_cv_t<T>, float> || std::same_as<std::remove_cv_t<T>, double> ||
                           std::same_as<std::remove_cv_t<T>, half> || std::same_as<std::remove_cv_t<T>, bfloat16>;

template <element_type T>
[[nodiscard]] constexpr dtype dtype_of() noexcept {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_same_v<U, std::uint8_t> || std::is_same_v<U, std::byte>)
        return dtype::u8;
    else if constexpr (std::is_same_v<U, std::int8_t>)
        return dtype::i8;
    else if constexpr (std::is_same_v<U, std::int32_t>)
        return dtype::i32;
    else if constexpr (std::is_same_v<U, std::uint32_t>)
        return dtype::u32;
    else if constexpr (std::is_same_v<U, std::int64_t>)
        return dtype::i64;
    else if constexpr (std::is_same_v<U, std::uint64_t>)
        return dtype::u64;
    else if constexpr (std::is_same_v<U, half>)
        return dtype::f16;
    else if constexpr (std::is_same_v<U, bfloat16>)
        return dtype::bf16;
    else if constexpr (std::is_same_v<U, float>)
        return dtype::f32;
    else
        return dtype::f64;
}

/// Bytes per element; 0 for a value that is not a known dtype (e.g. decoded from a corrupt header).
[[nodiscard]] constexpr std::size_t size_of(dtype t) noexcept {
    switch (t) {
        case dtype::u8:
        case dtype::i8:
            return 1;
        case dtype::f16:
        case dtype::bf16:
            return 2;
        case dtype::i32:
        case dtype::u32:
        case dtype::f32:
            return 4;
        case dtype::i64:
        case dtype::u64:
        case dtype::f64:
            return 8;
    }
    return 0;
}

[[nodiscard]] constexpr bool is_valid(dtype t) noexcept { return size_of(t) != 0; }

[[nodiscard]] constexpr std::string_view name(dtype t) noexcept {
    switch (t) {
        case dtype::u8:
            return "uint8";
        case dtype::i8:
            return "int8";
        case dtype::i32:
            return "int32";
        case dtype::u32:
            return "uint32";
        case dtype::i64:
            return "int64";
        case dtype::u64:
            return "uint64";
        case dtype::f16:
            return "half";
        case dtype::bf16:
            return "bfloat16";
        case dtype::f32:
            return "float";
        case dtype::f64:
            return "double";
    }
    return "invalid-dtype";
}

/// True for finite values of any floating element type (integers are always finite).
template <element_type T>
[[nodiscard]] constexpr bool is_finite(T value) noexcept {
    if constexpr (std::is_same_v<T, half>)
        return (value.bits() & 0x7c00u) != 0x7c00u;
    else if constexpr (std::is_same_v<T, bfloat16>)
        return (value.bits() & 0x7f80u) != 0x7f80u;
    else if constexpr (std::is_floating_point_v<T>)
        return std::isfinite(value);
    else
        return true;
}

}  // namespace hitch

template <>
class std::numeric_limits<hitch::half> {
public:
    static constexpr bool is_specialized = true;
    static constexpr bool is_signed = true;
    static constexpr bool is_integer = false;
    static constexpr bool is_exact = false;
    static constexpr bool has_infinity = true;
    static constexpr bool has_quiet_NaN = true;
    static constexpr bool has_signaling_NaN = true;
    static constexpr bool has_denorm_loss = false;
    static constexpr std::float_round_style round_style = std::round_to_nearest;
    static constexpr bool is_iec559 = true;
    static constexpr bool is_bounded = true;
    static constexpr bool is_modulo = false;
    static constexpr int digits = 11;
    static constexpr int digits10 = 3;
    static constexpr int max_digits10 = 5;
    static constexpr int radix = 2;
    static constexpr int min_exponent = -13;
    static constexpr int min_exponent10 = -4;
    static constexpr int max_exponent = 16;
    static constexpr int max_exponent10 = 4;
    static constexpr hitch::half min() noexcept { return hitch::half::from_bits(0x0400); }
    static constexpr hitch::half lowest() noexcept { return hitch::half::from_bits(0xfbff); }
    static constexpr hitch::half max() noexcept { return hitch::half::from_bits(0x7bff); }
    static constexpr hitch::half epsilon() noexcept { return hitch::half::from_bits(0x1400); }
    static constexpr hitch::half round_error() noexcept { return hitch::half::from_bits(0x3800); }
    static constexpr hitch::half infinity() noexcept { return hitch::half::from_bits(0x7c00); }
    static constexpr hitch::half quiet_NaN() noexcept { return hitch::half::from_bits(0x7e00); }
    static constexpr hitch::half signaling_NaN() noexcept { return hitch::half::from_bits(0x7d00); }
    static constexpr hitch::half denorm_min() noexcept { return hitch::half::from_bits(0x0001); }
};

template <>
class std::numeric_limits<hitch::bfloat16> {
public:
    static constexpr bool is_specialized = true;
    static constexpr bool is_signed = true;
    static constexpr bool is_integer = false;
    static constexpr bool is_exact = false;
    static constexpr bool has_infinity = true;
    static constexpr bool has_quiet_NaN = true;
    static constexpr bool has_signaling_NaN = true;
    static constexpr bool has_denorm_loss = false;
    static constexpr std::float_round_style round_style = std::round_to_nearest;
    static constexpr bool is_iec559 = false;
    static constexpr bool is_bounded = true;
    static constexpr bool is_modulo = false;
    static constexpr int digits = 8;
    static constexpr int digits10 = 2;
    static constexpr int max_digits10 = 4;
    static constexpr int radix = 2;
    static constexpr int min_exponent = -125;
    static constexpr int min_exponent10 = -37;
    static constexpr int max_exponent = 128;
    static constexpr int max_exponent10 = 38;
    static constexpr hitch::bfloat16 min() noexcept { return hitch::bfloat16::from_bits(0x0080); }
    static constexpr hitch::bfloat16 lowest() noexcept { return hitch::bfloat16::from_bits(0xff7f); }
    static constexpr hitch::bfloat16 max() noexcept { return hitch::bfloat16::from_bits(0x7f7f); }
    static constexpr hitch::bfloat16 epsilon() noexcept { return hitch::bfloat16::from_bits(0x3c00); }
    static constexpr hitch::bfloat16 round_error() noexcept { return hitch::bfloat16::from_bits(0x3f00); }
    static constexpr hitch::bfloat16 infinity() noexcept { return hitch::bfloat16::from_bits(0x7f80); }
    static constexpr hitch::bfloat16 quiet_NaN() noexcept { return hitch::bfloat16::from_bits(0x7fc0); }
    static constexpr hitch::bfloat16 signaling_NaN() noexcept { return hitch::bfloat16::from_bits(0x7fa0); }
    static constexpr hitch::bfloat16 denorm_min() noexcept { return hitch::bfloat16::from_bits(0x0001); }
};
