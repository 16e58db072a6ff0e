// comm::simulated: the threads of a rank (simulated::start_thread). A started thread runs on its own virtual clock,
// so a rank's computation overlaps its communication; threads wait for each other on simulated::condition_variable
// at the virtual time of the notify; a wait nothing can end is an error, not a hang; a system thread is refused; and
// data_parallel's exchange worker and a co-located parameter server run as such threads, with the same results as
// on comm::local and a step that overlaps the exchange with the backward pass.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hitch/comm/local.hpp"
#include "hitch/comm/simulated.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/async.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/train/data_parallel.hpp"
#include "suite.hpp"

using hitch::seconds_f;
using hitch::comm::run_simulated;
using hitch::comm::simulate;
using hitch::comm::simulated;
using hitch::comm::simulated_network;
using hitch::comm::simulated_options;
using hitch_test::expect;

namespace {

constexpr double alpha = 5e-6;
constexpr double beta = 1e-10;
const simulated_network net = simulated_network::single_switch({alpha, 1.0 / beta});
constexpr double t0 = 1.0;

bool same_time(double a, double b) { return std::abs(a - b) < 0.5e-12; }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
double now(const simulated& comm) { return comm.virtual_time().count(); }

static_assert(hitch::starts_rank_threads<simulated>);
static_assert(!hitch::starts_rank_threads<hitch::comm::local>);

}  // namespace

TEST_CASE("comm::simulated threads: a started thread sends while the rank computes", "[comm][simulated][threads]") {
    constexpr std::size_t n = 1'000'000;  // bytes: alpha + n beta = 105 us on the wire
    constexpr double compute_s = 1e-3;
    const auto ends = run_simulated(2, net, [&](simulated& comm) {
        comm.advance_to(seconds_f(t0));
        std::vector<std::byte> buffer(n, std::byte{7});
        if (comm.rank() == 0) {
            double sent_at = 0;
            auto sender = comm.start_thread([&] {
                expect(same_time(now(comm), t0), "a started thread begins at its starter's time");
                comm.send(std::span<const std::byte>(buffer), 1, 0);
                sent_at = now(comm);
            });
            comm.compute(seconds_f(compute_s));  // overlaps the send
            expect(same_time(now(comm), t0 + compute_s), "the rank's own clock moved by its compute only");
            sender.join();
            expect(same_time(sent_at, t0 + n * beta), "the send completed on the started thread's clock");
            expect(same_time(now(comm), t0 + compute_s), "joining a thread that ended earlier costs nothing");
        } else {
            comm.recv(std::span<std::byte>(buffer), 0, 0);
            expect(buffer[n - 1] == std::byte{7}, "the bytes arrived");
        }
        return now(comm) - t0;
    });
    CHECK(same_time(ends[0], compute_s));
    CHECK(same_time(ends[1], alpha + n * beta));
}

TEST_CASE("comm::simulated threads: a wait on a condition variable ends at the notify's virtual time",
          "[comm][simulated][threads]") {
    run_simulated(1, net, [](simulated& comm) {
        comm.advance_to(seconds_f(t0));
        std::mutex m;
        simulated::condition_variable cv, done_cv;
        int stage = 0;
        double woke_at = 0;
        auto worker = comm.start_thread([&] {
            std::unique_lock lock(m);
            cv.wait(lock, [&] { return stage == 1; });
            woke_at = now(comm);
            lock.unlock();
            comm.compute(seconds_f(0.5));
            lock.lock();
            stage = 2;
            done_cv.notify_all();
        });
        comm.compute(seconds_f(0.25));
        {
            std::lock_guard lock(m);
            stage = 1;
        }
        cv.notify_one();
        comm.compute(seconds_f(0.1));  // the worker's 0.5 s overlaps these 0.1 s
        {
            std::unique_lock lock(m);
            done_cv.wait(lock, [&] { return stage == 2; });
        }
        expect(same_time(woke_at, t0 + 0.25), "the worker woke when notified");
        expect(same_time(now(comm), t0 + 0.75), "the rank waited for the worker's notify at t0 + 0.75");
        worker.join();
    });
}

TEST_CASE("comm::simulated threads: what nothing can end is an error, and a system thread is refused",
          "[comm][simulated][threads]") {
    const auto start = std::chrono::steady_clock::now();
    SECTION("a condition variable nobody notifies") {
        CHECK_THROWS_WITH(run_simulated(2, net,
                                        [](simulated& comm) {
                                            std::mutex m;
                                            simulated::condition_variable cv;
                                            std::unique_lock lock(m);
                                            if (comm.rank() == 1) cv.wait(lock);
                                        }),
                          Catch::Contains("rank 1's thread 0 waits on a condition variable nobody will notify"));
    }
    SECTION("a thread that never ends") {
        CHECK_THROWS_WITH(run_simulated(1, net,
                                        [](simulated& comm) {
                                            std::mutex m;
                                            simulated::condition_variable cv;
                                            auto t = comm.start_thread([&] {
                                                std::unique_lock lock(m);
                                                cv.wait(lock);
                                            });
                                            t.join();
                                        }),
                          Catch::Contains("nobody will notify") || Catch::Contains("which never ends"));
    }
    SECTION("a system thread") {
        run_simulated(1, net, [](simulated& comm) {
            std::string refused;
            std::thread helper([&] {
                try {
                    comm.compute(seconds_f(1.0));
                } catch (const hitch::comm_error& e) {
                    refused = e.what();
                }
            });
            helper.join();
            expect(contains(refused, "system thread the simulation did not start") && contains(refused, "start_thread"),
                   "refused: " + refused);
        });
    }
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 10.0);
}

