// The sparse codecs against references written from their papers: threshold (Strom 2015), topk exact and sampled
// (Lin et al. 2018's sampled threshold), dgc (momentum correction, clipping, masking, warm-up), randomk (shared
// seed); exact message sizes; error feedback; refused messages.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "helpers.hpp"
#include "hitch/compress/dgc.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/randomk.hpp"
#include "hitch/compress/threshold.hpp"
#include "hitch/compress/topk.hpp"

namespace hc = hitch::compress;
using hitch::tensor_view;

namespace {

std::size_t varint_bytes(std::uint64_t v) {
    std::size_t b = 1;
    while (v >= 128) v >>= 7, ++b;
    return b;
}

// Top-k by sorting: magnitude descending, ties to the lower index. Returns ascending indices.
std::vector<std::size_t> topk_reference(const std::vector<float>& v, std::size_t k) {
    std::vector<std::size_t> order(v.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return std::fabs(v[a]) > std::fabs(v[b]); });
    order.resize(std::min(k, v.size()));
    std::sort(order.begin(), order.end());
    return order;
}

std::vector<float> decode(const auto& codec, const std::vector<std::byte>& m, std::size_t n) {
    std::vector<float> out(n, 123.0f);
    codec.decode(m, tensor_view<float>(out));
    return out;
}

}  // namespace

TEST_CASE("threshold sends +-tau where |v| >= tau, with delta-varint indices of the stated size",
          "[compress][threshold]") {
    for (float tau : {1e-3f, 2.5e-3f, 1e-2f}) {
        const hc::threshold codec({.tau = tau});
        const auto v = hitch_test::gradients(20011, 11);
        for (int wide : {2, 1, 0}) {
            hitch_test::set_isa(wide);
            auto s = codec.make_state(v.size());
            std::vector<std::byte> m;
            const std::size_t size = codec.encode(tensor_view<const float>(v), s, m);
            const auto d = decode(codec, m, v.size());
            std::size_t expected = 32 + 8 + 4, prev = 0, sent = 0;
            bool first = true;
            for (std::size_t i = 0; i < v.size(); ++i) {
                if (std::fabs(v[i]) >= tau) {
                    CHECK(d[i] == (v[i] < 0 ? -tau : tau));
                    const std::size_t gap = first ? i : i - prev - 1;
                    expected += varint_bytes(gap << 1 | (v[i] < 0 ? 1u : 0u));
                    prev = i;
                    first = false;
                    ++sent;
                } else {
                    CHECK(d[i] == 0.0f);
                }
            }
            INFO("tau " << tau << " sent " << sent);
            CHECK(sent > 0);
            CHECK(size == expected);
            CHECK(size == m.size());
        }
    }
    hitch_test::set_isa(2);
}

TEST_CASE("threshold with error feedback is Strom's algorithm: residual carries the rest, nothing is lost",
          "[compress][threshold][error_feedback]") {
    hitch_test::check_conservation(hc::threshold({.tau = 2e-3f}), 5003, 40);
    // A large value leaves over several steps in tau-sized pieces.
    const hc::error_feedback<hc::threshold> ef(hc::threshold({.tau = 1.0f}));
    auto s = ef.make_state(4);
    std::vector<std::byte> m;
    std::vector<float> g = {3.5f, 0.0f, -0.25f, 0.0f}, zero(4, 0.0f), d(4);
    ef.encode(tensor_view<const float>(g), s, m);
    ef.decode(m, tensor_view<float>(d));
    CHECK(d == std::vector<float>{1.0f, 0.0f, 0.0f, 0.0f});
    CHECK(s.residual == std::vector<float>{2.5f, 0.0f, -0.25f, 0.0f});
    for (int t = 0; t < 2; ++t) ef.encode(tensor_view<const float>(zero), s, m);
    CHECK(s.residual == std::vector<float>{0.5f, 0.0f, -0.25f, 0.0f});
}

