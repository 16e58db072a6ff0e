#pragma once
// The per-element combination of hitch's all-reduce (hitch/allreduce/reduce_op.hpp), written once for the host and
// the GPU: the reduce kernels (hitch/cuda/allreduce/reduce.cuh) call it on the device, and the host tests call it on
// the host and compare it bit for bit with allreduce::combine, combine_many and divide. No CUDA header needed.
//
// The host's rules, restated for code that runs on both:
//   * half and bfloat16 are widened to float exactly, combined in float, divided (the last combination of an
//     average) and rounded once to nearest even, in integer arithmetic (the conversions of core/dtype.hpp, bit for
//     bit, NaN payloads included); float and double are combined in their own type.
//   * min and max pick an operand: `(l < r || l is NaN) ? l : r` and `(r < l || l is NaN) ? l : r`, so a NaN from
//     either side comes out untouched and min(-0, +0) is the right operand, as on the host.
//   * sum, and the division of an average, are IEEE operations rounded to nearest even (hd::add, hd::div: never
//     contracted, denormals kept). Where an operand is NaN the result follows the host CPU's rule instead of the
//     GPU's (a GPU returns one canonical NaN): the NaN operand, quieted, the left one when both are; an invalid
//     operation (inf + -inf) gives the CPU's default NaN (x86: negative, quiet, zero payload). So the GPU gives the
//     host's bits for NaN too.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hitch/core/dtype.hpp"
#include "hitch/core/reduce_op.hpp"
#include "hitch/cuda/detail/hd.hpp"

#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

