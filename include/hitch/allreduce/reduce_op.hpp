#pragma once
// Reduce operations and the element-wise kernels every schedule uses to combine buffers.
//
// 16-bit types (half, bfloat16) are combined in float: each combination converts its operands to float, applies
// the op (and, for the final combination of an average, the division by the world size) and rounds once to the
// 16-bit type. A combination of k operands at once (a tree node with two children, a parameter-server shard)
// accumulates all k in float and rounds once. Partial results that travel between ranks are in the element type.
//
// min and max propagate NaN from either operand (as torch.min/max do); sum propagates it by IEEE arithmetic.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "hitch/core/dtype.hpp"
#include "hitch/core/reduce_op.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define HITCH_ALLREDUCE_F16C 1
#else
#define HITCH_ALLREDUCE_F16C 0
#endif

namespace hitch::allreduce {

using hitch::reduce_op;

/// The type arithmetic happens in: float for float, half and bfloat16; double for double.
template <floating_element T>
using accumulate_t = std::conditional_t<std::is_same_v<std::remove_cv_t<T>, double>, double, float>;

namespace detail {

/// One combination, left operand first. min/max keep a NaN from either side.
template <class A>
[[nodiscard]] constexpr A apply(reduce_op op, A left, A right) noexcept {
    switch (op) {
        case reduce_op::sum:
        case reduce_op::average:
            return left + right;
        case reduce_op::min:
            return (left < right || left != left) ? left : right;
        case reduce_op::max:
            return (right < left || left != left) ? left : right;
    }
    return left;
}

template <class T, class A>
[[nodiscard]] constexpr T from_accumulator(A value) noexcept {
    if constexpr (std::is_same_v<T, A>)
        return value;
    else
        return T(value);
}

// The kernels below are written three times over, for dst == left, dst == right and dst apart from both, each with
// the pointers that cannot overlap marked __restrict: a single loop over three possibly-aliasing pointers does not
// vectorise (the compiler's run-time overlap check rejects dst == left and falls back to scalar code, 15 to 20
// times slower in cache), and in-place combination is what every schedule does.

/// dst[i] = op(dst[i], right[i]), or op(left[i], dst[i]) when `dst_is_right`, divided when `Divide`.
template <reduce_op Op, bool Divide, bool DstIsRight, class T>
void combine_in_place(T* __restrict dst, const T* __restrict other, std::size_t n, accumulate_t<T> divisor) noexcept {
    using A = accumulate_t<T>;
    for (std::size_t i = 0; i < n; ++i) {
        const A mine = static_cast<A>(dst[i]);
        const A theirs = static_cast<A>(other[i]);
        A v = DstIsRight ? apply<A>(Op, theirs, mine) : apply<A>(Op, mine, theirs);
        if constexpr (Divide) v = v / divisor;
        dst[i] = from_accumulator<T>(v);
    }
}

/// dst[i] = op(left[i], right[i]) for dst apart from both.
template <reduce_op Op, bool Divide, class T>
void combine_apart(T* __restrict dst, const T* __restrict left, const T* __restrict right, std::size_t n,
                   accumulate_t<T> divisor) noexcept {
    using A = accumulate_t<T>;
    for (std::size_t i = 0; i < n; ++i) {
        A v = apply<A>(Op, static_cast<A>(left[i]), static_cast<A>(right[i]));
        if constexpr (Divide) v = v / divisor;
        dst[i] = from_accumulator<T>(v);
    }
}

template <reduce_op Op, bool Divide, class T>
void combine_loop(T* dst, const T* left, const T* right, std::size_t n, accumulate_t<T> divisor) noexcept {
    if (dst == left && dst == right) {  // op(x, x): only an average changes anything
        if constexpr (Divide) combine_apart<Op, Divide>(dst, left, right, 0, divisor);
        using A = accumulate_t<T>;
        for (std::size_t i = 0; i < n; ++i) {
            A v = apply<A>(Op, static_cast<A>(dst[i]), static_cast<A>(dst[i]));
            if constexpr (Divide) v = v / divisor;
            dst[i] = from_accumulator<T>(v);
        }
    } else if (dst == left) {
        combine_in_place<Op, Divide, false>(dst, right, n, divisor);
    } else if (dst == right) {
        combine_in_place<Op, Divide, true>(dst, left, n, divisor);
    } else {
        combine_apart<Op, Divide>(dst, left, right, n, divisor);
    }
}

template <bool Divide, class T>
void combine_dispatch(T* dst, const T* left, const T* right, std::size_t n, reduce_op op,
                      accumulate_t<T> divisor) noexcept {
    switch (op) {
        case reduce_op::sum:
        case reduce_op::average:
            return combine_loop<reduce_op::sum, Divide>(dst, left, right, n, divisor);
        case reduce_op::min:
            return combine_loop<reduce_op::min, Divide>(dst, left, right, n, divisor);
        case reduce_op::max:
            return combine_loop<reduce_op::max, Divide>(dst, left, right, n, divisor);
    }
}

#if HITCH_ALLREDUCE_F16C
[[nodiscard]] inline bool cpu_has_f16c() noexcept {
    // F16C is CPUID leaf 1, ECX bit 29: clang 14's __builtin_cpu_supports does not know the name "f16c".
    static const bool yes = [] {
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && ((ecx >> 29) & 1u) != 0;
        __builtin_cpu_init();
        return f16c && __builtin_cpu_supports("avx2");
    }();
    return yes;
}

/// The sum (and average) of binary16 buffers eight lanes at a time with the F16C conversions: the same IEEE
/// operations as the scalar loop (exact widening, one float add, one division, one round to nearest even), so the
/// bits are the same; the scalar conversion is software and does not vectorise. Returns how many it combined.
/// dst may be left or right (each group of eight is loaded before it is stored).
template <bool Divide>
__attribute__((target("avx2,f16c"))) inline std::size_t sum_half_f16c(std::uint16_t* dst, const std::uint16_t* left,
                                                                      const std::uint16_t* right, std::size_t n,
                                                                      float divisor) noexcept {
    const __m256 d = _mm256_set1_ps(divisor);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(left + i)));
        const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(right + i)));
        __m256 v = _mm256_add_ps(a, b);
        if constexpr (Divide) v = _mm256_div_ps(v, d);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    return i;
}
#endif

}  // namespace detail