TEST_CASE("threshold refuses corrupt messages", "[compress][threshold]") {
    const hc::threshold codec({.tau = 0.5f});
    std::vector<float> v = {0, 1, 0, -1, 0, 0, 2, 0};
    auto s = codec.make_state(v.size());
    std::vector<std::byte> m;
    codec.encode(tensor_view<const float>(v), s, m);
    REQUIRE(m.size() == 32 + 12 + 3);
    std::vector<float> out(8);
    auto tweak = [&](auto&& f) {
        auto c = m;
        f(c);
        hc::wire::store_le<std::uint64_t>(c.data() + 16, c.size() - 32);
        hitch_test::reseal(c);
        return c;
    };
    CHECK(hitch_test::throws_corrupt(
        [&] { codec.decode(tweak([](auto& c) { c[44] = std::byte{16}; }), tensor_view<float>(out)); },
        "index of entry 0 is outside the bucket of 8"));
    CHECK(hitch_test::throws_corrupt(
        [&] { codec.decode(tweak([](auto& c) { c[46] = std::byte{2 * 4}; }), tensor_view<float>(out)); },
        "index of entry 2 is outside"));
    CHECK(hitch_test::throws_corrupt(
        [&] { codec.decode(tweak([](auto& c) { c.push_back(std::byte{0}); }), tensor_view<float>(out)); },
        "unexpected bytes after the indices"));
    CHECK(hitch_test::throws_corrupt(
        [&] { codec.decode(tweak([](auto& c) { c.pop_back(); }), tensor_view<float>(out)); }, "truncated"));
    CHECK(hitch_test::throws_corrupt(
        [&] { codec.decode(tweak([](auto& c) { c[46] = std::byte{0x80}; }), tensor_view<float>(out)); },
        "truncated varint"));
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(tweak([](auto& c) { hc::wire::store_le(c.data() + 40, -0.5f); }), tensor_view<float>(out));
        },
        "tau -0.5"));
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(tweak([](auto& c) { hc::wire::store_le<std::uint64_t>(c.data() + 32, 9); }),
                         tensor_view<float>(out));
        },
        "sent count 9 exceeds 8"));
    CHECK_THROWS_WITH(hc::threshold({.tau = 0.0f}), Catch::Contains("tau = 0"));
}

TEST_CASE("topk: exact and sampled selection both equal a sorting reference, with the stated sizes",
          "[compress][topk]") {
    for (std::size_t n : {std::size_t{1}, std::size_t{100}, std::size_t{65536}, std::size_t{300007}}) {
        for (double density : {0.001, 0.01, 0.1}) {
            const auto v = hitch_test::gradients(n, n + static_cast<std::uint64_t>(density * 1e4));
            const hc::topk exact({.density = density, .method = hc::topk_method::exact});
            const hc::topk sampled({.density = density, .method = hc::topk_method::sampled});
            const std::size_t k = exact.k(n);
            CHECK(k == std::clamp<std::size_t>(static_cast<std::size_t>(std::llround(density * static_cast<double>(n))),
                                               1, n));
            const auto ref = topk_reference(v, k);
            for (const hc::topk* codec : {&exact, &sampled}) {
                for (int wide : {2, 1, 0}) {
                    hitch_test::set_isa(wide);
                    auto s = codec->make_state(n);
                    std::vector<std::byte> m;
                    const std::size_t size = codec->encode(tensor_view<const float>(v), s, m);
                    INFO("n " << n << " density " << density << " method " << int(codec->options().method));
                    REQUIRE(s.selection.size() == k);
                    CHECK(std::equal(ref.begin(), ref.end(), s.selection.index.begin()));
                    std::size_t expected = 32 + 8 + 4 * k;
                    for (std::size_t j = 0; j < k; ++j)
                        expected += varint_bytes(j == 0 ? ref[0] : ref[j] - ref[j - 1] - 1);
                    CHECK(size == expected);
                    const auto d = decode(*codec, m, n);
                    std::size_t j = 0;
                    for (std::size_t i = 0; i < n; ++i) {
                        if (j < k && ref[j] == i) {
                            CHECK(d[i] == v[i]);
                            ++j;
                        } else {
                            CHECK(d[i] == 0.0f);
                        }
                    }
                }
            }
        }
    }
    hitch_test::set_isa(2);
}

