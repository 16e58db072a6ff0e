// compress::none, fp16 and bf16: exact round trips, agreement with hitch::half / hitch::bfloat16 element by element
// (both the AVX2 and the baseline paths), Strom 2015's message sizes, and refused input.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "helpers.hpp"
#include "hitch/compress/bf16.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/compress/none.hpp"

namespace hc = hitch::compress;
using hitch::tensor_view;

namespace {

template <class T>
std::vector<T> as(const std::vector<float>& v) {
    std::vector<T> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = T(v[i]);
    return out;
}

// Values that exercise rounding: ties, subnormals of half, the edges of half's range.
std::vector<float> edge_values() {
    std::vector<float> v = {0.0f,           -0.0f,    1.0f,           -1.0f,          65504.0f,
                            -65504.0f,      65519.0f, 6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f,
                            2.9802326e-08f, 1e-10f,   3.14159265f,    1.0009765625f,  1.00048828125f,
                            1.00146484375f, -2.5e-6f, 1e30f,          -1e-30f};
    for (int e = -30; e < 16; ++e)
        for (int m = 0; m < 9; ++m) v.push_back(std::ldexp(1.0f + static_cast<float>(m) / 1024.0f + 1.0f / 4096.0f, e));
    return v;
}

}  // namespace

TEST_CASE("none round-trips every floating type exactly and converts between them", "[compress][none]") {
    const hc::none codec;
    const auto g = hitch_test::gradients(1003, 1);
    std::vector<std::byte> m;
    auto s = codec.make_state(g.size());

    std::vector<float> f_out(g.size());
    CHECK(codec.encode(tensor_view<const float>(g), s, m) == 32 + 4 * g.size());
    codec.decode(m, tensor_view<float>(f_out));
    CHECK(f_out == g);

    std::vector<double> d(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) d[i] = static_cast<double>(g[i]) + 1e-12 * static_cast<double>(i);
    std::vector<double> d_out(g.size());
    CHECK(codec.encode(tensor_view<const double>(d), s, m) == 32 + 8 * g.size());
    codec.decode(m, tensor_view<double>(d_out));
    CHECK(d_out == d);
    codec.decode(m, tensor_view<float>(f_out));  // double message into floats: rounded once
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(f_out[i] == static_cast<float>(d[i]));

    const auto h = as<hitch::half>(g);
    std::vector<hitch::half> h_out(g.size());
    CHECK(codec.encode(tensor_view<const hitch::half>(h), s, m) == 32 + 2 * g.size());
    codec.decode(m, tensor_view<hitch::half>(h_out));
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(h_out[i].bits() == h[i].bits());

    const auto b = as<hitch::bfloat16>(g);
    std::vector<hitch::bfloat16> b_out(g.size());
    codec.encode(tensor_view<const hitch::bfloat16>(b), s, m);
    codec.decode(m, tensor_view<hitch::bfloat16>(b_out));
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(b_out[i].bits() == b[i].bits());

    // decode_add adds.
    std::vector<float> acc(g.size(), 1.0f);
    codec.encode(tensor_view<const float>(g), s, m);
    codec.decode_add(m, tensor_view<float>(acc));
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(acc[i] == 1.0f + g[i]);
}

TEST_CASE("Strom 2015's table: 14.6 million parameters are 58.4 MB uncompressed and 29.2 MB as fp16",
          "[compress][bytes]") {
    const std::size_t n = 14'600'000;
    const std::vector<float> g(n, 0.25f);
    std::vector<std::byte> m;
    const hc::none none;
    auto s0 = none.make_state(n);
    const std::size_t none_bytes = none.encode(tensor_view<const float>(g), s0, m);
    CHECK(none_bytes == m.size());
    CHECK(none_bytes == 32 + 4 * n);
    CHECK(std::round(static_cast<double>(none_bytes) / 1e5) / 10 == Approx(58.4));
    const hc::fp16 fp16;
    auto s1 = fp16.make_state(n);
    const std::size_t fp16_bytes = fp16.encode(tensor_view<const float>(g), s1, m);
    CHECK(fp16_bytes == 32 + 2 * n);
    CHECK(std::round(static_cast<double>(fp16_bytes) / 1e5) / 10 == Approx(29.2));
    const hc::bf16 bf16;
    auto s2 = bf16.make_state(n);
    CHECK(bf16.encode(tensor_view<const float>(g), s2, m) == 32 + 2 * n);
}

