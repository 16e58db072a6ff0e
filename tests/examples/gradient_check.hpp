#pragma once
// Finite-difference gradient checks for the examples' toolkit, in double precision.
//
// A probe loss L = sum_i w_i y_i with fixed random w turns any layer into a scalar function, with dL/dy = w.
// Each analytic derivative a (from backward) is compared with the central difference
// n = (L(v + h) - L(v - h)) / 2h, h = 1e-5, through the error |a - n| / max(|a| + |n|, 1e-3), which must stay
// below 1e-6. Truncation error is O(h^2) ~ 1e-10 and rounding error ~ 1e-16 |L| / h ~ 1e-11 |L|; the worst
// element of these checks stays near 1e-7, while a wrong or missing term gives errors of order 0.1 to 1.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "nn/loss.hpp"
#include "nn/model.hpp"
#include "nn/random.hpp"

namespace hitch_test {

namespace nn = hitch_examples::nn;

inline constexpr double fd_step = 1e-5;
inline constexpr double fd_tolerance = 1e-6;

inline double fd_error(double analytic, double numeric) {
    return std::abs(analytic - numeric) / std::max(std::abs(analytic) + std::abs(numeric), 1e-3);
}

inline std::vector<double> normal_values(std::size_t n, std::uint64_t seed, double scale = 1.0) {
    nn::random_source rng(seed);
    std::vector<double> v(n);
    for (double& x : v) x = scale * rng.normal();
    return v;
}

/// n values spaced at least 0.05 apart, in random order: no two within a finite-difference step of each other
/// or of zero, so max and ReLU kinks are never crossed by the probe.
inline std::vector<double> distinct_values(std::size_t n, std::uint64_t seed) {
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = 0.05 * (static_cast<double>(i) - static_cast<double>(n) / 2.0) + 0.025;
    nn::random_source rng(seed);
    rng.shuffle(std::span<double>(v));
    return v;
}

/// Moves every parameter and buffer away from its initial value, so gamma = 1, beta = 0, zero biases and unit
/// running variances cannot hide a missing term.
inline void perturb(nn::model<double>& m, std::uint64_t seed) {
    nn::random_source rng(seed);
    for (const auto& p : m.parameters())
        for (double& v : p.value) v += 0.3 * rng.normal();
    for (const auto& b : m.buffers())
        for (double& v : b.value) v = b.name.ends_with("running_var") ? 0.5 + rng.uniform() : 0.3 * rng.normal();
}

/// The largest finite-difference error over every input and every parameter element of `m` under the probe
/// loss. `what` receives the name of the worst element.
inline double max_probe_error(nn::model<double>& m, std::vector<double> x, std::size_t batch, nn::mode mode,
                              std::string& what) {
    const auto out_size = batch * m.output_shape().size();
    const auto w = normal_values(out_size, 99);
    const auto loss = [&] {
        const auto y = m.forward(x, batch, mode);
        double l = 0.0;
        for (std::size_t i = 0; i < out_size; ++i) l += w[i] * y[i];
        return l;
    };
    loss();
    std::vector<double> dx(x.size());
    m.backward(w, {}, dx.data());
    std::vector<std::vector<double>> grads;
    for (const auto& p : m.parameters()) grads.emplace_back(p.gradient.begin(), p.gradient.end());

    double worst = 0.0;
    const auto probe = [&](double& v, double analytic, const std::string& name) {
        const double saved = v;
        v = saved + fd_step;
        const double up = loss();
        v = saved - fd_step;
        const double down = loss();
        v = saved;
        const double e = fd_error(analytic, (up - down) / (2 * fd_step));
        if (e > worst) worst = e, what = name;
    };
    for (std::size_t i = 0; i < x.size(); ++i) probe(x[i], dx[i], "input[" + std::to_string(i) + "]");
    for (std::size_t k = 0; k < m.parameters().size(); ++k) {
        const auto& p = m.parameters()[k];
        for (std::size_t i = 0; i < p.value.size(); ++i)
            probe(p.value[i], grads[k][i], p.name + "[" + std::to_string(i) + "]");
    }
    return worst;
}

/// Builds a one-layer model around `layer`, perturbs it and checks every derivative.
template <class Layer>
void check_layer(Layer layer, nn::shape input, std::size_t batch, nn::mode mode = nn::mode::train,
                 bool distinct_inputs = false) {
    nn::model<double> m(input, batch);
    m.add(std::move(layer));
    m.initialize(7);
    perturb(m, 8);
    auto x = distinct_inputs ? distinct_values(batch * input.size(), 9) : normal_values(batch * input.size(), 9);
    std::string worst;
    const double error = max_probe_error(m, std::move(x), batch, mode, worst);
    INFO(m.summary() << "worst element: " << worst);
    CHECK(error < fd_tolerance);
}

}  // namespace hitch_test
