// sync::hogwild through data_parallel over comm::local: one rank is plain SGD; ranks that take turns lose no
// update and see a staleness of one; four ranks racing on a convex quadratic reach its minimum.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "../comm/suite.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/hogwild.hpp"
#include "hitch/train/data_parallel.hpp"

using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;

namespace {

using dp_t = hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::hogwild>;

// data_parallel decides per rank (asynchronous) and hands it the shared array (shares_memory); only a context with
// that array can drive it.
static_assert(hitch::asynchronous_policy<hitch::sync::hogwild> && hitch::shared_memory_policy<hitch::sync::hogwild>);
static_assert(hitch::sync_policy_steps_on<hitch::sync::hogwild, hitch::shared_memory_context_archetype> &&
              !hitch::sync_policy_steps_on<hitch::sync::hogwild, hitch::parameter_context_archetype>);

struct model {
    std::vector<std::vector<float>> w, g;
    explicit model(const std::vector<std::size_t>& sizes) {
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            w.emplace_back(sizes[k]);
            g.emplace_back(sizes[k]);
            for (std::size_t i = 0; i < sizes[k]; ++i) w[k][i] = static_cast<float>((i + k) % 13) * 0.25f - 1.0f;
        }
    }
    std::vector<hitch::layer> layers() {
        std::vector<hitch::layer> out;
        for (std::size_t k = 0; k < w.size(); ++k)
            out.push_back({"layer" + std::to_string(k), hitch::view(w[k]), hitch::view(g[k])});
        return out;
    }
};

/// Rank r's minimum of 0.5 * ||x - t_r||^2.
float target(int rank, std::size_t layer, std::size_t i) {
    return static_cast<float>((rank * 5 + static_cast<int>(layer) * 3 + static_cast<int>(i % 101)) % 9 - 4) / 4.0f;
}

/// The gradient of rank r's quadratic at this rank's own parameters, times `scale`.
void quadratic_gradient(model& m, int rank, float scale) {
    for (std::size_t k = 0; k < m.w.size(); ++k)
        for (std::size_t i = 0; i < m.w[k].size(); ++i) m.g[k][i] = scale * (m.w[k][i] - target(rank, k, i));
}

dp_t::options constant_rate(float lr) {
    dp_t::options o;
    o.learning_rate = hitch::lr::constant({lr});
    return o;
}

}  // namespace

TEST_CASE("hogwild with one rank is plain SGD", "[sync][hogwild]") {
    const std::vector<std::size_t> sizes{3, 0, 257};
    const int steps = 6;
    const float lr = 0.5f;
    // Gradients of multiples of 1/8: adding the change into the shared copy is exact, so the results are equal.
    const auto grad = [](int s, std::size_t k, std::size_t i) {
        return static_cast<float>((s * 3 + static_cast<int>(k) * 5 + static_cast<int>(i % 1009)) % 17 - 8) / 8.0f;
    };
    model ref(sizes);
    for (int s = 0; s < steps; ++s)
        for (std::size_t k = 0; k < sizes.size(); ++k)
            for (std::size_t i = 0; i < sizes[k]; ++i) ref.w[k][i] -= lr * grad(s, k, i);
    REQUIRE_NOTHROW(run_local(1, [&](local& comm) {
        model m(sizes);
        hitch::cpu dev;
        dp_t dp(comm, dev, m.layers(), constant_rate(lr));
        for (int s = 0; s < steps; ++s) {
            for (std::size_t k = 0; k < sizes.size(); ++k)
                for (std::size_t i = 0; i < sizes[k]; ++i) m.g[k][i] = grad(s, k, i);
            const auto metrics = dp.step();
            expect(!metrics.skipped, "step applied");
            expect(dp.staleness() == 0, "no other rank: staleness 0");
        }
        expect(m.w == ref.w, "one rank of hogwild equals plain SGD");
    }));
}

TEST_CASE("hogwild ranks that take turns lose no update, each one step stale", "[sync][hogwild]") {
    const std::vector<std::size_t> sizes{40, 3};
    const int p = 2, rounds = 8;
    const float lr = 0.3f;
    // The serial sequence: rank r steps its own copy (where it last read the shared parameters), the change goes
    // into the shared parameters, and rank r continues from them.
    model shared(sizes);
    std::vector<model> own(p, model(sizes));
    for (int s = 0; s < rounds; ++s)
        for (int r = 0; r < p; ++r) {
            model& m = own[static_cast<std::size_t>(r)];
            quadratic_gradient(m, r, 1.0f);
            for (std::size_t k = 0; k < sizes.size(); ++k)
                for (std::size_t i = 0; i < sizes[k]; ++i) {
                    const float before = m.w[k][i];
                    const float after = before - lr * m.g[k][i];
                    shared.w[k][i] = shared.w[k][i] + (after - before);
                }
            m.w = shared.w;
        }

    const auto results = run_local(p, [&](local& comm) {
        model m(sizes);
        hitch::cpu dev;
        dp_t dp(comm, dev, m.layers(), constant_rate(lr));
        std::vector<std::uint64_t> staleness;
        for (int s = 0; s < rounds; ++s)
            for (int r = 0; r < p; ++r) {
                if (r == comm.rank()) {
                    quadratic_gradient(m, r, 1.0f);
                    const auto metrics = dp.step();
                    expect(!metrics.skipped, "step applied");
                    staleness.push_back(dp.staleness());
                }
                comm.barrier();  // strict turns: no two updates overlap
            }
        return std::pair(m.w, staleness);
    });
    // Rank 1 stepped last: its parameters are the shared ones after all 2 * rounds updates.
    CHECK(results[1].first == shared.w);
    CHECK(results[0].first == own[0].w);
    // Rank 0's first update follows no other; every later update by either rank follows exactly one other.
    std::vector<std::uint64_t> want0(rounds, 1), want1(rounds, 1);
    want0[0] = 0;
    CHECK(results[0].second == want0);
    CHECK(results[1].second == want1);
    std::uint64_t total = 0;
    for (const auto& [w, st] : results)
        for (std::uint64_t v : st) total += v;
    CHECK(total == 2 * rounds - 1);
}

