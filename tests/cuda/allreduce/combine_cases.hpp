#pragma once
// Values for the tests of the reduce kernels' math (host: combine_host.cpp; GPU: reduce.cu): each type's edge values
// (signed zeros, denormals, extremes, infinities, quiet and signalling NaNs with payloads, the 16-bit types' rounding
// boundaries and ties) and seeded random values, mostly ordinary magnitudes and some arbitrary bit patterns.

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "hitch/core/dtype.hpp"
#include "hitch/core/reduce_op.hpp"

namespace hitch_test {

using hitch::bfloat16;
using hitch::half;

template <class T>
std::uint64_t bits_of(T x) {
    std::uint64_t b = 0;
    std::memcpy(&b, &x, sizeof(x));
    return b;
}

template <class T>
bool nan(T x) {
    if constexpr (std::is_same_v<T, half>)
        return (x.bits() & 0x7fffu) > 0x7c00u;
    else if constexpr (std::is_same_v<T, bfloat16>)
        return (x.bits() & 0x7fffu) > 0x7f80u;
    else
        return std::isnan(x);
}

inline float f32(std::uint32_t b) { return std::bit_cast<float>(b); }
inline double f64(std::uint64_t b) { return std::bit_cast<double>(b); }

/// Edge values of each type (as the type itself).
template <class T>
std::vector<T> edges();

template <>
inline std::vector<float> edges<float>() {
    const float inf = std::numeric_limits<float>::infinity();
    return {0.0f,
            -0.0f,
            1.0f,
            -1.0f,
            0.1f,
            3.0f,
            std::numeric_limits<float>::denorm_min(),
            -std::numeric_limits<float>::denorm_min(),
            f32(0x007fffffu),  // the largest denormal
            std::numeric_limits<float>::min(),
            std::numeric_limits<float>::max(),
            std::numeric_limits<float>::lowest(),
            inf,
            -inf,
            f32(0x7fc00000u),   // quiet NaN
            f32(0xffc00000u),   // negative quiet NaN (x86's default)
            f32(0x7fc12345u),   // quiet NaN with a payload
            f32(0x7f812345u),   // signalling NaN with a payload
            f32(0xff800001u),   // negative signalling NaN
            f32(0x33800000u),   // 2^-24: half's smallest denormal
            f32(0x33000000u),   // 2^-25: half's rounding tie to zero
            f32(0x33400000u),   // 1.5 * 2^-25
            f32(0x477fe000u),   // 65504: half's largest
            f32(0x477ff000u),   // 65520: rounds to half's infinity
            f32(0x477fefffu),   // just below: rounds to 65504
            f32(0x3f808000u),   // 1 + 2^-8: bfloat16 tie, rounds to even (down)
            f32(0x3f818000u),   // 1 + 3 * 2^-8: bfloat16 tie, rounds up
            f32(0x3f801000u),   // 1 + 2^-11: half tie
            f32(0x38800000u),   // 2^-14: half's smallest normal
            f32(0x387fc000u)};  // half's largest denormal
}

template <>
inline std::vector<double> edges<double>() {
    const double inf = std::numeric_limits<double>::infinity();
    return {0.0,
            -0.0,
            1.0,
            -1.0,
            0.1,
            3.0,
            std::numeric_limits<double>::denorm_min(),
            -std::numeric_limits<double>::denorm_min(),
            f64(0x000fffffffffffffull),
            std::numeric_limits<double>::min(),
            std::numeric_limits<double>::max(),
            std::numeric_limits<double>::lowest(),
            inf,
            -inf,
            f64(0x7ff8000000000000ull),
            f64(0xfff8000000000000ull),
            f64(0x7ff8000000012345ull),
            f64(0x7ff0000000012345ull),
            f64(0xfff0000000000001ull),
            1e308,
            -1e-310};
}

template <>
inline std::vector<half> edges<half>() {
    std::vector<half> out;
    for (std::uint16_t b : std::initializer_list<std::uint16_t>{
             0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x3c01, 0x7bff, 0xfbff,
             0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7e55, 0x7d00, 0x7c01, 0xfd55, 0x3555, 0x0200, 0x4248})
        out.push_back(half::from_bits(b));
    return out;
}

template <>
inline std::vector<bfloat16> edges<bfloat16>() {
    std::vector<bfloat16> out;
    for (std::uint16_t b : std::initializer_list<std::uint16_t>{0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x3f80,
                                                                0xbf80, 0x3f81, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0,
                                                                0xffc0, 0x7fd5, 0x7fa0, 0x7f81, 0xffa5, 0x3eab, 0x4049})
        out.push_back(bfloat16::from_bits(b));
    return out;
}

template <class T>
T random_value(std::mt19937_64& rng) {
    // Mostly ordinary magnitudes (where rounding matters), some anything-goes bit patterns (denormals, NaNs).
    std::uniform_int_distribution<int> kind(0, 9);
    std::uniform_real_distribution<double> u(-4.0, 4.0);
    if (kind(rng) == 0) {
        const std::uint64_t b = rng();
        if constexpr (std::is_same_v<T, float>)
            return std::bit_cast<float>(static_cast<std::uint32_t>(b));
        else if constexpr (std::is_same_v<T, double>)
            return std::bit_cast<double>(b);
        else
            return T::from_bits(static_cast<std::uint16_t>(b));
    }
    const double v = u(rng) * std::exp2(static_cast<double>(kind(rng) - 5) * 3.0);
    if constexpr (std::is_same_v<T, double>)
        return v;
    else
        return T(static_cast<float>(v));
}

template <class T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<T> v(n);
    for (auto& x : v) x = random_value<T>(rng);
    return v;
}

/// True when the host may give either operand's payload: a sum (or average) of two NaNs.
template <class T>
bool payload_open(hitch::reduce_op op, T left, T right) {
    return (op == hitch::reduce_op::sum || op == hitch::reduce_op::average) && nan(left) && nan(right);
}

}  // namespace hitch_test
