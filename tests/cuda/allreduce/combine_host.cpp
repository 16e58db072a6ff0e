// The reduce kernels' per-element math (hitch/cuda/allreduce/combine.hpp), run on the host, against the host's
// combine, combine_many and divide (hitch/allreduce/reduce_op.hpp), bit for bit: every op and element type, edge
// values (signed zeros, denormals, the extremes, infinities, quiet and signalling NaNs with payloads, the 16-bit
// types' rounding boundaries and ties) paired with each other, and random values at sizes 0, 1, 31, 32, 33 and
// 1<<20 + 3, with the destination apart from, or the same as, either operand.
//
// One case is compared by NaN-ness only: a sum of two NaNs. IEEE 754 leaves open which payload comes out, and the
// host's compiler commutes the addition (the host combine returns the right operand's payload when writing apart,
// the destination's in place); the shared math returns the left one.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "combine_cases.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/cuda/allreduce/combine.hpp"

namespace {

namespace ca = hitch::cuda::allreduce;
using hitch::bfloat16;
using hitch::half;
using hitch::reduce_op;
using hitch_test::bits_of;
using hitch_test::edges;
using hitch_test::f32;
using hitch_test::nan;
using hitch_test::random_values;

constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::average, reduce_op::min, reduce_op::max};
constexpr std::size_t sizes[] = {0, 1, 31, 32, 33, (std::size_t{1} << 20) + 3};

template <class T>
using storage = ca::storage_t<T>;

template <class T>
storage<T> to_storage(T x) {
    storage<T> s;
    static_assert(sizeof(s) == sizeof(x));
    std::memcpy(&s, &x, sizeof(x));
    return s;
}

template <class T>
T from_storage(storage<T> s) {
    if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>)
        return T::from_bits(s);
    else
        return s;
}

/// Compares host results with the shared math for element i; `both_nan_sum` relaxes to NaN-ness.
template <class T>
void expect_same(const std::vector<T>& host, const std::vector<storage<T>>& shared, const std::vector<T>& left,
                 const std::vector<T>& right, reduce_op op, const std::string& what) {
    std::size_t mismatches = 0;
    std::string first;
    for (std::size_t i = 0; i < host.size(); ++i) {
        const T mine = from_storage<T>(shared[i]);
        const bool relaxed = hitch_test::payload_open(op, left[i], right[i]);
        const bool same = relaxed ? nan(host[i]) && nan(mine) : bits_of(host[i]) == bits_of(mine);
        if (!same && mismatches++ == 0)
            first = what + ": element " + std::to_string(i) + ": host bits " + std::to_string(bits_of(host[i])) +
                    ", shared bits " + std::to_string(bits_of(mine)) + " (left " + std::to_string(bits_of(left[i])) +
                    ", right " + std::to_string(bits_of(right[i])) + ")";
    }
    INFO(first);
    CHECK(mismatches == 0);
}

/// combine() in its three aliasings against combine_element.
template <class T>
void check_combine(const std::vector<T>& left, const std::vector<T>& right, const std::string& label) {
    const std::size_t n = left.size();
    for (reduce_op op : all_ops)
        for (int divisor : {1, 3, 4, 7}) {
            const bool divide = ca::divides(op, divisor);
            std::vector<storage<T>> shared(n);
            for (std::size_t i = 0; i < n; ++i)
                shared[i] = ca::combine_element<T>(op, to_storage(left[i]), to_storage(right[i]), divide,
                                                   static_cast<ca::accumulator_t<T>>(divisor));
            const std::string what = label + " " + std::string(hitch::name(op)) + " / " + std::to_string(divisor);
            std::vector<T> apart(n);
            hitch::allreduce::combine(apart.data(), left.data(), right.data(), n, op, divisor);
            expect_same(apart, shared, left, right, op, what + " (apart)");
            std::vector<T> in_left = left;
            hitch::allreduce::combine(in_left.data(), in_left.data(), right.data(), n, op, divisor);
            expect_same(in_left, shared, left, right, op, what + " (dst = left)");
            std::vector<T> in_right = right;
            hitch::allreduce::combine(in_right.data(), left.data(), in_right.data(), n, op, divisor);
            expect_same(in_right, shared, left, right, op, what + " (dst = right)");
        }
}