TEST_CASE("four hogwild ranks racing on a convex quadratic reach its minimum", "[sync][hogwild]") {
    // Each rank pulls towards its own target; the sum of the four quadratics has its minimum at their mean. The
    // ranks meet at a barrier every few steps only so that one thread cannot run far ahead on a busy machine;
    // between barriers their updates overlap freely.
    const std::vector<std::size_t> sizes{64, 7};
    const int p = 4, steps = 4000, between_barriers = 4;
    const auto results = run_local(p, [&](local& comm) {
        model m(sizes);
        hitch::cpu dev;
        dp_t dp(comm, dev, m.layers(), constant_rate(1.0f));
        for (int s = 0; s < steps; ++s) {
            // A step size of 0.1 / (1 + s / 20), which sums to infinity while its tail vanishes.
            quadratic_gradient(m, comm.rank(), 0.1f * 20.0f / (20.0f + static_cast<float>(s)));
            dp.step();
            if (s % between_barriers == between_barriers - 1) comm.barrier();
        }
        comm.barrier();
        return m.w;
    });
    double worst = 0;
    for (int r = 0; r < p; ++r)
        for (std::size_t k = 0; k < sizes.size(); ++k)
            for (std::size_t i = 0; i < sizes[k]; ++i) {
                double mean = 0;
                for (int q = 0; q < p; ++q) mean += target(q, k, i);
                mean /= p;
                worst = std::max(worst, std::abs(results[static_cast<std::size_t>(r)][k][i] - mean));
            }
    CAPTURE(worst);
    CHECK(worst < 0.02);
}

TEST_CASE("hogwild resumes from a checkpoint: rank 0's parameters refill the shared array", "[sync][hogwild]") {
    const std::vector<std::size_t> sizes{30, 4};
    const float lr = 0.25f;
    const int n = 5;
    const auto dir = std::filesystem::temp_directory_path() / ("hitch-test-hogwild-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto run = [&](local& comm, model& m, dp_t& dp, int steps) {
        for (int s = 0; s < steps; ++s)
            for (int r = 0; r < comm.size(); ++r) {
                if (r == comm.rank()) {
                    quadratic_gradient(m, r, 1.0f);
                    dp.step();
                }
                comm.barrier();
            }
    };
    hitch::cpu dev;

    // One rank is deterministic: 2N steps equal N steps, save, load into a new object, N steps.
    REQUIRE_NOTHROW(run_local(1, [&](local& comm) {
        model straight(sizes);
        {
            dp_t dp(comm, dev, straight.layers(), constant_rate(lr));
            run(comm, straight, dp, 2 * n);
        }
        {
            model m(sizes);
            dp_t dp(comm, dev, m.layers(), constant_rate(lr));
            run(comm, m, dp, n);
            dp.save(dir / "one");
        }
        model m(sizes);
        for (auto& layer : m.w) std::fill(layer.begin(), layer.end(), 7.0f);  // the new shared array holds 7s
        dp_t dp(comm, dev, m.layers(), constant_rate(lr));
        dp.load(dir / "one");
        run(comm, m, dp, n);
        expect(m.w == straight.w, "one rank resumes exactly");
    }));

    // Two ranks: after the load the shared array is rank 0's saved copy, whatever the new object started from.
    REQUIRE_NOTHROW(run_local(2, [&](local& comm) {
        std::vector<std::vector<float>> saved;
        {
            model m(sizes);
            dp_t dp(comm, dev, m.layers(), constant_rate(lr));
            run(comm, m, dp, n);
            dp.save(dir / "two");
            saved = m.w;
        }
        model m(sizes);
        for (auto& layer : m.w) std::fill(layer.begin(), layer.end(), 7.0f);
        dp_t dp(comm, dev, m.layers(), constant_rate(lr));
        dp.load(dir / "two");
        expect(m.w == saved, "each rank's own copy is restored");
        if (comm.rank() == 0) {
            quadratic_gradient(m, 0, 1.0f);
            dp.step();
            expect(dp.staleness() == 0, "the first update after a load counts no staleness");
            for (std::size_t k = 0; k < sizes.size(); ++k)
                for (std::size_t i = 0; i < sizes[k]; ++i) {
                    const float before = saved[k][i];
                    const float after = before - lr * (before - target(0, k, i));
                    expect(m.w[k][i] == before + (after - before), "rank 0 stepped from its saved parameters");
                }
        }
        comm.barrier();
        if (comm.rank() == 1) {
            quadratic_gradient(m, 1, 1.0f);
            dp.step();
            expect(dp.staleness() == 0, "the first update after a load counts no staleness");
        }
        comm.barrier();
    }));
    std::filesystem::remove_all(dir);
}
