#pragma once
// Block momentum (BMUF) for local SGD, run through data_parallel on any communicator and computed serially from
// Chen and Huo's formula. The gradients are multiples of 1/16 whose deviations from their mean over the ranks sum
// to zero exactly, so every average is exact whatever order a schedule sums in: the two sides must agree bit for
// bit, and the reference checks that premise as it goes.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "../comm/suite.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/local_sgd.hpp"
#include "hitch/train/data_parallel.hpp"

namespace hitch_test::bmuf {

using params = std::vector<std::vector<float>>;  // per layer
using dp_t = hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::local_sgd>;

struct setup {
    int ranks = 2;
    std::vector<std::size_t> sizes{5, 0, 37};
    std::uint64_t period = 3;
    int steps = 13;
    float lr = 0.5f;
    hitch::sync::local_sgd::options_type sync{};
};

inline float initial(std::size_t layer, std::size_t i) {
    return static_cast<float>((i + 3 * layer) % 13) * 0.25f - 1.0f;
}

/// c(s, i) + (r - (p - 1) / 2) * d(s, i): the rank-dependent part sums to zero over the ranks.
inline float gradient(int p, int r, std::uint64_t step, std::size_t layer, std::size_t i) {
    const int s = static_cast<int>(step), k = static_cast<int>(layer), e = static_cast<int>(i % 1009);
    const float common = static_cast<float>((s * 3 + k * 5 + e * 7) % 17 - 8) / 8.0f;
    const float spread = static_cast<float>((s * 5 + k + e * 3) % 7 - 3) / 8.0f;
    return common + static_cast<float>(2 * r - (p - 1)) / 2.0f * spread;
}

inline params initial_params(const std::vector<std::size_t>& sizes) {
    params w;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
        w.emplace_back(sizes[k]);
        for (std::size_t i = 0; i < sizes[k]; ++i) w[k][i] = initial(k, i);
    }
    return w;
}

/// Every rank's parameters after `steps` steps (the formula in include/hitch/sync/local_sgd.hpp).
inline std::vector<params> reference(const setup& c) {
    std::vector<params> w(static_cast<std::size_t>(c.ranks), initial_params(c.sizes));
    params global = initial_params(c.sizes), delta = initial_params(c.sizes);
    for (auto& layer : delta) std::fill(layer.begin(), layer.end(), 0.0f);
    const auto eta = static_cast<float>(c.sync.block_momentum);
    const auto zeta = static_cast<float>(c.sync.block_learning_rate);
    for (int s = 0; s < c.steps; ++s) {
        for (int r = 0; r < c.ranks; ++r)
            for (std::size_t k = 0; k < c.sizes.size(); ++k)
                for (std::size_t i = 0; i < c.sizes[k]; ++i)
                    w[r][k][i] -= c.lr * gradient(c.ranks, r, static_cast<std::uint64_t>(s), k, i);
        if ((static_cast<std::uint64_t>(s) + 1) % c.period != 0) continue;
        for (std::size_t k = 0; k < c.sizes.size(); ++k)
            for (std::size_t i = 0; i < c.sizes[k]; ++i) {
                float sum = 0.0f;
                double exact = 0.0;
                for (int r = 0; r < c.ranks; ++r) {
                    sum += w[r][k][i];
                    exact += w[r][k][i];
                }
                const float mean = sum / static_cast<float>(c.ranks);
                expect(static_cast<double>(mean) == exact / c.ranks, "the reference's averages are exact");
                float next = mean;
                if (eta > 0.0f) {
                    const float g = mean - global[k][i];
                    const float d = eta * delta[k][i] + zeta * g;
                    const float x = global[k][i] + d;
                    expect(static_cast<double>(d) == static_cast<double>(eta) * delta[k][i] + zeta * g &&
                               static_cast<double>(x) == static_cast<double>(global[k][i]) + d,
                           "the reference's block updates are exact");
                    delta[k][i] = d;
                    global[k][i] = x;
                    next = c.sync.nesterov ? x + eta * d : x;
                }
                for (int r = 0; r < c.ranks; ++r) w[r][k][i] = next;
            }
    }
    return w;
}

struct model {
    params w, g;
    explicit model(const std::vector<std::size_t>& sizes) : w(initial_params(sizes)), g(w) {}
    std::vector<hitch::layer> layers() {
        std::vector<hitch::layer> out;
        for (std::size_t k = 0; k < w.size(); ++k)
            out.push_back({"layer" + std::to_string(k), hitch::view(w[k]), hitch::view(g[k])});
        return out;
    }
    void fill(int p, int r, std::uint64_t step) {
        for (std::size_t k = 0; k < g.size(); ++k)
            for (std::size_t i = 0; i < g[k].size(); ++i) g[k][i] = gradient(p, r, step, k, i);
    }
};

inline dp_t::options options(const setup& c) {
    dp_t::options o;
    o.learning_rate = hitch::lr::constant({c.lr});
    o.sync = c.sync;
    return o;
}

/// Steps [from, to) of `dp` on `m`; checks that parameters are averaged at the end of each period only.
inline void run_steps(dp_t& dp, model& m, const setup& c, int from, int to) {
    for (int s = from; s < to; ++s) {
        m.fill(dp.size(), dp.rank(), static_cast<std::uint64_t>(s));
        const auto metrics = dp.step();
        expect(!metrics.skipped, "step applied");
        const std::uint64_t into = (static_cast<std::uint64_t>(s) + 1) % c.period;
        expect(dp.staleness() == into, "staleness " + std::to_string(dp.staleness()) + " at step " + std::to_string(s) +
                                           ", expected " + std::to_string(into));
    }
}

/// This rank's parameters after c.steps steps through data_parallel. Collective over `comm`.
template <hitch::communicator C>
params run(C& comm, const setup& c) {
    model m(c.sizes);
    hitch::cpu dev;
    dp_t dp(comm, dev, m.layers(), options(c));
    run_steps(dp, m, c, 0, c.steps);
    return m.w;
}

/// Runs `c` on `comm` and compares this rank's parameters with the reference, bit for bit. Collective.
template <hitch::communicator C>
void check_against_reference(C& comm, const setup& c) {
    const params got = run(comm, c);
    const params want = reference(c)[static_cast<std::size_t>(comm.rank())];
    for (std::size_t k = 0; k < want.size(); ++k)
        for (std::size_t i = 0; i < want[k].size(); ++i)
            expect(got[k][i] == want[k][i], "rank " + std::to_string(comm.rank()) + " layer " + std::to_string(k) +
                                                " element " + std::to_string(i) + ": " + std::to_string(got[k][i]) +
                                                " where the reference has " + std::to_string(want[k][i]));
}

/// The settings the tests sweep: plain averaging, BMUF with and without the Nesterov start, two block rates.
inline std::vector<hitch::sync::local_sgd::options_type> sweep(std::uint64_t period) {
    std::vector<hitch::sync::local_sgd::options_type> out;
    for (const auto& [eta, zeta, nesterov] : {std::tuple{0.0, 1.0, true}, std::tuple{0.5, 1.0, true},
                                              std::tuple{0.75, 0.5, false}, std::tuple{0.75, 1.0, true}}) {
        hitch::sync::local_sgd::options_type o;
        o.period = period;
        o.block_momentum = eta;
        o.block_learning_rate = zeta;
        o.nesterov = nesterov;
        out.push_back(o);
    }
    return out;
}

}  // namespace hitch_test::bmuf