template <class T>
void check_edges(const char* type) {
    const std::vector<T> e = edges<T>();
    std::vector<T> left, right;
    for (T a : e)
        for (T b : e) {
            left.push_back(a);
            right.push_back(b);
        }
    check_combine(left, right, std::string(type) + " edges");
}

template <class T>
void check_random(const char* type) {
    for (std::size_t n : sizes) {
        const auto left = random_values<T>(n, 17 + n);
        const auto right = random_values<T>(n, 91 + 3 * n);
        check_combine(left, right, std::string(type) + " random n=" + std::to_string(n));
    }
}

template <class T>
void check_many(const char* type) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{33}, std::size_t{2051}})
        for (std::size_t k : {1u, 2u, 3u, 5u}) {
            std::vector<std::vector<T>> sources;
            const std::vector<T> e = edges<T>();
            for (std::size_t s = 0; s < k; ++s) {
                auto v = random_values<T>(n, 1000 + 31 * s + n);
                for (std::size_t i = 0; i < n && i < 64; ++i) v[i] = e[(i + 7 * s) % e.size()];
                sources.push_back(std::move(v));
            }
            std::vector<const T*> pointers;
            for (const auto& s : sources) pointers.push_back(s.data());
            for (reduce_op op : all_ops)
                for (int divisor : {1, static_cast<int>(k) + 1}) {
                    std::vector<T> host(n);
                    hitch::allreduce::combine_many(host.data(), pointers.data(), k, n, op, divisor);
                    std::vector<storage<T>> shared(n);
                    const bool divide = ca::divides(op, divisor);
                    for (std::size_t i = 0; i < n; ++i)
                        shared[i] = ca::combine_many_element<T>(
                            op, k, [&](std::size_t s) { return to_storage(sources[s][i]); }, divide,
                            static_cast<ca::accumulator_t<T>>(divisor));
                    // A sum of two NaNs anywhere in the chain (a source's, or inf + -inf's) leaves the payload
                    // open, as for two operands.
                    std::vector<T> l(n), r(n);
                    for (std::size_t i = 0; i < n; ++i) {
                        int nans = 0;
                        bool plus_inf = false, minus_inf = false;
                        for (std::size_t s = 0; s < k; ++s) {
                            const T x = sources[s][i];
                            nans += nan(x) ? 1 : 0;
                            plus_inf = plus_inf || (!nan(x) && static_cast<double>(x) == HUGE_VAL);
                            minus_inf = minus_inf || (!nan(x) && static_cast<double>(x) == -HUGE_VAL);
                        }
                        nans += plus_inf && minus_inf ? 1 : 0;
                        l[i] = r[i] = nans >= 2 ? std::numeric_limits<T>::quiet_NaN() : T(1.0f);
                    }
                    expect_same(host, shared, l, r, op,
                                std::string(type) + " combine_many k=" + std::to_string(k) + " n=" + std::to_string(n) +
                                    " " + std::string(hitch::name(op)) + " / " + std::to_string(divisor));
                }
        }
}

template <class T>
void check_divide(const char* type) {
    std::vector<T> values = random_values<T>(4099, 5);
    const std::vector<T> e = edges<T>();
    std::copy(e.begin(), e.end(), values.begin());
    for (int divisor : {1, 2, 3, 6, 1000}) {
        std::vector<T> host = values;
        hitch::allreduce::divide(host.data(), host.size(), divisor);
        std::vector<storage<T>> shared(values.size());
        for (std::size_t i = 0; i < values.size(); ++i)
            shared[i] = divisor == 1
                            ? to_storage(values[i])
                            : ca::divide_element<T>(to_storage(values[i]), static_cast<ca::accumulator_t<T>>(divisor));
        expect_same(host, shared, values, values, reduce_op::min,
                    std::string(type) + " divide / " + std::to_string(divisor));
    }
}

}  // namespace