TEST_CASE("topk: sampling takes one pass on gradient-like data and survives ties and sparse buckets",
          "[compress][topk]") {
    const std::size_t n = 1 << 20;
    const hc::topk sampled({.density = 0.001});
    auto v = hitch_test::gradients(n, 77);
    auto s = sampled.make_state(n);
    std::vector<std::byte> m;
    int one_pass = 0;
    for (int t = 0; t < 10; ++t) {
        sampled.encode(tensor_view<const float>(v), s, m);
        one_pass += s.passes == 1;
    }
    CHECK(one_pass >= 9);
    // 99.9% zeros and many ties: still exactly the reference selection.
    std::vector<float> sparse(n, 0.0f);
    for (std::size_t i = 0; i < n; i += 997) sparse[i] = (i % 3 == 0) ? 0.5f : -0.5f;
    for (double density : {0.0005, 0.001, 0.002}) {
        const hc::topk codec({.density = density});
        auto st = codec.make_state(n);
        codec.encode(tensor_view<const float>(sparse), st, m);
        const auto ref = topk_reference(sparse, codec.k(n));
        REQUIRE(st.selection.size() == ref.size());
        CHECK(std::equal(ref.begin(), ref.end(), st.selection.index.begin()));
    }
}

TEST_CASE("topk with error feedback conserves everything; bad input and messages are refused", "[compress][topk]") {
    hitch_test::check_conservation(hc::topk({.density = 0.05}), 4001, 30);
    hitch_test::check_conservation(hc::topk({.density = 0.01, .method = hc::topk_method::exact}), 4001, 30);
    const hc::topk codec({.density = 0.1});
    auto v = hitch_test::gradients(100, 3);
    auto s = codec.make_state(100);
    std::vector<std::byte> m;
    v[7] = std::nanf("");
    CHECK_THROWS_AS(codec.encode(tensor_view<const float>(v), s, m), hc::non_finite_error);
    v[7] = 0.0f;
    codec.encode(tensor_view<const float>(v), s, m);
    std::vector<float> out(100);
    auto tweak = [&](auto&& f) {
        auto c = m;
        f(c);
        hc::wire::store_le<std::uint64_t>(c.data() + 16, c.size() - 32);
        hitch_test::reseal(c);
        return c;
    };
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(tweak([](auto& c) { hc::wire::store_le(c.data() + 40, std::nanf("")); }),
                         tensor_view<float>(out));
        },
        "value 0 is not finite"));
    CHECK(hitch_test::throws_corrupt(
        [&] { codec.decode(tweak([](auto& c) { c.back() = std::byte{120}; }), tensor_view<float>(out)); },
        "outside the bucket of 100"));
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(tweak([](auto& c) { hc::wire::store_le<std::uint64_t>(c.data() + 32, 11); }),
                         tensor_view<float>(out));
        },
        "truncated"));
    CHECK_THROWS_WITH(hc::topk({.density = 0.0}), Catch::Contains("density = 0"));
    CHECK_THROWS_WITH(hc::topk({.density = 1.5}), Catch::Contains("density = 1.5"));
}

