// powersgd against a double-precision reference of one power-iteration step (Vogels et al. 2019): exact recovery
// of low-rank layers, the projection P P^T M otherwise, uncompressed small layers, error feedback, warm start,
// message sizes, state blobs, refused messages.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "helpers.hpp"
#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/powersgd.hpp"

namespace hc = hitch::compress;
using hitch::tensor_view;

namespace {

// One step of the algorithm in double: P = M Q, Gram-Schmidt, result P P^T M (for one rank, Q' = M^T P).
std::vector<double> projection_reference(const std::vector<double>& m, std::size_t rows, std::size_t cols,
                                         const float* qt, std::size_t r) {
    std::vector<double> p(r * rows, 0.0);
    for (std::size_t c = 0; c < r; ++c)
        for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < cols; ++j) p[c * rows + i] += m[i * cols + j] * qt[c * cols + j];
    for (std::size_t c = 0; c < r; ++c) {
        for (std::size_t d = 0; d < c; ++d) {
            double dot = 0;
            for (std::size_t i = 0; i < rows; ++i) dot += p[d * rows + i] * p[c * rows + i];
            for (std::size_t i = 0; i < rows; ++i) p[c * rows + i] -= dot * p[d * rows + i];
        }
        double norm = 0;
        for (std::size_t i = 0; i < rows; ++i) norm += p[c * rows + i] * p[c * rows + i];
        norm = std::sqrt(norm);
        for (std::size_t i = 0; i < rows; ++i) p[c * rows + i] = norm > 1e-30 ? p[c * rows + i] / norm : 0.0;
    }
    std::vector<double> out(rows * cols, 0.0);
    for (std::size_t c = 0; c < r; ++c) {
        std::vector<double> q(cols, 0.0);  // M^T p_c
        for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < cols; ++j) q[j] += m[i * cols + j] * p[c * rows + i];
        for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < cols; ++j) out[i * cols + j] += p[c * rows + i] * q[j];
    }
    return out;
}

double frobenius(const std::vector<double>& a) {
    double s = 0;
    for (double x : a) s += x * x;
    return std::sqrt(s);
}

}  // namespace

TEST_CASE("powersgd recovers a layer of rank <= r exactly and projects others onto P", "[compress][powersgd]") {
    const std::size_t rows = 64, cols = 48, r = 3;
    const hc::powersgd codec({.rank = r});
    const hc::matrix_shape shape{rows, cols};
    hc::detail::xoshiro256ss rng(5);
    // M = A B^T with A: rows x 2, B: cols x 2 (rank 2 <= 3).
    std::vector<double> a(rows * 2), b(cols * 2);
    for (auto& x : a) x = rng.normal();
    for (auto& x : b) x = rng.normal();
    std::vector<float> g(rows * cols);
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j)
            g[i * cols + j] = static_cast<float>(a[2 * i] * b[2 * j] + a[2 * i + 1] * b[2 * j + 1]) * 1e-3f;
    auto s = codec.make_state(g.size(), std::span(&shape, 1));
    REQUIRE(s.layers.size() == 1);
    CHECK(s.layers[0].compressed);
    std::vector<std::byte> m;
    const std::size_t size = codec.encode(tensor_view<const float>(g), s, m);
    CHECK(size == 32 + 8 + 24 + 4 * r * (rows + cols));
    std::vector<float> d(g.size());
    codec.decode(m, tensor_view<float>(d));
    double err = 0, norm = 0;
    for (std::size_t i = 0; i < g.size(); ++i) err += (d[i] - g[i]) * (d[i] - g[i]), norm += g[i] * g[i];
    CHECK(std::sqrt(err) <= 1e-5 * std::sqrt(norm));
    for (float e : s.residual) CHECK(std::fabs(e) <= 1e-5f * std::sqrt(static_cast<float>(norm)));

    // A full-rank layer: the result is the projection P P^T M computed from the state's starting Q.
    const auto full = hitch_test::gradients(rows * cols, 9);
    auto s2 = codec.make_state(full.size(), std::span(&shape, 1));
    const std::vector<float> q0 = s2.q;
    codec.encode(tensor_view<const float>(full), s2, m);
    codec.decode(m, tensor_view<float>(d));
    std::vector<double> md(full.begin(), full.end());
    const auto ref = projection_reference(md, rows, cols, q0.data(), r);
    std::vector<double> diff(ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) diff[i] = d[i] - ref[i];
    CHECK(frobenius(diff) <= 1e-4 * frobenius(ref));
    CHECK(frobenius(ref) <= frobenius(md));  // a projection never grows M
    // Error feedback keeps exactly what was not sent: residual = M - decoded (one rank).
    for (std::size_t i = 0; i < full.size(); ++i) CHECK(std::fabs(s2.residual[i] - (full[i] - d[i])) <= 1e-6f);
    // Warm start: the next step starts from the Q just computed, not the initial one.
    CHECK(s2.q != q0);
}

