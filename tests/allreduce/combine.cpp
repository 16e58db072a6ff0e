// The element-wise combination of 16-bit buffers: whichever kernel runs (the F16C one on x86 CPUs that have it,
// the portable loop elsewhere and for the tail), a half sum or average has the bits of the IEEE formula computed
// one element at a time through hitch's own conversions.
#include <catch2/catch.hpp>

#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "hitch/allreduce/reduce_op.hpp"

namespace {

using hitch::half;
using hitch::allreduce::reduce_op;

std::vector<half> sample(std::size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> bits(0, 0xffff);
    std::vector<half> v(n);
    for (auto& x : v) x = std::bit_cast<half>(static_cast<std::uint16_t>(bits(rng)));  // every class of value
    const float special[] = {0.0f,
                             -0.0f,
                             65504.0f,
                             -65504.0f,
                             6.1e-5f,
                             5.96e-8f,
                             -5.96e-8f,
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN(),
                             32768.0f,
                             1.0f};
    for (std::size_t i = 0; i < std::size(special) && i < n; ++i) v[i * 7 % n] = half(special[i]);
    return v;
}

std::uint16_t expected(half a, half b, int divisor) {
    float v = static_cast<float>(a) + static_cast<float>(b);
    if (divisor != 1) v = v / static_cast<float>(divisor);
    return std::bit_cast<std::uint16_t>(half(v));
}

bool same(std::uint16_t got, std::uint16_t want) {
    const bool nan_got = (got & 0x7c00u) == 0x7c00u && (got & 0x3ffu) != 0;
    const bool nan_want = (want & 0x7c00u) == 0x7c00u && (want & 0x3ffu) != 0;
    return nan_got || nan_want ? nan_got == nan_want : got == want;  // NaN payloads may come from either side
}

}  // namespace

TEST_CASE("half sums and averages have the IEEE formula's bits on every kernel path", "[allreduce][combine]") {
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{1003}, std::size_t{65536}}) {
        for (int divisor : {1, 2, 3}) {
            for (int where = 0; where < 3; ++where) {  // dst apart, dst == left, dst == right
                CAPTURE(n, divisor, where);
                const auto left = sample(n, 1u + static_cast<unsigned>(n));
                const auto right = sample(n, 2u + static_cast<unsigned>(n));
                std::vector<half> l = left, r = right, apart(n);
                half* dst = where == 0 ? apart.data() : where == 1 ? l.data() : r.data();
                const reduce_op op = divisor == 1 ? reduce_op::sum : reduce_op::average;
                hitch::allreduce::combine(dst, l.data(), r.data(), n, op, divisor);
                std::size_t wrong = 0;
                for (std::size_t i = 0; i < n; ++i)
                    if (!same(std::bit_cast<std::uint16_t>(dst[i]), expected(left[i], right[i], divisor))) ++wrong;
                CHECK(wrong == 0);
            }
        }
    }
}