TEST_CASE("fp16 equals hitch::half element by element, within 2^-11 relative, on both code paths", "[compress][fp16]") {
    const hc::fp16 codec;
    auto v = edge_values();
    const auto g = hitch_test::gradients(4099, 2);
    v.insert(v.end(), g.begin(), g.end());
    v.erase(std::remove_if(v.begin(), v.end(), [](float x) { return std::fabs(x) > 65504.0f; }), v.end());
    for (int wide : {2, 1, 0}) {
        hitch_test::set_isa(wide);
        auto s = codec.make_state(v.size());
        std::vector<std::byte> m;
        CHECK(codec.encode(tensor_view<const float>(v), s, m) == hc::fp16::message_bytes(v.size()));
        std::vector<float> out(v.size());
        codec.decode(m, tensor_view<float>(out));
        for (std::size_t i = 0; i < v.size(); ++i) {
            INFO("x = " << v[i] << " wide = " << wide);
            CHECK(std::bit_cast<std::uint32_t>(out[i]) ==
                  std::bit_cast<std::uint32_t>(static_cast<float>(hitch::half(v[i]))));
            const float bound = std::max(std::ldexp(std::fabs(v[i]), -11), std::ldexp(1.0f, -25));
            CHECK(std::fabs(out[i] - v[i]) <= bound);
        }
        // Into half, double and bfloat16 destinations.
        std::vector<hitch::half> h(v.size());
        codec.decode(m, tensor_view<hitch::half>(h));
        for (std::size_t i = 0; i < v.size(); ++i) CHECK(h[i].bits() == hitch::half(v[i]).bits());
        std::vector<double> d(v.size(), 0.5);
        codec.decode_add(m, tensor_view<double>(d));
        for (std::size_t i = 0; i < v.size(); ++i)
            CHECK(d[i] == 0.5 + static_cast<double>(static_cast<float>(hitch::half(v[i]))));
    }
    hitch_test::set_isa(2);
}

TEST_CASE("fp16 and bf16 kernels agree with the scalar conversions over a sweep of all float bit patterns",
          "[compress][fp16][bf16]") {
    // Every 61st bit pattern (70 million values), in blocks; NaNs and infinities included.
    std::vector<float> block(1 << 16);
    std::vector<std::byte> wide_out(2 * block.size()), base_out(2 * block.size());
    std::uint64_t pattern = 0;
    std::size_t mismatches = 0;
    bool finite_report_ok = true;
    while (pattern < (1ull << 32)) {
        std::size_t n = 0;
        for (; n < block.size() && pattern < (1ull << 32); ++n, pattern += 61)
            block[n] = std::bit_cast<float>(static_cast<std::uint32_t>(pattern));
        bool any_bad_half = false, any_bad_bf16 = false;
        for (std::size_t i = 0; i < n; ++i) {
            any_bad_half |= !hitch::is_finite(hitch::half(block[i]));
            any_bad_bf16 |= !hitch::is_finite(hitch::bfloat16(block[i]));
        }
        for (int which = 0; which < 2; ++which) {
            hitch_test::set_isa(2);
            const bool ok_wide = which == 0
                                     ? hc::detail::to_half<false>(block.data(), nullptr, nullptr, wide_out.data(), n)
                                     : hc::detail::to_bf16<false>(block.data(), nullptr, nullptr, wide_out.data(), n);
            hc::detail::wide_paths_enabled = false;
            const bool ok_base = which == 0
                                     ? hc::detail::to_half<false>(block.data(), nullptr, nullptr, base_out.data(), n)
                                     : hc::detail::to_bf16<false>(block.data(), nullptr, nullptr, base_out.data(), n);
            finite_report_ok =
                finite_report_ok && ok_wide == ok_base && ok_base == !(which == 0 ? any_bad_half : any_bad_bf16);
            for (std::size_t i = 0; i < n; ++i) {
                const auto want = which == 0 ? hitch::half(block[i]).bits() : hitch::bfloat16(block[i]).bits();
                const auto w = hc::wire::load_le<std::uint16_t>(wide_out.data() + 2 * i);
                const auto b = hc::wire::load_le<std::uint16_t>(base_out.data() + 2 * i);
                mismatches += (w != want) + (b != want);
            }
        }
    }
    hitch_test::set_isa(2);
    CHECK(mismatches == 0);
    CHECK(finite_report_ok);
}