/// dst[i] = op(left[i], right[i]), then divided by `divisor` when it is not 1 (the last combination of an
/// average). dst may be left or right itself, or apart from both (not partly overlapping). 16-bit types are
/// combined in float and rounded once.
template <floating_element T>
void combine(T* dst, const T* left, const T* right, std::size_t n, reduce_op op, int divisor = 1) noexcept {
    using A = accumulate_t<T>;
    if (n == 0) return;
#if HITCH_ALLREDUCE_F16C
    if constexpr (std::is_same_v<std::remove_cv_t<T>, half>) {
        if ((op == reduce_op::sum || op == reduce_op::average) && detail::cpu_has_f16c()) {
            static_assert(sizeof(half) == sizeof(std::uint16_t));
            auto* d = reinterpret_cast<std::uint16_t*>(dst);
            const auto* l = reinterpret_cast<const std::uint16_t*>(left);
            const auto* r = reinterpret_cast<const std::uint16_t*>(right);
            const bool divide = divisor != 1 && op == reduce_op::average;
            const std::size_t done = divide ? detail::sum_half_f16c<true>(d, l, r, n, static_cast<float>(divisor))
                                            : detail::sum_half_f16c<false>(d, l, r, n, 1.0f);
            dst += done;
            left += done;
            right += done;
            n -= done;
            if (n == 0) return;
        }
    }
#endif
    if (divisor != 1 && op == reduce_op::average)
        detail::combine_dispatch<true>(dst, left, right, n, op, static_cast<A>(divisor));
    else
        detail::combine_dispatch<false>(dst, left, right, n, op, A(1));
}

/// dst[i] = op(...op(op(src[0][i], src[1][i]), src[2][i])..., src[k-1][i]) accumulated in accumulate_t<T> and
/// rounded once; divided by `divisor` first when it is not 1 and op is average. dst may alias any source.
template <floating_element T>
void combine_many(T* dst, const T* const* sources, std::size_t k, std::size_t n, reduce_op op,
                  int divisor = 1) noexcept {
    using A = accumulate_t<T>;
    if (n == 0 || k == 0) return;
    const bool divide = divisor != 1 && op == reduce_op::average;
    if (k == 1) {
        if (divide) {
            for (std::size_t i = 0; i < n; ++i)
                dst[i] = detail::from_accumulator<T>(static_cast<A>(sources[0][i]) / static_cast<A>(divisor));
        } else if (dst != sources[0]) {
            std::copy(sources[0], sources[0] + n, dst);
        }
        return;
    }
    if (k == 2) return combine(dst, sources[0], sources[1], n, op, divisor);
    constexpr std::size_t block = 1024;  // accumulate a block in registers/L1, then round once
    A acc[block];
    for (std::size_t base = 0; base < n; base += block) {
        const std::size_t m = std::min(block, n - base);
        for (std::size_t i = 0; i < m; ++i) acc[i] = static_cast<A>(sources[0][base + i]);
        for (std::size_t s = 1; s < k; ++s) {
            const T* src = sources[s] + base;
            switch (op) {
                case reduce_op::sum:
                case reduce_op::average:
                    for (std::size_t i = 0; i < m; ++i) acc[i] = acc[i] + static_cast<A>(src[i]);
                    break;
                case reduce_op::min:
                    for (std::size_t i = 0; i < m; ++i)
                        acc[i] = detail::apply<A>(reduce_op::min, acc[i], static_cast<A>(src[i]));
                    break;
                case reduce_op::max:
                    for (std::size_t i = 0; i < m; ++i)
                        acc[i] = detail::apply<A>(reduce_op::max, acc[i], static_cast<A>(src[i]));
                    break;
            }
        }
        if (divide)
            for (std::size_t i = 0; i < m; ++i) acc[i] = acc[i] / static_cast<A>(divisor);
        for (std::size_t i = 0; i < m; ++i) dst[base + i] = detail::from_accumulator<T>(acc[i]);
    }
}

/// How a received segment is combined into the receiver's buffer (transport::exchange_reduce, receive_combine).
struct combine_spec {
    reduce_op op = reduce_op::sum;
    bool incoming_left = true;  ///< the received data is the left operand of op
    int divisor = 1;            ///< != 1: this is the average's last combination
};

/// Divides every element by `divisor` (rounding once): an average whose sum was completed elsewhere.
template <floating_element T>
void divide(T* data, std::size_t n, int divisor) noexcept {
    using A = accumulate_t<T>;
    if (divisor == 1) return;
    for (std::size_t i = 0; i < n; ++i)
        data[i] = detail::from_accumulator<T>(static_cast<A>(data[i]) / static_cast<A>(divisor));
}

}  // namespace hitch::allreduce
