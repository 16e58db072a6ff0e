// The parameter-server policies through data_parallel over comm::local, against what their papers say: soft sync
// at c = workers is hard sync; SSP's bound holds on every step; asynchronous SGD's staleness is N - 1; backup
// workers keep the fast workers' pace; elastic averaging's centre follows its formula. Plus the shards, bad
// requests, clean shutdown and exact resume.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <thread>

#include "../comm/suite.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/async.hpp"
#include "hitch/sync/backup_workers.hpp"
#include "hitch/sync/easgd.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/sync/soft.hpp"
#include "hitch/sync/ssp.hpp"
#include "hitch/train/data_parallel.hpp"
#include "model.hpp"

using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;
using hitch_test::quad_model;

namespace {

const std::vector<std::size_t> sizes{5, 300, 1, 77};

template <class P>
using dp_t = hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, P>;

template <class P>
typename dp_t<P>::options sgd_options(const typename P::options_type& sync, double lr = 0.1) {
    typename dp_t<P>::options o;
    o.learning_rate = hitch::lr::constant({lr});
    o.sync = sync;
    return o;
}

/// The same for ranks that start from different parameters on purpose (elastic averaging's centre starts at their
/// mean): rank 0's are not broadcast.
template <class P>
typename dp_t<P>::options apart_options(const typename P::options_type& sync, double lr) {
    typename dp_t<P>::options o = sgd_options<P>(sync, lr);
    o.broadcast_parameters = false;
    return o;
}

/// Final parameters of rank 0 (flattened) after `steps` steps of every worker on the quadratic model.
template <class P>
std::vector<float> train(int ranks, const typename P::options_type& sync, int steps) {
    std::vector<float> out;
    run_local(ranks, [&](local& comm) {
        quad_model m(sizes, comm.rank());
        hitch::cpu dev;
        dp_t<P> dp(comm, dev, m.layers(), sgd_options<P>(sync));
        if (dp.serves_only()) return dp.serve();
        for (int s = 0; s < steps; ++s) {
            m.gradients(s);
            dp.step();
        }
        dp.finish();
        if (comm.rank() == 0) out = m.flat();
    });
    return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
        if (std::abs(got[i] - want[i]) > tol * (1.0f + std::abs(want[i])))
            FAIL("element " << i << ": " << got[i] << " != " << want[i]);
}

}  // namespace

TEST_CASE("shard plans own every parameter exactly once and balance the bytes", "[sync][server]") {
    const std::vector<std::size_t> layers{1000, 3, 0, 700, 650, 10, 1};
    for (int shards : {1, 2, 3, 5, 9})
        for (auto by : {hitch::sync::shard_by::layer, hitch::sync::shard_by::range}) {
            CAPTURE(shards, static_cast<int>(by));
            const hitch::sync::shard_plan plan(layers, shards, by);
            REQUIRE(plan.size() == static_cast<std::size_t>(shards));
            std::vector<std::vector<int>> owner(layers.size());
            for (std::size_t k = 0; k < layers.size(); ++k) owner[k].assign(layers[k], 0);
            std::size_t most = 0;
            for (std::size_t s = 0; s < plan.size(); ++s) {
                std::size_t n = 0;
                for (const auto& p : plan.pieces(s)) {
                    for (std::size_t i = p.offset; i < p.offset + p.count; ++i) ++owner[p.layer].at(i);
                    n += p.count;
                }
                REQUIRE(n == plan.elements(s));
                most = std::max(most, n);
            }
            for (const auto& o : owner)
                for (int c : o) REQUIRE(c == 1);
            const std::size_t total = std::accumulate(layers.begin(), layers.end(), std::size_t{0});
            if (by == hitch::sync::shard_by::range) REQUIRE(most <= total / static_cast<std::size_t>(shards) + 1);
            // By layer: no shard exceeds the average by more than the largest layer (the greedy rule's bound).
            if (by == hitch::sync::shard_by::layer) REQUIRE(most <= total / static_cast<std::size_t>(shards) + 1000);
        }
}