namespace hitch::cuda::allreduce {

namespace hd = hitch::cuda::hd;

// ---- bits of double, on both sides ----------------------------------------------------------------------------

[[nodiscard]] HITCH_HD_INLINE std::uint64_t bits(double x) noexcept {
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

[[nodiscard]] HITCH_HD_INLINE bool is_nan(float x) noexcept { return (hd::bits(x) & 0x7fffffffu) > 0x7f800000u; }
[[nodiscard]] HITCH_HD_INLINE bool is_nan(double x) noexcept {
    return (bits(x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}
[[nodiscard]] HITCH_HD_INLINE float quieted(float x) noexcept { return hd::from_bits(hd::bits(x) | 0x00400000u); }
[[nodiscard]] HITCH_HD_INLINE double quieted(double x) noexcept {
    return double_from_bits(bits(x) | 0x0008000000000000ull);
}

/// The NaN the host CPU makes of an invalid operation (inf - inf): x86's "real indefinite" is negative; other CPUs
/// (AArch64, the GPU's own is different again) give the positive quiet NaN.
#if defined(__x86_64__) || defined(__i386__)
inline constexpr std::uint32_t default_nan_bits32 = 0xffc00000u;
inline constexpr std::uint64_t default_nan_bits64 = 0xfff8000000000000ull;
#else
inline constexpr std::uint32_t default_nan_bits32 = 0x7fc00000u;
inline constexpr std::uint64_t default_nan_bits64 = 0x7ff8000000000000ull;
#endif

// ---- 16-bit conversions (core/dtype.hpp's, bit for bit) ----------------------------------------------------------

[[nodiscard]] HITCH_HD_INLINE int leading_zeros(std::uint32_t x) noexcept {
#if defined(__CUDA_ARCH__)
    return __clz(static_cast<int>(x));
#else
    return std::countl_zero(x);
#endif
}

[[nodiscard]] HITCH_HD_INLINE std::uint16_t float_to_half_bits(float value) noexcept {
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

[[nodiscard]] HITCH_HD_INLINE float half_bits_to_float(std::uint16_t h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1fu;
    std::uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1fu) return hd::from_bits(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
        if (mantissa == 0) return hd::from_bits(sign);
        const int shift = leading_zeros(mantissa) - 21;
        mantissa = (mantissa << shift) & 0x3ffu;
        return hd::from_bits(sign | (static_cast<std::uint32_t>(113 - shift) << 23) | (mantissa << 13));
    }
    return hd::from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

[[nodiscard]] HITCH_HD_INLINE std::uint16_t float_to_bfloat16_bits(float value) noexcept {
    const std::uint32_t x = hd::bits(value);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
    const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
    return static_cast<std::uint16_t>(rounded >> 16);
}

[[nodiscard]] HITCH_HD_INLINE float bfloat16_bits_to_float(std::uint16_t b) noexcept {
    return hd::from_bits(static_cast<std::uint32_t>(b) << 16);
}

// ---- element types as the kernels see them ------------------------------------------------------------------------

/// How an element type is stored and combined on the device: `storage` is what the kernels load and store (the 16
/// bits of half and bfloat16), `accumulator` what they combine in.
template <class T>
struct element_traits;

template <>
struct element_traits<float> {
    using storage = float;
    using accumulator = float;
    [[nodiscard]] HITCH_HD_INLINE static float widen(float x) noexcept { return x; }
    [[nodiscard]] HITCH_HD_INLINE static float narrow(float x) noexcept { return x; }
};
template <>
struct element_traits<double> {
    using storage = double;
    using accumulator = double;
    [[nodiscard]] HITCH_HD_INLINE static double widen(double x) noexcept { return x; }
    [[nodiscard]] HITCH_HD_INLINE static double narrow(double x) noexcept { return x; }
};
template <>
struct element_traits<half> {
    using storage = std::uint16_t;
    using accumulator = float;
    [[nodiscard]] HITCH_HD_INLINE static float widen(std::uint16_t x) noexcept { return half_bits_to_float(x); }
    [[nodiscard]] HITCH_HD_INLINE static std::uint16_t narrow(float x) noexcept { return float_to_half_bits(x); }
};
template <>
struct element_traits<bfloat16> {
    using storage = std::uint16_t;
    using accumulator = float;
    [[nodiscard]] HITCH_HD_INLINE static float widen(std::uint16_t x) noexcept { return bfloat16_bits_to_float(x); }
    [[nodiscard]] HITCH_HD_INLINE static std::uint16_t narrow(float x) noexcept { return float_to_bfloat16_bits(x); }
};

template <class T>
using storage_t = typename element_traits<std::remove_cv_t<T>>::storage;
template <class T>
using accumulator_t = typename element_traits<std::remove_cv_t<T>>::accumulator;

static_assert(sizeof(storage_t<half>) == sizeof(half) && sizeof(storage_t<bfloat16>) == sizeof(bfloat16));

// ---- the combination ----------------------------------------------------------------------------------------------

/// IEEE addition with the host CPU's NaN results (see the file comment).
template <class A>
[[nodiscard]] HITCH_HD_INLINE A add(A left, A right) noexcept {
    if (is_nan(left)) return quieted(left);
    if (is_nan(right)) return quieted(right);
    const A sum = hd::add(left, right);
    if (is_nan(sum)) {
        if constexpr (std::is_same_v<A, float>)
            return hd::from_bits(default_nan_bits32);
        else
            return double_from_bits(default_nan_bits64);
    }
    return sum;
}

/// IEEE division by a whole number of ranks (>= 2), with the host CPU's NaN result.
template <class A>
[[nodiscard]] HITCH_HD_INLINE A divide(A value, A divisor) noexcept {
    if (is_nan(value)) return quieted(value);
    return hd::div(value, divisor);
}

/// One combination, left operand first (allreduce::detail::apply).
template <class A>
[[nodiscard]] HITCH_HD_INLINE A apply(reduce_op op, A left, A right) noexcept {
    switch (op) {
        case reduce_op::sum:
        case reduce_op::average:
            return add(left, right);
        case reduce_op::min:
            return (left < right || is_nan(left)) ? left : right;
        case reduce_op::max:
            return (right < left || is_nan(left)) ? left : right;
    }
    return left;
}

/// What allreduce::combine computes for one element: op(left, right), divided by `divisor` when `divide`, rounded
/// once to the element type. `divide` is true only for the last combination of an average (divisor = p >= 2).
template <class T>
[[nodiscard]] HITCH_HD_INLINE storage_t<T> combine_element(reduce_op op, storage_t<T> left, storage_t<T> right,
                                                           bool divide_result, accumulator_t<T> divisor) noexcept {
    using traits = element_traits<std::remove_cv_t<T>>;
    accumulator_t<T> v = apply(op, traits::widen(left), traits::widen(right));
    if (divide_result) v = divide(v, divisor);
    return traits::narrow(v);
}

/// Whether a combination divides: an average whose divisor is not 1 (allreduce::combine's rule).
[[nodiscard]] HITCH_HD_INLINE bool divides(reduce_op op, int divisor) noexcept {
    return divisor != 1 && op == reduce_op::average;
}

/// What allreduce::divide computes for one element: value / divisor, rounded once.
template <class T>
[[nodiscard]] HITCH_HD_INLINE storage_t<T> divide_element(storage_t<T> value, accumulator_t<T> divisor) noexcept {
    using traits = element_traits<std::remove_cv_t<T>>;
    return traits::narrow(divide(traits::widen(value), divisor));
}

/// What allreduce::combine_many computes for one element: the k sources (k >= 1) combined left to right in the
/// accumulator type, divided when `divide_result`, rounded once. `source(s)` gives source s's element.
template <class T, class Source>
[[nodiscard]] HITCH_HD_INLINE storage_t<T> combine_many_element(reduce_op op, std::size_t k, Source&& source,
                                                                bool divide_result, accumulator_t<T> divisor) noexcept {
    using traits = element_traits<std::remove_cv_t<T>>;
    if (k == 1 && !divide_result) return source(std::size_t{0});  // the host copies: a NaN keeps its bits
    accumulator_t<T> acc = traits::widen(source(std::size_t{0}));
    for (std::size_t s = 1; s < k; ++s) acc = apply(op, acc, traits::widen(source(s)));
    if (divide_result) acc = divide(acc, divisor);
    return traits::narrow(acc);
}

}  // namespace hitch::cuda::allreduce
