// comm::simulated: each fault of simulated_faults ends in the error a real cluster gives, on every rank, in virtual
// time and within seconds of wall time; a slow rank and a degraded link shift times as the model says.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/simulated.hpp"
#include "hitch/compress/topk.hpp"
#include "suite.hpp"

using hitch::seconds_f;
using hitch::comm::run_simulated;
using hitch::comm::simulate;
using hitch::comm::simulated;
using hitch::comm::simulated_network;
using hitch::comm::simulated_options;
using hitch_test::expect;
namespace ar = hitch::allreduce;

namespace {

constexpr double alpha = 5e-6;
constexpr double beta = 1e-10;
const simulated_network net = simulated_network::single_switch({alpha, 1.0 / beta});
constexpr double t0 = 1.0;
constexpr double timeout = 5.0;

bool same_time(double a, double b) { return std::abs(a - b) < 0.5e-12; }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void start_at(simulated& comm, double t) { comm.advance_to(seconds_f(t)); }

/// Every rank: a group, then at t0 one all-reduce of `count` floats with `schedule` (no agreement round).
template <class Schedule>
hitch::comm::simulation_report allreduce_with(int p, const simulated_options& options, const Schedule& schedule,
                                              std::size_t count = 4096, double compute_s = 0.0) {
    return simulate(
        p, net,
        [&](simulated& comm) {
            ar::group g(comm);
            std::vector<float> data(count, 1.0f);
            ar::call_options o;
            o.check = false;
            start_at(comm, t0);
            if (compute_s > 0) comm.compute(seconds_f(compute_s));
            ar::allreduce(g, hitch::view(data), ar::reduce_op::sum, schedule, o);
            return 0;
        },
        options);
}

enum class roll_call { none, answered };

/// Every rank but `except` ended in timeout_error at `at` (the deadline; for an all-reduce, plus the roll call
/// that follows it: `at` then includes its grace when a rank never answers, and with roll_call::answered every rank
/// answered within a few message latencies).
void every_rank_timed_out(const hitch::comm::simulation_report& report, int except, double at,
                          roll_call after = roll_call::none) {
    for (std::size_t r = 0; r < report.ranks.size(); ++r) {
        if (static_cast<int>(r) == except) continue;
        CAPTURE(r, report.ranks[r].error_text);
        REQUIRE(report.ranks[r].error != nullptr);
        CHECK_THROWS_AS(std::rethrow_exception(report.ranks[r].error), hitch::timeout_error);
        if (after == roll_call::none)
            CHECK(std::abs(report.ranks[r].error_s - at) < 1e-9);  // deadlines have nanosecond resolution
        else
            CHECK((report.ranks[r].error_s >= at && report.ranks[r].error_s < at + 1e-3));
    }
}

double grace_of(double timeout_s) { return hitch::comm::detail::roll_call_grace(seconds_f(timeout_s)).count(); }

double wall_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("comm::simulated faults: a rank that dies leaves every other rank in timeout_error naming it",
          "[comm][simulated][faults]") {
    simulated_options options;
    options.timeout_s = timeout;
    options.faults.deaths.push_back({3, t0 - 0.25});
    const auto start = std::chrono::steady_clock::now();
    const auto report = allreduce_with(4, options, ar::recursive_doubling{});
    CHECK(wall_since(start) < 10.0);
    REQUIRE(report.ranks[3].died);
    CHECK(same_time(report.ranks[3].error_s, t0 - 0.25));
    CHECK_THROWS_AS(std::rethrow_exception(report.ranks[3].error), hitch::comm::rank_died_error);
    // The roll call after the deadline listens its whole grace for the dead rank.
    every_rank_timed_out(report, 3, t0 + timeout + grace_of(timeout));
    // Round 0 pairs 2 with 3, round 1 pairs 1 with 3: both wait for the dead rank and say so. Rank 0 waits for
    // rank 2, which waits for rank 3: the roll call names rank 3 on every rank.
    CHECK(contains(report.ranks[2].error_text, "from rank 3"));
    CHECK(contains(report.ranks[1].error_text, "from rank 3"));
    CHECK(contains(report.ranks[0].error_text, "from rank 2"));
    for (int r = 0; r < 3; ++r)
        CHECK(contains(report.ranks[static_cast<std::size_t>(r)].error_text, ": rank 3 did not arrive)"));
    CHECK_THROWS_AS(std::rethrow_exception(report.first_error()), hitch::comm::rank_died_error);
}

TEST_CASE("comm::simulated faults: a lost message is a timeout naming its sender", "[comm][simulated][faults]") {
    simulated_options options;
    options.timeout_s = timeout;
    SECTION("one message of a ring all-reduce") {
        // The group's split sends 1 -> 0 and 1 -> 3 only, so the first message from 1 to 2 is the ring's first.
        options.faults.lost.push_back({1, 2, 0});
        const auto report = allreduce_with(4, options, ar::ring{});
        every_rank_timed_out(report, -1, t0 + timeout, roll_call::answered);
        CHECK(contains(report.ranks[2].error_text, "from rank 1"));
    }
    SECTION("a cut link under a polling schedule (the double binary tree)") {
        options.faults.lost.push_back({1, 0, -1});
        options.faults.lost.push_back({0, 1, -1});
        const auto start = std::chrono::steady_clock::now();
        const auto report = allreduce_with(6, options, ar::double_binary_tree{}, 100000);
        CHECK(wall_since(start) < 10.0);
        for (const auto& r : report.ranks)
            if (r.error) CHECK_THROWS_AS(std::rethrow_exception(r.error), hitch::timeout_error);
        CHECK(report.first_error() != nullptr);
    }
    SECTION("point to point") {
        options.faults.lost.push_back({0, 1, 1});
        const auto report = simulate(
            2, net,
            [](simulated& comm) {
                int x = 7;
                if (comm.rank() == 0) {
                    comm.send(std::span<const int>(&x, 1), 1, 5);
                    comm.send(std::span<const int>(&x, 1), 1, 6);  // lost
                    comm.recv(std::span<int>(&x, 1), 1, 7);        // never sent: 1 timed out
                } else {
                    comm.recv(std::span<int>(&x, 1), 0, 5);
                    comm.recv(std::span<int>(&x, 1), 0, 6);
                    comm.send(std::span<const int>(&x, 1), 0, 7);
                }
                return 0;
            },
            options);
        CHECK(contains(report.ranks[1].error_text, "from rank 0, tag 6"));
        CHECK(contains(report.ranks[0].error_text, "from rank 1, tag 7"));
        // Rank 0 posted its receive once both 4-byte sends had left; rank 1 its second once the first had arrived.
        every_rank_timed_out(report, 1, timeout + 8 * beta);
        every_rank_timed_out(report, 0, timeout + alpha + 4 * beta);
    }
}

TEST_CASE("comm::simulated faults: a corrupted message is corrupt_message_error where a codec checks it",
          "[comm][simulated][faults]") {
    simulated_options options;
    options.timeout_s = timeout;
    options.faults.corrupted.push_back({0, 1, 0, 100});
    const auto report = simulate(
        2, net,
        [](simulated& comm) {
            const hitch::compress::topk codec;
            std::vector<float> g(10000);
            for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::sin(static_cast<float>(i));
            auto state = codec.make_state(g.size());
            if (comm.rank() == 0) {
                std::vector<std::byte> message;
                codec.encode(hitch::tensor_view<const float>(g), state, message);
                comm.send(std::span<const std::byte>(message), 1, 0);
                int ack = 0;
                comm.recv(std::span<int>(&ack, 1), 1, 1);
            } else {
                const hitch::message_info info = comm.probe(0, 0);
                std::vector<std::byte> message(info.bytes);
                comm.recv(std::span<std::byte>(message), 0, 0);
                std::vector<float> out(g.size());
                codec.decode(message, hitch::tensor_view<float>(out));
                const int ack = 1;
                comm.send(std::span<const int>(&ack, 1), 0, 1);
            }
            return 0;
        },
        options);
    CAPTURE(report.ranks[1].error_text);
    REQUIRE(report.ranks[1].error != nullptr);
    CHECK_THROWS_AS(std::rethrow_exception(report.ranks[1].error), hitch::corrupt_message_error);
    REQUIRE(report.ranks[0].error != nullptr);
    CHECK_THROWS_AS(std::rethrow_exception(report.ranks[0].error), hitch::timeout_error);
    CHECK(contains(report.ranks[0].error_text, "from rank 1"));
}

TEST_CASE("comm::simulated faults: a slow rank shifts the end by its extra compute", "[comm][simulated][faults]") {
    // Recursive doubling on 4 ranks after 1 ms of compute. Rank 2, three times slower, starts 2 ms late with its
    // partners' data already there: it sends to 3 and then to 0 at once (one after the other on its up link) and
    // is done when both have left; 3 forwards to 1 on arrival.
    constexpr std::size_t count = 4096;
    const double n = count * sizeof(float);
    const double rounds = 2 * (alpha + n * beta);
    const auto ends = [&](const simulated_options& options) {
        return run_simulated(
            4, net,
            [&](simulated& comm) {
                ar::group g(comm);
                std::vector<float> data(count, 1.0f);
                ar::call_options o;
                o.check = false;
                start_at(comm, t0);
                comm.compute(seconds_f(1e-3));
                ar::allreduce(g, hitch::view(data), ar::reduce_op::sum, ar::recursive_doubling{}, o);
                return comm.virtual_time().count() - t0;
            },
            options);
    };
    for (double t : ends({})) CHECK(same_time(t, 1e-3 + rounds));
    simulated_options slow;
    slow.faults.slow.push_back({2, 3.0});
    const std::vector<double> late = ends(slow);
    const double step = alpha + n * beta;
    CHECK(same_time(late[0], 3e-3 + n * beta + step));
    CHECK(same_time(late[1], 3e-3 + 2 * step));
    CHECK(same_time(late[2], 3e-3 + 2 * n * beta));
    CHECK(same_time(late[3], 3e-3 + step + n * beta));
    CHECK(same_time(*std::max_element(late.begin(), late.end()), 1e-3 + rounds + 2e-3));  // the last, 2 ms later

    // With a deadline shorter than the delay, rank 2's partner gives up and names it.
    slow.timeout_s = 1e-3;
    const auto report = allreduce_with(4, slow, ar::recursive_doubling{}, count, 1e-3);
    REQUIRE(report.ranks[3].error != nullptr);
    CHECK_THROWS_AS(std::rethrow_exception(report.ranks[3].error), hitch::timeout_error);
    CHECK(contains(report.ranks[3].error_text, "from rank 2"));
    // After the deadline, a roll call: rank 2, still computing, does not answer within its grace.
    CHECK(std::abs(report.ranks[3].error_s - (t0 + 2e-3 + grace_of(1e-3))) < 1e-9);
}

TEST_CASE("comm::simulated faults: a degraded link slows what crosses it", "[comm][simulated][faults]") {
    constexpr std::size_t n = 8000;
    simulated_options options;
    options.faults.degraded.push_back({1, 4.0, 2e-6});
    run_simulated(
        4, net,
        [&](simulated& comm) {
            std::vector<std::byte> a(n);
            if (comm.rank() == 0) {  // from rank 1, whose port is degraded
                comm.recv(std::span<std::byte>(a), 1, 0);
                expect(same_time(comm.virtual_time().count(), alpha + 2e-6 + 4 * n * beta),
                       "rank 1's port at a quarter of its rate");
            } else if (comm.rank() == 3) {
                comm.recv(std::span<std::byte>(a), 2, 0);
                expect(same_time(comm.virtual_time().count(), alpha + n * beta), "a healthy link");
            } else {
                comm.send(std::span<const std::byte>(a), comm.rank() == 1 ? 0 : 3, 0);
            }
        },
        options);
}

TEST_CASE("comm::simulated: invalid networks and faults are config_error naming the field", "[comm][simulated]") {
    auto bad = net;
    bad.nic.bandwidth_bytes_per_s = 0;
    CHECK_THROWS_WITH(run_simulated(2, bad, [](simulated&) {}), Catch::Contains("nic.bandwidth_bytes_per_s"));
    simulated_options options;
    options.faults.deaths.push_back({5, 1.0});
    CHECK_THROWS_WITH(run_simulated(2, net, [](simulated&) {}, options), Catch::Contains("deaths.rank"));
    CHECK_THROWS_WITH(run_simulated(0, net, [](simulated&) {}), Catch::Contains("ranks"));
}

TEST_CASE("comm::simulated faults: heavy-tailed stalls repeat exactly and follow their distribution",
          "[comm][simulated][faults]") {
    // Pareto stalls of scale 1 ms and shape 3 (mean 1.5 ms) after a fifth of 2,000 compute calls of 1 us.
    simulated_options options;
    options.faults.delays.push_back({1, 0.2, 1e-3, 3.0, 42});
    options.record_timeline = true;
    const auto once = [&] {
        return simulate(
            2, net,
            [](simulated& comm) {
                for (int i = 0; i < 2000; ++i) comm.compute(seconds_f(1e-6));
                comm.barrier();
                return 0;
            },
            options);
    };
    const auto a = once(), b = once();
    CHECK(a.ranks[1].busy_s == b.ranks[1].busy_s);
    CHECK(same_time(a.ranks[0].busy_s, 2000 * 1e-6));  // rank 0 has no stalls
    const double stalls = a.ranks[1].busy_s - 2000 * 1e-6;
    CHECK(stalls / (0.2 * 2000) > 1.5e-3 * 0.8);  // mean stall about 1.5 ms
    CHECK(stalls / (0.2 * 2000) < 1.5e-3 * 1.2);
    int long_ones = 0;  // every stall is at least the scale; some are far longer
    for (const auto& e : a.ranks[1].timeline)
        if (std::string_view(e.name) == "compute" && e.end_s - e.begin_s > 1e-6 + 4e-3) ++long_ones;
    CHECK(long_ones > 0);
    // Rank 0 waits in the barrier for rank 1; the timeline shows it, and names whom it waited for.
    const auto& last = a.ranks[0].timeline.back();
    CHECK(std::string_view(last.name) == "wait");
    CHECK(last.peer == 1);
    std::ostringstream trace;
    hitch::comm::write_chrome_trace(a, trace);
    CHECK(trace.str().find("\"name\":\"compute\",\"cat\":\"compute\",\"ph\":\"X\"") != std::string::npos);
    CHECK(trace.str().find("\"pid\":1") != std::string::npos);
}

TEST_CASE("comm::simulated: a system thread acting for a rank is refused, and measured compute is scaled",
          "[comm][simulated]") {
    const auto report = simulate(2, net, [](simulated& comm) {
        if (comm.rank() == 1) {
            // Holding its turn for 300 ms of wall time keeps rank 0 waiting in wall time too.
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            comm.advance_to(seconds_f(1.0));
            int x = 1;
            comm.send(std::span<const int>(&x, 1), 0, 0);
            return 0;
        }
        int x = 0;
        auto r = comm.irecv(std::span<int>(&x, 1), 1, 0);
        std::string refused;
        // A system thread calls in while this rank waits (rank 1 holds the turn): only the simulation's own threads
        // (start_thread) may act for a rank.
        std::thread helper([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            try {
                (void)comm.isend(std::span<const int>(&x, 1), 1, 9);
            } catch (const hitch::comm_error& e) {
                refused = e.what();
            }
        });
        r.wait();
        helper.join();
        expect(refused.find("start_thread") != std::string::npos, "refused: " + refused);
        // About 20 ms of wall time, scaled by 0.5.
        const double before = comm.virtual_time().count();
        comm.compute_measured([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }, 0.5);
        const double spent = comm.virtual_time().count() - before;
        expect(spent >= 0.010 && spent < 0.5, "measured compute scaled: " + std::to_string(spent));
        return 0;
    });
    for (const auto& r : report.ranks) CHECK(r.error_text == "");
}

TEST_CASE("comm::simulated: host_time_scale charges a rank's own work between its calls, once", "[comm][simulated]") {
    simulated_options bad;
    bad.host_time_scale = -1.0;
    CHECK_THROWS_WITH(run_simulated(2, net, [](simulated&) {}, bad), Catch::Contains("host_time_scale"));
    // Rank 1 works 40 ms of wall time between two calls, then sends to rank 0.
    const auto once = [](double scale) {
        simulated_options options;
        options.host_time_scale = scale;
        options.record_timeline = true;
        return simulate(
            2, net,
            [](simulated& comm) {
                comm.advance_to(seconds_f(1.0));
                int x = 1;
                if (comm.rank() == 1) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(40));
                    comm.send(std::span<const int>(&x, 1), 0, 0);
                } else {
                    comm.recv(std::span<int>(&x, 1), 1, 0);
                }
                return 0;
            },
            options);
    };
    SECTION("scale 0 (the default): not charged, the same virtual times on every run") {
        const auto a = once(0.0), b = once(0.0);
        REQUIRE(a.first_error() == nullptr);
        for (std::size_t r = 0; r < 2; ++r) {
            CHECK(a.ranks[r].finish_s == b.ranks[r].finish_s);
            CHECK(a.ranks[r].busy_s == 0.0);
            for (const auto& e : a.ranks[r].timeline) CHECK(std::string_view(e.name) != "host");
        }
    }
    SECTION("scale 0.5: at least half the 40 ms, as compute of the rank, and the receiver waits for it") {
        const auto a = once(0.5);
        REQUIRE(a.first_error() == nullptr);
        CHECK(a.ranks[1].busy_s >= 0.020);
        CHECK(a.ranks[1].busy_s < 5.0);
        CHECK(a.ranks[0].finish_s >= 1.020);
        bool host = false;
        for (const auto& e : a.ranks[1].timeline) host = host || std::string_view(e.name) == "host";
        CHECK(host);
    }
    SECTION("compute_measured's function is charged at its own scale, not again as host time") {
        simulated_options options;
        options.host_time_scale = 1.0;
        const auto report = simulate(
            1, net,
            [](simulated& comm) {
                const double before = comm.virtual_time().count();
                comm.compute_measured([] { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }, 0.0);
                const double spent = comm.virtual_time().count() - before;
                expect(spent < 0.050, "charged as host time too: " + std::to_string(spent));
                return 0;
            },
            options);
        CHECK(report.ranks[0].error_text == "");
    }
}