TEST_CASE("soft sync with c = workers, no scaling, deterministic order equals hard sync", "[sync][soft]") {
    for (int p : {1, 2, 3, 4}) {
        CAPTURE(p);
        const auto hard = train<hitch::sync::hard>(p, {}, 6);
        hitch::sync::soft::options_type o;
        o.gradients_per_update = 0;
        o.scale_by_staleness = false;
        o.server.deterministic = true;
        expect_close(train<hitch::sync::soft>(p, o, 6), hard, 1e-5f);
        o.server.sharding = hitch::sync::shard_by::range;
        expect_close(train<hitch::sync::soft>(p, o, 6), hard, 1e-5f);
    }
    SECTION("with a dedicated server rank: 3 ranks are 2 workers") {
        const auto hard = train<hitch::sync::hard>(2, {}, 6);
        hitch::sync::soft::options_type o;
        o.gradients_per_update = 2;
        o.scale_by_staleness = false;
        o.server.placement = hitch::sync::server_placement::dedicated;
        o.server.dedicated_servers = 1;
        expect_close(train<hitch::sync::soft>(3, o, 6), hard, 1e-5f);
    }
}

TEST_CASE("ssp: no worker is ever more than s clocks ahead of the slowest; s = 0 is bulk-synchronous", "[sync][ssp]") {
    for (int p : {2, 3, 4})
        for (std::uint64_t s : {std::uint64_t{0}, std::uint64_t{2}}) {
            CAPTURE(p, s);
            std::vector<std::atomic<std::uint64_t>> started(static_cast<std::size_t>(p));
            std::vector<std::atomic<std::uint64_t>> hashes(static_cast<std::size_t>(p) * 64);
            std::atomic<std::uint64_t> most_ahead{0};
            const int steps = 24;
            REQUIRE_NOTHROW(run_local(p, [&](local& comm) {
                quad_model m(sizes, comm.rank());
                hitch::cpu dev;
                hitch::sync::ssp::options_type o;
                o.staleness_bound = s;
                dp_t<hitch::sync::ssp> dp(comm, dev, m.layers(), sgd_options<hitch::sync::ssp>(o));
                const auto me = static_cast<std::size_t>(comm.rank());
                for (int t = 0; t < steps; ++t) {
                    // Entering clock t: every other worker has started at least clock t - s.
                    std::uint64_t slowest = static_cast<std::uint64_t>(t);
                    for (const auto& c : started) slowest = std::min(slowest, c.load());
                    std::uint64_t ahead = static_cast<std::uint64_t>(t) - slowest;
                    std::uint64_t seen = most_ahead.load();
                    while (ahead > seen && !most_ahead.compare_exchange_weak(seen, ahead)) {}
                    if (s == 0 && t < 64) hashes[me * 64 + static_cast<std::size_t>(t)] = dp.parameter_hash();
                    m.gradients(t);
                    if (comm.rank() == p - 1) std::this_thread::sleep_for(std::chrono::milliseconds(3));
                    started[me] = static_cast<std::uint64_t>(t) + 1;  // its push is under way
                    dp.step();
                }
                dp.finish();
            }));
            REQUIRE(most_ahead.load() <= s);
            if (s == 0)
                for (int t = 0; t < steps; ++t)
                    for (int r = 1; r < p; ++r) REQUIRE(hashes[static_cast<std::size_t>(r) * 64 + t] == hashes[t]);
            if (s > 0 && p > 1) REQUIRE(most_ahead.load() >= 1);  // the fast workers did run ahead
        }
}

TEST_CASE("async: with N workers the staleness is N - 1, exactly in deterministic order", "[sync][async]") {
    for (int p : {2, 3, 4}) {
        CAPTURE(p);
        for (bool deterministic : {true, false}) {
            std::vector<std::uint64_t> histogram;
            REQUIRE_NOTHROW(run_local(p, [&](local& comm) {
                quad_model m(sizes, comm.rank());
                hitch::cpu dev;
                hitch::sync::async::options_type o;
                o.server.deterministic = deterministic;
                dp_t<hitch::sync::async> dp(comm, dev, m.layers(), sgd_options<hitch::sync::async>(o, 0.01));
                for (int t = 0; t < 60; ++t) {
                    m.gradients(t);
                    std::this_thread::sleep_for(std::chrono::microseconds(500));
                    dp.step();
                }
                dp.finish();
                if (comm.rank() == 0) histogram = dp.staleness_histogram();
            }));
            double n = 0, sum = 0;
            for (std::size_t tau = 0; tau < histogram.size(); ++tau) {
                n += static_cast<double>(histogram[tau]);
                sum += static_cast<double>(tau * histogram[tau]);
            }
            REQUIRE(n == 60);
            const double mean = sum / n;
            CAPTURE(deterministic, mean);
            if (deterministic) {
                // The first step's gradient is fresh; every later one waited for the other N - 1 updates.
                REQUIRE(histogram.size() == static_cast<std::size_t>(p));
                REQUIRE(histogram[static_cast<std::size_t>(p - 1)] >= 59 - static_cast<std::uint64_t>(p));
            } else {
                REQUIRE(mean >= 0.3 * (p - 1));
                REQUIRE(mean <= 2.0 * (p - 1) + 0.5);
            }
        }
    }
}