TEST_CASE("dgc equals a step-by-step reference of Lin et al. 2018: clipping, momentum correction, masking, warm-up",
          "[compress][dgc]") {
    for (bool nesterov : {false, true}) {
        const std::size_t n = 20000;
        const hc::dgc codec({.momentum = 0.9,
                             .nesterov = nesterov,
                             .final_density = 0.001,
                             .warmup_steps = 3,
                             .clip_norm = 0.05,
                             .ranks = 4});
        CHECK(codec.density(0) == 0.25);
        CHECK(codec.density(3) == 0.0625);
        CHECK(codec.density(6) == 0.015625);
        CHECK(codec.density(9) == 0.004);
        CHECK(codec.density(12) == 0.001);
        CHECK(codec.density(1000) == 0.001);
        auto s = codec.make_state(n);
        std::vector<float> u(n, 0.0f), v(n, 0.0f);
        std::vector<std::byte> m;
        for (std::uint64_t t = 0; t < 16; ++t) {
            const auto g = hitch_test::gradients(n, 500 + t, 2e-3f);
            // Reference, in the paper's order.
            double norm2 = 0;
            for (float x : g) norm2 += static_cast<double>(x) * x;
            const double limit = 0.05 / std::sqrt(4.0), norm = std::sqrt(norm2);
            const float scale = norm > limit ? static_cast<float>(limit / norm) : 1.0f;
            for (std::size_t i = 0; i < n; ++i) {
                const float gi = scale * g[i];
                if (nesterov) {
                    u[i] = 0.9f * (u[i] + gi);
                    v[i] += u[i] + gi;
                } else {
                    u[i] = 0.9f * u[i] + gi;
                    v[i] += u[i];
                }
            }
            const auto sel = topk_reference(
                v, std::max<std::size_t>(1, static_cast<std::size_t>(std::llround(codec.density(t) * n))));
            codec.encode(tensor_view<const float>(g), s, m);
            const auto d = decode(codec, m, n);
            std::vector<float> want(n, 0.0f);
            for (std::size_t i : sel) {
                want[i] = v[i];
                v[i] = 0.0f;
                u[i] = 0.0f;
            }
            INFO("step " << t << " nesterov " << nesterov);
            CHECK(d == want);
            CHECK(s.u == u);
            CHECK(s.v == v);
        }
        // State round trip.
        std::vector<std::byte> blob;
        codec.save_state(s, blob);
        auto restored = codec.make_state(n);
        codec.load_state(blob, restored);
        CHECK(restored.step == s.step);
        CHECK(restored.u == s.u);
        CHECK(restored.v == s.v);
        blob[50] ^= std::byte{1};
        CHECK_THROWS_AS(codec.load_state(blob, restored), hitch::corrupt_message_error);
    }
}

TEST_CASE("dgc: accumulated velocity conserves the (clipped, momentum-corrected) gradient; refusals",
          "[compress][dgc]") {
    // Without momentum and clipping, everything sent plus v equals the sum of the gradients.
    const hc::dgc codec({.momentum = 0.0, .final_density = 0.01});
    const std::size_t n = 3000;
    auto s = codec.make_state(n);
    std::vector<double> in(n, 0.0), sent(n, 0.0), bound(n, 0.0);
    std::vector<std::byte> m;
    for (int t = 0; t < 25; ++t) {
        const auto g = hitch_test::gradients(n, 900 + static_cast<std::uint64_t>(t));
        codec.encode(tensor_view<const float>(g), s, m);
        const auto d = decode(codec, m, n);
        for (std::size_t i = 0; i < n; ++i) {
            in[i] += g[i], sent[i] += d[i];
            bound[i] += std::ldexp(
                std::fabs(static_cast<double>(g[i])) + std::fabs(static_cast<double>(d[i])) + std::fabs(s.v[i]), -23);
        }
    }
    for (std::size_t i = 0; i < n; ++i) CHECK(std::fabs(sent[i] + s.v[i] - in[i]) <= bound[i] + 1e-30);
    auto g = hitch_test::gradients(n, 1);
    g[5] = std::numeric_limits<float>::infinity();
    const auto v_before = s.v;
    CHECK_THROWS_AS(codec.encode(tensor_view<const float>(g), s, m), hc::non_finite_error);
    CHECK(s.v == v_before);
    CHECK_THROWS_WITH(hc::dgc({.momentum = 1.0}), Catch::Contains("momentum = 1"));
    CHECK_THROWS_WITH(hc::dgc({.ranks = 0}), Catch::Contains("ranks = 0"));
}

