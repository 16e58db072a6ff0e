// compress::onebit against a reference written from Seide et al. 2014's definition: sign bits, per-group means of
// the non-negative and the negative elements, group sums preserved, the error bound, exact message sizes, both
// code paths, error feedback, and refused messages.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "helpers.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/onebit.hpp"

namespace hc = hitch::compress;
using hitch::tensor_view;

namespace {

struct reference {
    std::vector<float> decoded;
    std::vector<double> group_sums;
};

reference onebit_reference(const std::vector<float>& v, std::size_t group) {
    const std::size_t n = v.size(), size = group == 0 ? n : group;
    reference out{std::vector<float>(n), {}};
    for (std::size_t begin = 0; begin < n; begin += size) {
        const std::size_t end = std::min(n, begin + size);
        double pos = 0, neg = 0;
        std::size_t np = 0, nn = 0, total = 0;
        for (std::size_t i = begin; i < end; ++i) {
            if (std::signbit(v[i]))
                neg += v[i], ++nn;
            else
                pos += v[i], ++np;
        }
        (void)total;
        const float a = np ? static_cast<float>(pos / static_cast<double>(np)) : 0.0f;
        const float b = nn ? static_cast<float>(neg / static_cast<double>(nn)) : 0.0f;
        for (std::size_t i = begin; i < end; ++i) out.decoded[i] = std::signbit(v[i]) ? b : a;
        out.group_sums.push_back(pos + neg);
    }
    return out;
}

}  // namespace

TEST_CASE("onebit matches the paper's definition, preserves group sums, and stays within max |v|",
          "[compress][onebit]") {
    for (std::size_t group : {std::size_t{0}, std::size_t{8}, std::size_t{64}, std::size_t{1000}}) {
        for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{513}, std::size_t{10007}}) {
            const hc::onebit codec({.group_size = group});
            const auto v = hitch_test::gradients(n, n * 31 + group);
            const auto ref = onebit_reference(v, group);
            for (int wide : {2, 1, 0}) {
                hitch_test::set_isa(wide);
                auto s = codec.make_state(n);
                std::vector<std::byte> m;
                const std::size_t size = codec.encode(tensor_view<const float>(v), s, m);
                INFO("n = " << n << " group = " << group << " wide = " << wide);
                const std::size_t groups = group == 0 ? 1 : (n + group - 1) / group;
                CHECK(size == 32 + 8 + 8 * groups + (n + 7) / 8);
                CHECK(size == codec.message_bytes(n));
                std::vector<float> d(n);
                codec.decode(m, tensor_view<float>(d));
                const std::size_t gs = group == 0 ? n : group;
                for (std::size_t i = 0; i < n; ++i) {
                    CHECK(std::signbit(d[i]) == std::signbit(ref.decoded[i]));
                    CHECK(std::fabs(d[i] - ref.decoded[i]) <= std::fabs(ref.decoded[i]) * 1.2e-7f);
                }
                for (std::size_t k = 0; k * gs < n; ++k) {
                    double sum = 0, max_abs = 0;
                    const std::size_t end = std::min(n, (k + 1) * gs);
                    for (std::size_t i = k * gs; i < end; ++i) {
                        sum += d[i];
                        max_abs = std::max(max_abs, std::fabs(static_cast<double>(v[i])));
                    }
                    CHECK(std::fabs(sum - ref.group_sums[k]) <=
                          1e-6 * max_abs * static_cast<double>(end - k * gs) + 1e-30);
                    for (std::size_t i = k * gs; i < end; ++i) CHECK(std::fabs(d[i] - v[i]) <= max_abs);
                }
            }
        }
    }
    hitch_test::set_isa(2);
}