TEST_CASE("backup workers: b = 0 is hard sync; a slow worker's gradients are dropped, not waited for",
          "[sync][backup]") {
    for (int p : {2, 3}) {
        CAPTURE(p);
        hitch::sync::backup_workers::options_type o;
        o.backups = 0;
        expect_close(train<hitch::sync::backup_workers>(p, o, 6), train<hitch::sync::hard>(p, {}, 6), 1e-5f);
    }
    const int p = 4, steps = 16, slow_ms = 80;
    std::vector<double> seconds(p);
    std::vector<std::uint64_t> dropped(p);
    REQUIRE_NOTHROW(run_local(p, [&](local& comm) {
        quad_model m(sizes, comm.rank());
        hitch::cpu dev;
        hitch::sync::backup_workers::options_type o;
        o.backups = 1;
        dp_t<hitch::sync::backup_workers> dp(comm, dev, m.layers(), sgd_options<hitch::sync::backup_workers>(o));
        const auto start = std::chrono::steady_clock::now();
        for (int t = 0; t < steps; ++t) {
            m.gradients(t);
            if (comm.rank() == p - 1) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
            dp.step();
        }
        seconds[static_cast<std::size_t>(comm.rank())] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        dropped[static_cast<std::size_t>(comm.rank())] = dp.dropped_gradients();
        dp.finish();
    }));
    // While the fast workers train, every gradient of the slow one comes late and is dropped (once they have
    // finished, the quorum shrinks to the workers left and its gradients count again); the fast ones' always make
    // the quorum, and they finish in well under the slow one's time.
    REQUIRE(dropped[p - 1] >= 2);
    for (int r = 0; r < p - 1; ++r) REQUIRE(dropped[static_cast<std::size_t>(r)] == 0);
    for (int r = 0; r < p - 1; ++r) REQUIRE(seconds[static_cast<std::size_t>(r)] < 0.5 * steps * slow_ms * 1e-3);
}