TEST_CASE("randomk draws k distinct coordinates from the shared key, uniformly", "[compress][randomk]") {
    std::vector<std::uint64_t> idx, bitmap;
    for (std::size_t n : {std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{1000}}) {
        for (std::size_t k : {std::size_t{0}, std::size_t{1}, n / 3, n / 2 + 1, n - 1, n}) {
            hc::detail::random_indices(42 + k, n, k, idx, bitmap);
            REQUIRE(idx.size() == std::min(k, n));
            CHECK(std::is_sorted(idx.begin(), idx.end()));
            CHECK(std::adjacent_find(idx.begin(), idx.end()) == idx.end());
            if (!idx.empty()) CHECK(idx.back() < n);
            std::vector<std::uint64_t> again;
            hc::detail::random_indices(42 + k, n, k, again, bitmap);
            CHECK(again == idx);
        }
    }
    // Uniformity: over many keys each coordinate is drawn with frequency k / n (binomial, 6 sigma).
    const std::size_t n = 200, k = 30, draws = 20000;
    std::vector<std::size_t> hits(n, 0);
    for (std::size_t key = 0; key < draws; ++key) {
        hc::detail::random_indices(key * 7919, n, k, idx, bitmap);
        for (auto i : idx) ++hits[i];
    }
    const double p = static_cast<double>(k) / n, mean = p * draws, sd = std::sqrt(draws * p * (1 - p));
    for (std::size_t i = 0; i < n; ++i) CHECK(std::fabs(static_cast<double>(hits[i]) - mean) <= 6 * sd);
}

TEST_CASE("randomk: no indices on the wire, the stated size, additive form and error feedback", "[compress][randomk]") {
    const std::size_t n = 5000;
    const hc::randomk codec({.density = 0.02});
    const auto v = hitch_test::gradients(n, 21);
    auto s = codec.make_state(n);
    std::vector<std::byte> m;
    CHECK(codec.encode(tensor_view<const float>(v), s, m) == 32 + 16 + 4 * 100);
    const auto d = decode(codec, m, n);
    std::set<std::uint64_t> chosen(s.indices.begin(), s.indices.end());
    for (std::size_t i = 0; i < n; ++i) CHECK(d[i] == (chosen.count(i) ? 50.0f * v[i] : 0.0f));
    // Another rank with the same seed and step draws the same coordinates and its message decodes alike.
    auto other = codec.make_state(n);
    std::vector<std::byte> m2;
    codec.encode(tensor_view<const float>(v), other, m2);
    CHECK(m2 == m);
    // Additive form: values summed in transit decode to the sum.
    auto a = codec.make_state(n), b = codec.make_state(n);
    const auto w = hitch_test::gradients(n, 22);
    std::vector<float> va(codec.summable_count(a, n)), vb(va.size()), out(n);
    codec.encode_summable(tensor_view<const float>(v), a, std::span<float>(va));
    codec.encode_summable(tensor_view<const float>(w), b, std::span<float>(vb));
    CHECK(codec.agreement_value(a) == codec.agreement_value(b));
    for (std::size_t j = 0; j < va.size(); ++j) va[j] += vb[j];
    codec.decode_summed(std::span<const float>(va), a, tensor_view<float>(out));
    for (std::size_t j = 0; j < a.indices.size(); ++j) {
        const auto i = a.indices[j];
        CHECK(out[i] == 50.0f * v[i] + 50.0f * w[i]);
    }
    CHECK(std::count(out.begin(), out.end(), 0.0f) >= static_cast<std::ptrdiff_t>(n - a.indices.size()));
    hitch_test::check_conservation(hc::randomk({.density = 0.1, .scale = false}), 3001, 30);
    // Corrupt: k beyond the bucket, truncated values, NaN value.
    std::vector<float> o(n);
    auto tweak = [&](auto&& f) {
        auto c = m;
        f(c);
        hc::wire::store_le<std::uint64_t>(c.data() + 16, c.size() - 32);
        hitch_test::reseal(c);
        return c;
    };
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(tweak([&](auto& c) { hc::wire::store_le<std::uint64_t>(c.data() + 40, n + 1); }),
                         tensor_view<float>(o));
        },
        "exceeds"));
    CHECK(hitch_test::throws_corrupt([&] { codec.decode(tweak([](auto& c) { c.pop_back(); }), tensor_view<float>(o)); },
                                     "truncated"));
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(tweak([](auto& c) { hc::wire::store_le(c.data() + 52, std::nanf("")); }),
                         tensor_view<float>(o));
        },
        "not finite"));
}