TEST_CASE("onebit: the AVX2 and baseline paths write identical messages and residuals", "[compress][onebit]") {
    const hc::onebit codec({.group_size = 4096});
    const auto g = hitch_test::gradients(100003, 5);
    const auto r_in = hitch_test::gradients(100003, 6);
    std::vector<float> r_wide(g.size()), r_avx2(g.size()), r_base(g.size());
    std::vector<std::byte> m_wide, m_avx2, m_base;
    auto s = codec.make_state(g.size());
    hitch_test::set_isa(2);
    codec.encode_ef(tensor_view<const float>(g), r_in, r_wide, s, m_wide);
    hitch_test::set_isa(1);
    codec.encode_ef(tensor_view<const float>(g), r_in, r_avx2, s, m_avx2);
    hitch_test::set_isa(0);
    codec.encode_ef(tensor_view<const float>(g), r_in, r_base, s, m_base);
    hitch_test::set_isa(2);
    CHECK(m_wide == m_base);
    CHECK(m_avx2 == m_base);
    CHECK(r_wide == r_base);
    CHECK(r_avx2 == r_base);
    std::vector<float> d1(g.size(), 1.0f), d2(g.size(), 1.0f);
    codec.decode_add(m_wide, tensor_view<float>(d1));
    hitch_test::set_isa(0);
    codec.decode_add(m_wide, tensor_view<float>(d2));
    hitch_test::set_isa(2);
    CHECK(d1 == d2);
    // The fused residual is v - D(m).
    codec.decode(m_wide, tensor_view<float>(d1));
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(r_wide[i] == (g[i] + r_in[i]) - d1[i]);
}

TEST_CASE("onebit with error feedback conserves everything over T steps", "[compress][onebit][error_feedback]") {
    hitch_test::check_conservation(hc::onebit{}, 2049, 30);
    hitch_test::check_conservation(hc::onebit({.group_size = 64}), 2049, 30);
}

TEST_CASE("onebit refuses bad options, non-finite buckets and corrupt messages", "[compress][onebit]") {
    CHECK_THROWS_WITH(hc::onebit({.group_size = 12}), Catch::Contains("group_size = 12"));
    const hc::onebit codec({.group_size = 16});
    auto g = hitch_test::gradients(50, 8);
    std::vector<std::byte> m;
    auto s = codec.make_state(50);
    g[10] = std::numeric_limits<float>::infinity();
    CHECK_THROWS_AS(codec.encode(tensor_view<const float>(g), s, m), hc::non_finite_error);
    g[10] = 0.5f;
    codec.encode(tensor_view<const float>(g), s, m);
    std::vector<float> out(50);
    auto modified = [&](auto&& change) {
        auto c = m;
        change(c);
        hitch_test::reseal(c);
        return c;
    };
    const std::size_t p = 32;
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(modified([&](auto& c) { hc::wire::store_le<std::uint64_t>(c.data() + p, 12); }),
                         tensor_view<float>(out));
        },
        "group size 12 is not a multiple of 8"));
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(modified([&](auto& c) { hc::wire::store_le(c.data() + p + 8, -1.0f); }),
                         tensor_view<float>(out));
        },
        "reconstruction values"));
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(modified([&](auto& c) { hc::wire::store_le(c.data() + p + 12, std::nanf("")); }),
                         tensor_view<float>(out));
        },
        "reconstruction values"));
    CHECK(hitch_test::throws_corrupt(
        [&] { codec.decode(modified([&](auto& c) { c.back() |= std::byte{0x80}; }), tensor_view<float>(out)); },
        "padding bits"));
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(modified([&](auto& c) {
                             c.pop_back();
                             hc::wire::store_le<std::uint64_t>(c.data() + 16, c.size() - 32);
                         }),
                         tensor_view<float>(out));
        },
        "truncated: sign bits"));
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(modified([&](auto& c) {
                             c.push_back(std::byte{0});
                             hc::wire::store_le<std::uint64_t>(c.data() + 16, c.size() - 32);
                         }),
                         tensor_view<float>(out));
        },
        "unexpected bytes"));
    // A different group size in the message than in the decoder's options is fine: the message says how it was made.
    std::vector<float> d1(50), d2(50);
    hc::onebit{}.decode(m, tensor_view<float>(d1));
    codec.decode(m, tensor_view<float>(d2));
    CHECK(d1 == d2);
}