TEST_CASE("comm::simulated threads: a rank that dies ends its threads too", "[comm][simulated][threads]") {
    simulated_options options;
    options.timeout_s = 5.0;
    options.faults.deaths.push_back({0, t0 + 0.5});
    const auto report = simulate(
        2, net,
        [](simulated& comm) {
            comm.advance_to(seconds_f(t0));
            int x = 0;
            if (comm.rank() == 0) {
                // The worker waits for a message that never comes; the rank dies while computing.
                auto worker = comm.start_thread([&] { comm.recv(std::span<int>(&x, 1), 1, 3); });
                comm.compute(seconds_f(2.0));
            } else {
                comm.recv(std::span<int>(&x, 1), 0, 4);
            }
            return 0;
        },
        options);
    CHECK(report.ranks[0].died);
    CHECK(contains(report.ranks[0].error_text, "died at virtual time 1.5"));
    CHECK(contains(report.ranks[1].error_text, "comm::simulated recv"));
    CHECK(same_time(report.ranks[1].error_s, t0 + 5.0));
}

namespace {

constexpr double backward_s = 0.02;  // per step, spread over the layers as they finish

/// Three steps of a trainer whose backward pass finishes layer k after its share of backward_s; returns the
/// parameter hash and, on comm::simulated, the virtual time of the three steps.
template <class Sync, class Optimizer, class C>
std::pair<std::uint64_t, double> train(C& comm, bool overlap) {
    std::vector<std::vector<float>> w;
    for (std::size_t k = 0; k < 6; ++k) w.emplace_back(20000 + 1000 * k, 0.1f * static_cast<float>(k + 1));
    auto g = w;
    std::vector<hitch::layer> layers;
    for (std::size_t k = 0; k < w.size(); ++k)
        layers.push_back({"l" + std::to_string(k), hitch::view(w[k]), hitch::view(g[k])});
    hitch::cpu dev;
    using engine = hitch::data_parallel<Optimizer, hitch::compress::none, Sync, hitch::allreduce::ring>;
    typename engine::options o;
    o.overlap = overlap;
    o.bucket_bytes = 100000;
    engine dp(comm, dev, layers, o);
    double start = 0;
    if constexpr (hitch::has_clock<C>) start = now(comm);
    for (int s = 0; s < 3; ++s) {
        for (std::size_t k = layers.size(); k-- > 0;) {
            if constexpr (hitch::has_clock<C>) comm.compute(seconds_f(backward_s / static_cast<double>(layers.size())));
            for (std::size_t i = 0; i < g[k].size(); ++i)
                g[k][i] = std::sin(static_cast<float>(i * (comm.rank() + 1) + s + k));
            dp.gradient_ready(k);
        }
        dp.step();
    }
    double took = 0;
    if constexpr (hitch::has_clock<C>) took = now(comm) - start;
    return {dp.parameter_hash(), took};
}

}  // namespace

TEST_CASE("comm::simulated threads: data_parallel's exchange overlaps the backward pass in virtual time",
          "[comm][simulated][threads][train]") {
    constexpr int p = 4;
    const auto slow = simulated_network::single_switch({alpha, 1e9});  // 1 GB/s: the exchange matters
    const auto want = hitch::comm::run_local(
        p, [](hitch::comm::local& c) { return train<hitch::sync::hard, hitch::optim::momentum>(c, true).first; });
    double sequential = 0, overlapped = 0;
    for (bool overlap : {false, true}) {
        CAPTURE(overlap);
        const auto got = run_simulated(
            p, slow, [&](simulated& c) { return train<hitch::sync::hard, hitch::optim::momentum>(c, overlap); });
        const auto again = run_simulated(
            p, slow, [&](simulated& c) { return train<hitch::sync::hard, hitch::optim::momentum>(c, overlap); });
        for (int r = 0; r < p; ++r) {
            const auto i = static_cast<std::size_t>(r);
            CHECK(got[i].first == want[i]);
            CHECK(got[i].second == again[i].second);  // the same virtual times on every run
        }
        (overlap ? overlapped : sequential) = got[0].second;
    }
    // 3 steps of 20 ms of backward, and a ring all-reduce of 540 KB per step: 2 (p-1)/p n beta = 0.81 ms of wire
    // time on each rank. Without overlap every step adds it; with it, only what the last bucket leaves after the
    // backward pass ends.
    const double exchange_s = 2.0 * (p - 1) / p * 135000 * 4 * 1e-9;
    CHECK(sequential > 3 * (backward_s + exchange_s));
    CHECK(overlapped < sequential - 3 * 0.5 * exchange_s);
    CHECK(overlapped > 3 * backward_s);
}

TEST_CASE("comm::simulated threads: a co-located parameter server runs as a thread of its rank",
          "[comm][simulated][threads][sync]") {
    constexpr int p = 3;
    const auto got = run_simulated(
        p, net, [&](simulated& c) { return train<hitch::sync::async, hitch::optim::sgd>(c, false).first; });
    // Asynchronous: the order in which the server applies updates depends on timing, but virtual time is
    // deterministic, so two runs agree bit for bit.
    const auto again = run_simulated(
        p, net, [&](simulated& c) { return train<hitch::sync::async, hitch::optim::sgd>(c, false).first; });
    CHECK(got == again);
}