TEST_CASE("powersgd: layouts, vectors and tiny layers uncompressed, padded bare buckets", "[compress][powersgd]") {
    const hc::powersgd codec({.rank = 2});
    const std::vector<hc::matrix_shape> shapes = {{64, 1}, {3, 3}, {100, 50}, {1, 10}, {20, 20}};
    std::size_t n = 0;
    for (auto sh : shapes) n += sh.rows * sh.cols;
    auto s = codec.make_state(n, shapes);
    REQUIRE(s.layers.size() == 5);
    CHECK_FALSE(s.layers[0].compressed);  // a vector
    CHECK_FALSE(s.layers[1].compressed);  // min dimension 3 > 2, but 9 < 2 * 2 * 6
    CHECK(s.layers[2].compressed);
    CHECK_FALSE(s.layers[3].compressed);
    CHECK(s.layers[4].compressed);  // 400 >= 2 * 2 * 40
    CHECK(codec.p_count(s) == 64 + 9 + 2 * 100 + 10 + 2 * 20);
    CHECK(codec.q_count(s) == 2 * 50 + 2 * 20);
    const auto g = hitch_test::gradients(n, 3);
    std::vector<std::byte> m;
    CHECK(codec.encode(tensor_view<const float>(g), s, m) == 32 + 8 + 24 * 5 + 4 * (64 + 9 + 2 * 150 + 10 + 2 * 40));
    std::vector<float> d(n);
    codec.decode(m, tensor_view<float>(d));
    for (std::size_t i = 0; i < 73; ++i) CHECK(d[i] == g[i]);  // uncompressed layers are exact
    for (std::size_t i = 73 + 5000; i < 73 + 5000 + 10; ++i) CHECK(d[i] == g[i]);
    CHECK_THROWS_AS(codec.make_state(n + 1, shapes), hitch::config_error);

    // A bare bucket: one nearly square matrix, the last row padded.
    for (std::size_t size : {std::size_t{1}, std::size_t{10}, std::size_t{17}, std::size_t{1000}, std::size_t{4099}}) {
        auto sb = codec.make_state(size);
        const auto v = hitch_test::gradients(size, size);
        std::vector<float> out(size);
        codec.encode(tensor_view<const float>(v), sb, m);
        codec.decode(m, tensor_view<float>(out));
        double err = 0, norm = 0;
        for (std::size_t i = 0; i < size; ++i) err += (out[i] - v[i]) * (out[i] - v[i]), norm += v[i] * v[i];
        CHECK(err <= norm * (1 + 1e-5));
        for (std::size_t i = 0; i < size; ++i) CHECK(std::fabs(sb.residual[i] - (v[i] - out[i])) <= 1e-6f);
    }
}

TEST_CASE("powersgd: error feedback conserves everything over T steps; state saves and loads", "[compress][powersgd]") {
    const hc::powersgd codec({.rank = 1});
    const std::vector<hc::matrix_shape> shapes = {{40, 30}, {7, 1}};
    const std::size_t n = 1207;
    auto s = codec.make_state(n, shapes);
    std::vector<double> in(n, 0.0), sent(n, 0.0);
    std::vector<std::byte> m;
    std::vector<float> d(n);
    for (int t = 0; t < 20; ++t) {
        const auto g = hitch_test::gradients(n, 70 + static_cast<std::uint64_t>(t));
        codec.encode(tensor_view<const float>(g), s, m);
        codec.decode(m, tensor_view<float>(d));
        for (std::size_t i = 0; i < n; ++i) in[i] += g[i], sent[i] += d[i];
    }
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(sent[i] + s.residual[i] - in[i]));
    CHECK(worst <= 1e-6);
    std::vector<std::byte> blob;
    codec.save_state(s, blob);
    auto restored = codec.make_state(n, shapes);
    codec.load_state(blob, restored);
    CHECK(restored.q == s.q);
    CHECK(restored.residual == s.residual);
    CHECK(restored.step == s.step);
    auto other_layout = codec.make_state(n);
    CHECK(hitch_test::throws_corrupt([&] { codec.load_state(blob, other_layout); }, "another"));
    const hc::powersgd rank2({.rank = 2});
    auto r2 = rank2.make_state(n, shapes);
    CHECK(hitch_test::throws_corrupt([&] { rank2.load_state(blob, r2); }, "another rank"));
}

TEST_CASE("powersgd refuses corrupt messages and non-finite buckets", "[compress][powersgd]") {
    const hc::powersgd codec({.rank = 2});
    const std::vector<hc::matrix_shape> shapes = {{20, 10}, {5, 1}};
    auto s = codec.make_state(205, shapes);
    auto g = hitch_test::gradients(205, 4);
    std::vector<std::byte> m;
    g[100] = std::numeric_limits<float>::infinity();
    CHECK_THROWS_AS(codec.encode(tensor_view<const float>(g), s, m), hc::non_finite_error);
    g[100] = 0.0f;
    codec.encode(tensor_view<const float>(g), s, m);
    std::vector<float> out(205);
    auto tweak = [&](auto&& f) {
        auto c = m;
        f(c);
        hitch_test::reseal(c);
        return c;
    };
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(tweak([](auto& c) { hc::wire::store_le<std::uint32_t>(c.data() + 32, 0); }),
                         tensor_view<float>(out));
        },
        "rank 0"));
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(tweak([](auto& c) { hc::wire::store_le<std::uint64_t>(c.data() + 40, 21); }),
                         tensor_view<float>(out));
        },
        "overruns the bucket"));
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(tweak([](auto& c) { hc::wire::store_le<std::uint64_t>(c.data() + 64, 4); }),
                         tensor_view<float>(out));
        },
        "cover 204 of 205"));
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(tweak([](auto& c) { hc::wire::store_le<std::uint64_t>(c.data() + 56, 2); }),
                         tensor_view<float>(out));
        },
        "flag 2"));
    CHECK(hitch_test::throws_corrupt(
        [&] {
            codec.decode(tweak([](auto& c) { hc::wire::store_le(c.data() + 100, std::nanf("")); }),
                         tensor_view<float>(out));
        },
        "not finite"));
    CHECK(hitch_test::throws_corrupt(
        [&] {
            auto c = m;
            c.resize(c.size() - 4);
            hc::wire::store_le<std::uint64_t>(c.data() + 16, c.size() - 32);
            hitch_test::reseal(c);
            codec.decode(c, tensor_view<float>(out));
        },
        "truncated: layer data"));
}