TEST_CASE("easgd: the centre and the workers move as the formula says", "[sync][easgd]") {
    const float lr = 0.25f;
    SECTION("synchronous form, every rank at once") {
        for (int p : {2, 3}) {
            CAPTURE(p);
            std::vector<std::vector<float>> got(static_cast<std::size_t>(p));
            run_local(p, [&](local& comm) {
                quad_model m(sizes, comm.rank(), /*differ=*/true);
                hitch::cpu dev;
                hitch::sync::easgd::options_type o;
                o.kind = hitch::sync::easgd::form::synchronous;
                o.period = 1;
                o.alpha = 0.2;
                dp_t<hitch::sync::easgd> dp(comm, dev, m.layers(), apart_options<hitch::sync::easgd>(o, lr));
                for (int t = 0; t < 2; ++t) {
                    m.gradients(t);
                    dp.step();
                }
                got[static_cast<std::size_t>(comm.rank())] = m.flat();
            });
            // Serial reference: x_r stepped by SGD, then x_r -= a (x_r - c), c += p a (mean x - c); c starts at the
            // mean of the initial parameters.
            std::vector<quad_model> ms;
            for (int r = 0; r < p; ++r) ms.emplace_back(sizes, r, true);
            const std::size_t n = ms[0].flat().size();
            std::vector<std::vector<float>> x(static_cast<std::size_t>(p));
            for (int r = 0; r < p; ++r) x[static_cast<std::size_t>(r)] = ms[static_cast<std::size_t>(r)].flat();
            std::vector<float> c(n, 0.0f);
            for (std::size_t i = 0; i < n; ++i) {
                for (int r = 0; r < p; ++r) c[i] += x[static_cast<std::size_t>(r)][i];
                c[i] /= static_cast<float>(p);
            }
            for (int t = 0; t < 2; ++t) {
                std::vector<float> mean(n, 0.0f);
                for (int r = 0; r < p; ++r) {
                    auto& xr = x[static_cast<std::size_t>(r)];
                    const auto g = ms[static_cast<std::size_t>(r)].gradient_at(xr, t);
                    for (std::size_t i = 0; i < n; ++i) {
                        xr[i] -= lr * g[i];
                        mean[i] += xr[i] / static_cast<float>(p);
                    }
                }
                for (int r = 0; r < p; ++r)
                    for (std::size_t i = 0; i < n; ++i)
                        x[static_cast<std::size_t>(r)][i] -= 0.2f * (x[static_cast<std::size_t>(r)][i] - c[i]);
                for (std::size_t i = 0; i < n; ++i) c[i] += 0.2f * static_cast<float>(p) * (mean[i] - c[i]);
            }
            for (int r = 0; r < p; ++r)
                expect_close(got[static_cast<std::size_t>(r)], x[static_cast<std::size_t>(r)], 1e-5f);
        }
    }
    SECTION("asynchronous form, through the parameter server, in deterministic order") {
        const int p = 2;
        std::vector<std::vector<float>> got(p);
        run_local(p, [&](local& comm) {
            quad_model m(sizes, comm.rank(), /*differ=*/true);
            hitch::cpu dev;
            hitch::sync::easgd::options_type o;
            o.period = 1;
            o.alpha = 0.3;
            o.server.deterministic = true;
            o.server.sharding = hitch::sync::shard_by::range;
            dp_t<hitch::sync::easgd> dp(comm, dev, m.layers(), apart_options<hitch::sync::easgd>(o, lr));
            for (int t = 0; t < 2; ++t) {
                m.gradients(t);
                dp.step();
            }
            dp.finish();
            got[static_cast<std::size_t>(comm.rank())] = m.flat();
        });
        // The centre starts as each range's owner's initial parameters (rank s holds the s-th half); every worker
        // pulls it before the first step. Then per step: SGD, and in worker order x -= a (x - c), c += a (x - c).
        std::vector<quad_model> ms{quad_model(sizes, 0, true), quad_model(sizes, 1, true)};
        const auto x0 = ms[0].flat(), x1 = ms[1].flat();
        const std::size_t n = x0.size();
        std::vector<float> c(n);
        for (std::size_t i = 0; i < n; ++i) c[i] = i < n / 2 ? x0[i] : x1[i];
        std::vector<std::vector<float>> x{c, c};
        for (int t = 0; t < 2; ++t)
            for (int r = 0; r < p; ++r) {
                auto& xr = x[static_cast<std::size_t>(r)];
                const auto g = ms[static_cast<std::size_t>(r)].gradient_at(xr, t);
                for (std::size_t i = 0; i < n; ++i) xr[i] -= lr * g[i];
                for (std::size_t i = 0; i < n; ++i) {
                    const float d = 0.3f * (xr[i] - c[i]);
                    xr[i] -= d;
                    c[i] += d;
                }
            }
        // Worker 1's second exchange came after worker 0's: both reflect the centre's sequence.
        for (int r = 0; r < p; ++r)
            expect_close(got[static_cast<std::size_t>(r)], x[static_cast<std::size_t>(r)], 1e-5f);
    }
}

TEST_CASE("a worker that stops early, and workers finishing at different times, hang nobody", "[sync][shutdown]") {
    for (bool ssp : {false, true}) {
        CAPTURE(ssp);
        REQUIRE_NOTHROW(run_local(3, [&](local& comm) {
            quad_model m(sizes, comm.rank());
            hitch::cpu dev;
            const int steps = comm.rank() == 2 ? 3 : 20 + 5 * comm.rank();
            auto run = [&](auto& dp) {
                for (int t = 0; t < steps; ++t) {
                    m.gradients(t);
                    dp.step();
                }
                dp.finish();
            };
            if (ssp) {
                hitch::sync::ssp::options_type o;
                o.staleness_bound = 1;
                dp_t<hitch::sync::ssp> dp(comm, dev, m.layers(), sgd_options<hitch::sync::ssp>(o));
                run(dp);
            } else {
                dp_t<hitch::sync::async> dp(comm, dev, m.layers(), sgd_options<hitch::sync::async>({}));
                run(dp);
            }
        }));
    }
}

