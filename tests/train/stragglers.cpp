// A straggler seen from data_parallel over comm::local (3 ranks, rank 2 sleeps before its backward pass ends in
// every step): the stall observer of rank 0 reports each step's exchange once, naming rank 2; the metrics' wait_ms is
// about the delay on ranks 0 and 1 and small on rank 2, with overlap and without; the timeline has the wait as a span
// of category "wait"; with the collectives' check off wait_ms is not measured (null). A rank late to the loss scaler's
// agreement is named in a report of operation "agreement".
#include <catch2/catch.hpp>

#include <chrono>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../time_scale.hpp"
#include "hitch/allreduce/ring.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/train/data_parallel.hpp"

namespace {

using dp_t = hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::hard, hitch::allreduce::ring>;

struct run_result {
    std::vector<std::optional<double>> wait_ms;  // per step
    std::vector<std::string> reports;
    std::size_t wait_spans = 0;
};

/// Trains `steps` steps on `p` ranks; rank p-1 sleeps `late` seconds before reporting its gradient.
std::vector<run_result> train(int p, int steps, double late, bool overlap, bool check, double warning) {
    hitch::comm::local_options lo;
    lo.timeout_s = hitch_test::scaled_seconds(30);
    std::mutex m;
    return hitch::comm::run_local(
        p,
        [&](hitch::comm::local& comm) {
            run_result out;
            std::vector<float> w(4096, 0.5f), g(w.size(), 0.0f);
            hitch::cpu dev;
            hitch::train::timeline tl(comm.rank());
            dp_t::options o;
            o.overlap = overlap;
            o.check_collectives = check;
            o.timeline = &tl;
            o.stall.warning_s = warning;
            o.observer.stall = [&](const hitch::stall_report& r) {
                std::lock_guard lock(m);
                out.reports.push_back(r.message());
            };
            dp_t dp(comm, dev, {{"w", hitch::view(w), hitch::view(g)}}, o);
            for (int s = 0; s < steps; ++s) {
                for (auto& x : g) x = static_cast<float>(comm.rank() + s);
                if (comm.rank() == p - 1) std::this_thread::sleep_for(std::chrono::duration<double>(late));
                dp.gradient_ready(0);
                out.wait_ms.push_back(dp.step().wait_ms);
            }
            for (const auto& e : tl.events())
                if (e.category == "wait") ++out.wait_spans;
            std::lock_guard lock(m);
            return out;
        },
        lo);
}

}  // namespace

TEST_CASE("a straggler: reported once per step by rank 0, its peers' wait_ms shows its delay, its own does not",
          "[train][stall]") {
    const double warning = hitch_test::scaled_seconds(0.25);
    const double late = hitch_test::scaled_seconds(0.4);  // between one report (0.25) and two (0.5)
    for (const bool overlap : {true, false}) {
        INFO((overlap ? "overlap" : "no overlap"));
        const auto ranks = train(3, 3, late, overlap, true, warning);
        for (int r = 0; r < 3; ++r) {
            const run_result& out = ranks[static_cast<std::size_t>(r)];
            INFO("rank " << r);
            REQUIRE(out.wait_ms.size() == 3);
            for (const auto& w : out.wait_ms) {
                REQUIRE(w.has_value());
                if (r < 2)
                    CHECK(*w > 0.9 * late * 1e3);
                else
                    CHECK(*w < 0.25 * late * 1e3);
            }
            if (r == 0) {
                REQUIRE(out.reports.size() == 3);  // one per step
                for (const auto& line : out.reports) {
                    INFO(line);
                    CHECK(line.find("hitch: stall: allreduce #") == 0);
                    CHECK(line.find("(ring) on rank 0 of 3") != std::string::npos);
                    CHECK(line.find(": rank 2 has not arrived (its last call was #") != std::string::npos);
                }
                CHECK(out.wait_spans >= 3);
            } else {
                CHECK(out.reports.empty());
            }
        }
    }
}

TEST_CASE("wait_ms is null when the collectives' check is off; no observer, no reports", "[train][stall]") {
    const auto ranks = train(2, 2, hitch_test::scaled_seconds(0.05), true, false, 0.0);
    for (const auto& out : ranks) {
        for (const auto& w : out.wait_ms) CHECK(!w.has_value());
        CHECK(out.reports.empty());
    }
}

TEST_CASE("a rank late to the loss scaler's agreement is named by the stall inspector", "[train][stall]") {
    // Rank 2 reports its gradient on time (the exchange completes on the group's thread) but calls step() late, so
    // its peers wait in the loss scaler's agreement on whether any rank overflowed, a call of the group.
    const double warning = hitch_test::scaled_seconds(0.2);
    const double late = hitch_test::scaled_seconds(0.5);
    hitch::comm::local_options lo;
    lo.timeout_s = hitch_test::scaled_seconds(30);
    std::mutex m;
    std::vector<std::string> reports;
    hitch::comm::run_local(
        3,
        [&](hitch::comm::local& comm) {
            std::vector<float> w(1024, 0.5f), g(w.size(), 0.0f);
            hitch::cpu dev;
            dp_t::options o;
            o.overlap = true;
            o.loss_scaling = true;
            o.stall.warning_s = warning;
            o.observer.stall = [&](const hitch::stall_report& r) {
                std::lock_guard lock(m);
                if (comm.rank() == 0) reports.push_back(r.message());
            };
            dp_t dp(comm, dev, {{"w", hitch::view(w), hitch::view(g)}}, o);
            for (auto& x : g) x = static_cast<float>(comm.rank() + 1);
            dp.gradient_ready(0);
            if (comm.rank() == 2) std::this_thread::sleep_for(std::chrono::duration<double>(late));
            (void)dp.step();
        },
        lo);
    REQUIRE(!reports.empty());
    for (const auto& line : reports) {
        INFO(line);
        CHECK(line.find("hitch: stall: agreement #") == 0);
        CHECK(line.find("(loss scale) on rank 0 of 3") != std::string::npos);
        CHECK(line.find(": rank 2 has not arrived") != std::string::npos);
    }
}