TEST_CASE("the shared 16-bit conversions are core/dtype.hpp's, bit for bit", "[cuda][allreduce][host]") {
    std::size_t wrong = 0;
    for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
        const auto b = static_cast<std::uint16_t>(h);
        wrong += std::bit_cast<std::uint32_t>(ca::half_bits_to_float(b)) !=
                 std::bit_cast<std::uint32_t>(hitch::detail::half_bits_to_float(b));
        wrong += std::bit_cast<std::uint32_t>(ca::bfloat16_bits_to_float(b)) !=
                 std::bit_cast<std::uint32_t>(hitch::detail::bfloat16_bits_to_float(b));
        // Every half and bfloat16 value, widened, narrows back to itself (NaNs come back quiet).
        wrong += ca::float_to_half_bits(ca::half_bits_to_float(b)) !=
                 hitch::detail::float_to_half_bits(hitch::detail::half_bits_to_float(b));
    }
    // Floats: a sweep over the bit patterns with a stride prime to every field, and every pattern near the half and
    // bfloat16 rounding boundaries (the low 16 bits of a few hundred exponents and mantissas).
    for (std::uint64_t x = 0; x <= 0xffffffffull; x += 65521) {
        const float f = std::bit_cast<float>(static_cast<std::uint32_t>(x));
        wrong += ca::float_to_half_bits(f) != hitch::detail::float_to_half_bits(f);
        wrong += ca::float_to_bfloat16_bits(f) != hitch::detail::float_to_bfloat16_bits(f);
    }
    for (std::uint32_t high : {0x3300u, 0x3340u, 0x3380u, 0x3880u, 0x387fu, 0x477fu, 0x3f80u, 0x7f80u, 0x7fc0u, 0x7f7fu,
                               0x0000u, 0x8000u, 0xb380u, 0xc77fu})
        for (std::uint32_t low = 0; low <= 0xffffu; ++low) {
            const float f = std::bit_cast<float>((high << 16) | low);
            wrong += ca::float_to_half_bits(f) != hitch::detail::float_to_half_bits(f);
            wrong += ca::float_to_bfloat16_bits(f) != hitch::detail::float_to_bfloat16_bits(f);
        }
    CHECK(wrong == 0);
}

TEST_CASE("combine_element is allreduce::combine on edge values", "[cuda][allreduce][host]") {
    check_edges<float>("float");
    check_edges<double>("double");
    check_edges<half>("half");
    check_edges<bfloat16>("bfloat16");
}

TEST_CASE("combine_element is allreduce::combine on random values of every size", "[cuda][allreduce][host]") {
    check_random<float>("float");
    check_random<double>("double");
    check_random<half>("half");
    check_random<bfloat16>("bfloat16");
}

TEST_CASE("combine_many_element is allreduce::combine_many", "[cuda][allreduce][host]") {
    check_many<float>("float");
    check_many<double>("double");
    check_many<half>("half");
    check_many<bfloat16>("bfloat16");
}

TEST_CASE("divide_element is allreduce::divide", "[cuda][allreduce][host]") {
    check_divide<float>("float");
    check_divide<double>("double");
    check_divide<half>("half");
    check_divide<bfloat16>("bfloat16");
}

TEST_CASE("the shared math's NaN results are the host CPU's", "[cuda][allreduce][host]") {
    // A GPU's own addition returns one canonical NaN; the shared math returns what the host does.
    const float inf = std::numeric_limits<float>::infinity();
    const auto sum = [](float a, float b) {
        return std::bit_cast<std::uint32_t>(ca::combine_element<float>(reduce_op::sum, a, b, false, 1.0f));
    };
    float host = 0;
    const float a = inf, b = -inf;
    hitch::allreduce::combine(&host, &a, &b, 1, reduce_op::sum);
    CHECK(sum(inf, -inf) == std::bit_cast<std::uint32_t>(host));
    CHECK(sum(f32(0x7f812345u), 1.0f) == 0x7fc12345u);  // quieted, payload kept
    CHECK(sum(1.0f, f32(0xff812345u)) == 0xffc12345u);
    // min and max pick an operand untouched, so a signalling NaN stays signalling.
    CHECK(std::bit_cast<std::uint32_t>(
              ca::combine_element<float>(reduce_op::min, f32(0x7f812345u), 1.0f, false, 1.0f)) == 0x7f812345u);
    CHECK(std::bit_cast<std::uint32_t>(
              ca::combine_element<float>(reduce_op::max, 1.0f, f32(0x7f812345u), false, 1.0f)) == 0x7f812345u);
    // min(-0, +0) is the right operand, as on the host.
    CHECK(std::bit_cast<std::uint32_t>(ca::combine_element<float>(reduce_op::min, -0.0f, 0.0f, false, 1.0f)) == 0u);
}