TEST_CASE("parameter-server options are validated", "[sync][options]") {
    hitch::sync::soft::options_type soft;
    soft.server.dedicated_servers = 0;
    REQUIRE_THROWS_WITH(hitch::sync::soft(soft), Catch::Contains("dedicated_servers"));
    hitch::sync::async::options_type async;
    async.fetch_every = 0;
    REQUIRE_THROWS_WITH(hitch::sync::async(async), Catch::Contains("fetch_every"));
    hitch::sync::easgd::options_type easgd;
    easgd.alpha = 1.0;
    REQUIRE_THROWS_WITH(hitch::sync::easgd(easgd), Catch::Contains("alpha"));
    // A quorum larger than the workers could never fill: refused at construction on every rank.
    soft = {};
    soft.gradients_per_update = 3;
    REQUIRE_THROWS_WITH(train<hitch::sync::soft>(2, soft, 1), Catch::Contains("gradients_per_update = 3"));
    hitch::sync::backup_workers::options_type backup;
    backup.backups = 2;
    REQUIRE_THROWS_WITH(train<hitch::sync::backup_workers>(2, backup, 1), Catch::Contains("backups = 2"));
    soft = {};
    soft.server.placement = hitch::sync::server_placement::dedicated;
    soft.server.dedicated_servers = 2;
    REQUIRE_THROWS_WITH(train<hitch::sync::soft>(2, soft, 1), Catch::Contains("leaves no worker"));
}

TEST_CASE("a worker that never arrives is a timeout_error naming it, not a hang", "[sync][server][timeout]") {
    std::vector<std::string> seen(2);
    hitch::comm::local_options lo;
    lo.timeout_s = 1.0;
    const auto start = std::chrono::steady_clock::now();
    run_local(
        2,
        [&](local& comm) {
            quad_model m(sizes, comm.rank());
            hitch::cpu dev;
            hitch::sync::soft::options_type o;
            o.gradients_per_update = 0;  // an update needs both workers' gradients
            auto& mine = seen[static_cast<std::size_t>(comm.rank())];
            dp_t<hitch::sync::soft> dp(comm, dev, m.layers(), sgd_options<hitch::sync::soft>(o));
            if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // never steps
            try {
                if (comm.rank() == 0) {
                    m.gradients(0);
                    dp.step();
                }
                dp.finish();
            } catch (const hitch::timeout_error& e) {
                mine = e.what();
            }
        },
        lo);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CAPTURE(seen[0], seen[1]);
    // Worker 0 waited for the server's reply, which waited for worker 1's gradient.
    REQUIRE(seen[0].find("worker 0") != std::string::npos);
    REQUIRE(seen[0].find("shard") != std::string::npos);
    REQUIRE(waited < 30.0);
}

TEST_CASE("large replies never block a server: a paused worker and steps out of line do not deadlock",
          "[sync][server][backup]") {
    // Shards of more than the eager limit, so a reply's send completes only when its worker takes it; workers
    // take replies one server after another, and a server that waited on each send would stall the others.
    const std::vector<std::size_t> big{70000, 50000, 3, 60000};
    hitch::comm::local_options lo;
    lo.timeout_s = 30.0;
    REQUIRE_NOTHROW(run_local(
        4,
        [&](local& comm) {
            quad_model m(big, comm.rank());
            hitch::cpu dev;
            hitch::sync::backup_workers::options_type o;
            o.backups = 1;
            o.server.sharding = hitch::sync::shard_by::range;
            dp_t<hitch::sync::backup_workers> dp(comm, dev, m.layers(), sgd_options<hitch::sync::backup_workers>(o));
            for (int t = 0; t < 40; ++t) {
                m.gradients(t);
                if (comm.rank() == 0 && t % 10 == 5) std::this_thread::sleep_for(std::chrono::milliseconds(150));
                dp.step();
            }
            dp.finish();
        },
        lo));
}