TEST_CASE("bf16 equals hitch::bfloat16 element by element, within 2^-8 relative", "[compress][bf16]") {
    const hc::bf16 codec;
    auto v = edge_values();
    const auto g = hitch_test::gradients(5000, 3);
    v.insert(v.end(), g.begin(), g.end());
    for (int wide : {2, 1, 0}) {
        hitch_test::set_isa(wide);
        auto s = codec.make_state(v.size());
        std::vector<std::byte> m;
        CHECK(codec.encode(tensor_view<const float>(v), s, m) == hc::bf16::message_bytes(v.size()));
        std::vector<float> out(v.size());
        codec.decode(m, tensor_view<float>(out));
        for (std::size_t i = 0; i < v.size(); ++i) {
            CHECK(out[i] == static_cast<float>(hitch::bfloat16(v[i])));
            CHECK(std::fabs(out[i] - v[i]) <= std::ldexp(std::fabs(v[i]), -8));
        }
    }
    hitch_test::set_isa(2);
}

TEST_CASE("casts refuse NaN, infinities and overflow, and decoders refuse mismatched messages", "[compress][casts]") {
    const hc::fp16 fp16;
    const hc::bf16 bf16;
    const hc::none none;
    std::vector<std::byte> m;
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -65520.0f}) {
        std::vector<float> g(37, 1.0f);
        g[20] = bad;
        auto s = fp16.make_state(g.size());
        CHECK_THROWS_AS(fp16.encode(tensor_view<const float>(g), s, m), hc::non_finite_error);
        hc::detail::wide_paths_enabled = false;
        CHECK_THROWS_AS(fp16.encode(tensor_view<const float>(g), s, m), hc::non_finite_error);
        hitch_test::set_isa(2);
        if (std::fabs(bad) > 1e6f || std::isnan(bad)) {
            auto sb = bf16.make_state(g.size());
            CHECK_THROWS_AS(bf16.encode(tensor_view<const float>(g), sb, m), hc::non_finite_error);
        }
    }
    {  // 65519 rounds down to 65504: allowed.
        std::vector<float> g(9, 65519.0f);
        auto s = fp16.make_state(g.size());
        CHECK_NOTHROW(fp16.encode(tensor_view<const float>(g), s, m));
    }
    const std::vector<float> g = hitch_test::gradients(64, 4);
    auto s = fp16.make_state(g.size());
    fp16.encode(tensor_view<const float>(g), s, m);
    std::vector<float> out(63);
    CHECK(hitch_test::throws_corrupt([&] { fp16.decode(m, tensor_view<float>(out)); },
                                     "holds 64 elements but the destination has 63"));
    out.resize(64);
    CHECK(hitch_test::throws_corrupt([&] { bf16.decode(m, tensor_view<float>(out)); }, "codec id 2 is not 3"));
    CHECK(hitch_test::throws_corrupt([&] { none.decode(m, tensor_view<float>(out)); }, "codec id 2 is not 1"));
    auto shorter = m;
    shorter.resize(shorter.size() - 2);
    hc::wire::store_le<std::uint64_t>(shorter.data() + 16, shorter.size() - 32);
    hitch_test::reseal(shorter);
    CHECK(hitch_test::throws_corrupt([&] { fp16.decode(shorter, tensor_view<float>(out)); }, "payload of 126 bytes"));
    auto s_wrong = fp16.make_state(65);
    CHECK_THROWS_AS(fp16.encode(tensor_view<const float>(g), s_wrong, m), hitch::config_error);
}
