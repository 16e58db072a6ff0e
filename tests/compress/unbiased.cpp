// Unbiasedness of qsgd, terngrad and randomk (scaled): the mean of T seeded encodings of a fixed vector approaches
// it. Each decoded element lies in an interval of known width w (two neighbouring levels for QSGD, {0, s} times
// the sign for TernGrad, {0, (n / k) v_i} for random-k), so Hoeffding's inequality bounds the deviation of the
// mean: P(|mean - v| >= w sqrt(ln(2 / delta) / (2 T))) <= delta. With delta = 1e-9 per element the test fails by
// chance with probability below 1e-5 over all elements, while a bias larger than the bound fails it for sure.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "helpers.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/randomk.hpp"
#include "hitch/compress/terngrad.hpp"

namespace hc = hitch::compress;
using hitch::tensor_view;

namespace {

constexpr double delta = 1e-9;

// Returns how many elements deviate beyond their Hoeffding bound (width(i) per element).
template <class Codec, class Width>
std::size_t deviations(const Codec& codec, const std::vector<float>& v, int trials, Width&& width,
                       double* worst_ratio) {
    const std::size_t n = v.size();
    auto s = codec.make_state(n);
    std::vector<double> mean(n, 0.0);
    std::vector<float> d(n);
    std::vector<std::byte> m;
    for (int t = 0; t < trials; ++t) {
        codec.encode(tensor_view<const float>(v), s, m);
        codec.decode(m, tensor_view<float>(d));
        for (std::size_t i = 0; i < n; ++i) mean[i] += d[i];
    }
    const double factor = std::sqrt(std::log(2.0 / delta) / (2.0 * trials));
    std::size_t bad = 0;
    *worst_ratio = 0;
    for (std::size_t i = 0; i < n; ++i) {
        mean[i] /= trials;
        const double bound = width(i) * factor + 1e-12;
        const double dev = std::fabs(mean[i] - v[i]);
        *worst_ratio = std::max(*worst_ratio, dev / bound);
        bad += dev > bound;
    }
    return bad;
}

}  // namespace

TEST_CASE("qsgd is unbiased: the mean of seeded encodings approaches the input", "[compress][qsgd][unbiased]") {
    const std::size_t n = 1536;
    const auto v = hitch_test::gradients(n, 17);
    for (std::uint32_t s : {1u, 7u}) {
        const hc::qsgd codec({.levels = s, .group_size = 512});
        std::vector<double> unit(n);
        for (std::size_t k = 0; k < n / 512; ++k) {
            double norm2 = 0;
            for (std::size_t i = k * 512; i < (k + 1) * 512; ++i) norm2 += static_cast<double>(v[i]) * v[i];
            for (std::size_t i = k * 512; i < (k + 1) * 512; ++i) unit[i] = std::sqrt(norm2) / s;
        }
        double worst = 0;
        CHECK(deviations(codec, v, 4000, [&](std::size_t i) { return unit[i]; }, &worst) == 0);
        INFO("worst deviation / bound = " << worst);
        CHECK(worst < 1.0);
    }
}

TEST_CASE("terngrad is unbiased: the mean of seeded encodings approaches the input", "[compress][terngrad][unbiased]") {
    const std::size_t n = 1000;
    const auto v = hitch_test::gradients(n, 18);
    double max_abs = 0;
    for (float x : v) max_abs = std::max(max_abs, std::fabs(static_cast<double>(x)));
    const hc::terngrad codec;
    double worst = 0;
    CHECK(deviations(codec, v, 8000, [&](std::size_t) { return max_abs; }, &worst) == 0);
    INFO("worst deviation / bound = " << worst);
    // Clipped, it is unbiased for the clipped gradient, not the raw one: the outliers must show a bias.
    const hc::terngrad clipped({.clip_sigmas = 1.0});
    double worst_clipped = 0;
    CHECK(deviations(clipped, v, 8000, [&](std::size_t) { return max_abs; }, &worst_clipped) > 0);
}

TEST_CASE("terngrad's one-pass encode is unbiased where its blocks were thinned", "[compress][terngrad][unbiased]") {
    // The bucket's largest magnitude sits near the end, 10x the rest: every earlier block was quantised against a
    // running maximum about a tenth of the scale and must be thinned to probability R_b / S to stay unbiased (not
    // thinning would decode those elements about 10x too large). The second bucket spans two segments (the running
    // maximum restarts at element 65536) with the peak in the second.
    for (std::size_t n : {std::size_t{3 * 4096 + 77}, std::size_t{65536 + 2 * 4096 + 33}}) {
        auto v = hitch_test::gradients(n, 21);
        double max_abs = 0;
        for (float x : v) max_abs = std::max(max_abs, std::fabs(static_cast<double>(x)));
        v[n - 10] = static_cast<float>(-10.0 * max_abs);
        const double scale = 10.0 * max_abs;
        const hc::terngrad codec;
        double worst = 0;
        INFO("n = " << n);
        CHECK(deviations(codec, v, n < 20000 ? 8000 : 2000, [&](std::size_t) { return scale; }, &worst) == 0);
        INFO("worst deviation / bound = " << worst);
        CHECK(worst < 1.0);
    }
}

TEST_CASE("randomk (scaled) is unbiased: the mean of seeded encodings approaches the input",
          "[compress][randomk][unbiased]") {
    const std::size_t n = 400;
    const auto v = hitch_test::gradients(n, 19);
    const hc::randomk codec({.density = 0.25});
    const double f = static_cast<double>(n) / static_cast<double>(codec.k(n));
    double worst = 0;
    CHECK(deviations(
              codec, v, 20000, [&](std::size_t i) { return f * std::fabs(static_cast<double>(v[i])); }, &worst) == 0);
    INFO("worst deviation / bound = " << worst);
    // Unscaled, it keeps only a quarter on average: biased, and the same bound catches it.
    const hc::randomk unscaled({.density = 0.25, .scale = false});
    double worst_unscaled = 0;
    CHECK(deviations(
              unscaled, v, 20000, [&](std::size_t i) { return std::fabs(static_cast<double>(v[i])); },
              &worst_unscaled) > 0);
}
