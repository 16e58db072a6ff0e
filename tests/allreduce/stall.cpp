// The stall inspector (core/observer.hpp, allreduce/detail/stall_inspector.hpp) over comm::local: a rank that comes
// to an all-reduce later than the threshold but before the deadline gives exactly one report on rank 0, naming the
// operation, the call's number and that rank, and the call succeeds; with every_rank each waiting rank reports; a
// rank that never comes gives reports until the deadline, then the timeout_error naming it; a rank still in an
// earlier call, and one whose group is gone, are described as such. group::waited(): the late rank's peers waited
// about its delay, the late rank itself almost nothing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../time_scale.hpp"
#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/core/observer.hpp"

using namespace hitch::allreduce;
using hitch::comm::local;
using hitch::comm::run_local;

namespace {

/// Reports, collected from the inspector threads of every rank.
struct collected {
    std::mutex m;
    std::vector<hitch::stall_report> reports;

    hitch::observer observer() {
        hitch::observer o;
        o.stall = [this](const hitch::stall_report& r) {
            std::lock_guard lock(m);
            reports.push_back(r);
        };
        return o;
    }
    std::vector<hitch::stall_report> take() {
        std::lock_guard lock(m);
        return reports;
    }
};

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

/// Inside the ranks' threads (Catch's assertions are for the test's own thread): throws, and run_local rethrows.
void expect(bool ok, const char* what) {
    if (!ok) throw std::runtime_error(std::string("expected: ") + what);
}

hitch::comm::local_options with_timeout(double s) {
    hitch::comm::local_options o;
    o.timeout_s = s;
    return o;
}

}  // namespace

TEST_CASE("stall: a rank late by more than the threshold is reported once, by rank 0, and the call succeeds",
          "[allreduce][stall]") {
    const double warning = hitch_test::scaled_seconds(0.4);
    const double late = hitch_test::scaled_seconds(0.65);  // between the first report (0.4) and the second (0.8)
    for (const int p : {2, 4}) {
        collected seen;
        std::vector<double> waited(static_cast<std::size_t>(p));
        std::vector<float> results(static_cast<std::size_t>(p));
        run_local(
            p,
            [&](local& c) {
                hitch::stall_options stall;
                stall.warning_s = warning;
                group g(c, seen.observer(), stall);
                expect(g.inspects_stalls(), "an inspector");
                std::vector<float> x{1.0f};
                allreduce(g, hitch::view(x), reduce_op::sum);  // call #0, on time
                const double before = g.waited().count();
                if (c.rank() == p - 1) sleep_s(late);
                x[0] = static_cast<float>(c.rank());
                allreduce(g, hitch::view(x), reduce_op::sum, ring{});  // call #1: rank p-1 comes late
                results[static_cast<std::size_t>(c.rank())] = x[0];
                waited[static_cast<std::size_t>(c.rank())] = g.waited().count() - before;
            },
            with_timeout(hitch_test::scaled_seconds(10)));
        INFO("p = " << p);
        for (const float v : results) CHECK(v == static_cast<float>(p * (p - 1) / 2));
        const auto reports = seen.take();
        REQUIRE(reports.size() == 1);
        const hitch::stall_report& r = reports.front();
        CHECK(r.rank == 0);
        CHECK(r.size == p);
        CHECK(r.operation == "allreduce");
        CHECK(r.schedule == "ring");
        CHECK(r.sequence == 1);
        CHECK(r.waited.count() >= warning);
        CHECK(r.waited.count() < late);
        CHECK(r.deadline.count() == Approx(hitch_test::scaled_seconds(10)));
        REQUIRE(r.absent_ranks() == std::vector<int>{p - 1});
        CHECK(r.absent[0].answered);
        CHECK(!r.absent[0].in_call);
        CHECK(r.absent[0].calls_done == 1);
        const std::string line = r.message();
        INFO(line);
        CHECK(line.find("hitch: stall: allreduce #1 (ring) on rank 0 of " + std::to_string(p)) == 0);
        CHECK(line.find("rank " + std::to_string(p - 1) + " has not arrived (its last call was #0)") !=
              std::string::npos);
        // The late rank's peers waited about its delay in the agreement round; the late rank almost nothing.
        for (int k = 0; k + 1 < p; ++k) CHECK(waited[static_cast<std::size_t>(k)] > 0.9 * late);
        CHECK(waited[static_cast<std::size_t>(p - 1)] < 0.25 * late);
    }
}

TEST_CASE("stall: with every_rank each waiting rank reports; without an observer nothing runs", "[allreduce][stall]") {
    const double warning = hitch_test::scaled_seconds(0.3);
    collected seen;
    run_local(
        3,
        [&](local& c) {
            hitch::stall_options stall;
            stall.warning_s = warning;
            stall.every_rank = true;
            group g(c, seen.observer(), stall);
            std::vector<double> x{1.0};
            if (c.rank() == 1) sleep_s(hitch_test::scaled_seconds(0.5));
            allreduce(g, hitch::view(x), reduce_op::sum);
        },
        with_timeout(hitch_test::scaled_seconds(10)));
    const auto reports = seen.take();
    REQUIRE(reports.size() == 2);
    std::vector<int> reporters;
    for (const auto& r : reports) {
        reporters.push_back(r.rank);
        CHECK(r.sequence == 0);
        CHECK(r.absent_ranks() == std::vector<int>{1});
        CHECK(r.message().find("rank 1 has not arrived (no call yet)") != std::string::npos);
    }
    std::sort(reporters.begin(), reporters.end());
    CHECK(reporters == std::vector<int>{0, 2});

    // No observer anywhere (or the threshold 0): no inspector thread, nothing reported, the calls as before.
    run_local(3, [&](local& c) {
        hitch::stall_options off;
        off.warning_s = 0.0;
        group a(c);
        group b(c, seen.observer(), off);
        expect(!a.inspects_stalls() && !b.inspects_stalls(), "no inspector");
        std::vector<float> x{1.0f};
        allreduce(a, hitch::view(x), reduce_op::sum);
        allreduce(b, hitch::view(x), reduce_op::sum);
        expect(x[0] == 9.0f, "the sums");
    });
    CHECK(seen.take().size() == 2);
}

TEST_CASE("stall: an observer on rank 0 alone; the other ranks answer without one", "[allreduce][stall]") {
    collected seen;
    run_local(
        2,
        [&](local& c) {
            hitch::stall_options stall;
            stall.warning_s = hitch_test::scaled_seconds(0.3);
            group g(c, c.rank() == 0 ? seen.observer() : hitch::observer{}, stall);
            expect(g.inspects_stalls(), "an inspector");  // rank 1 runs the service that answers rank 0
            std::vector<float> x{1.0f};
            if (c.rank() == 1) sleep_s(hitch_test::scaled_seconds(0.5));
            allreduce(g, hitch::view(x), reduce_op::sum);
        },
        with_timeout(hitch_test::scaled_seconds(10)));
    const auto reports = seen.take();
    REQUIRE(reports.size() == 1);
    CHECK(reports[0].absent_ranks() == std::vector<int>{1});
    CHECK(reports[0].absent[0].answered);
}

TEST_CASE("stall: a rank that never comes is reported until the deadline, which then names it", "[allreduce][stall]") {
    const double warning = hitch_test::scaled_seconds(0.2);
    const double timeout = hitch_test::scaled_seconds(1.0);  // reports at 0.2, 0.4 and 0.8
    collected seen;
    std::atomic<int> gave_up{0};
    std::vector<std::string> errors(4);
    run_local(
        4,
        [&](local& c) {
            hitch::stall_options stall;
            stall.warning_s = warning;
            group g(c, seen.observer(), stall);
            std::vector<float> x{1.0f};
            if (c.rank() == 3) {  // never comes; its group stays, so its inspector answers
                while (gave_up.load() < 3) sleep_s(0.01);
                return;
            }
            try {
                allreduce(g, hitch::view(x), reduce_op::sum);
                errors[static_cast<std::size_t>(c.rank())] = "no error";
            } catch (const hitch::timeout_error& e) {
                errors[static_cast<std::size_t>(c.rank())] = e.what();
            }
            ++gave_up;
        },
        with_timeout(timeout));
    for (int k = 0; k < 3; ++k) {
        INFO("rank " << k << ": " << errors[static_cast<std::size_t>(k)]);
        CHECK(errors[static_cast<std::size_t>(k)].find("allreduce #0") != std::string::npos);
        CHECK(errors[static_cast<std::size_t>(k)].find("rank 3 did not arrive") != std::string::npos);
    }
    const auto reports = seen.take();
    CHECK(reports.size() >= 2);
    CHECK(reports.size() <= 3);
    double last = 0.0;
    for (const auto& r : reports) {
        INFO(r.message());
        CHECK(r.rank == 0);
        CHECK(r.sequence == 0);
        CHECK(r.absent_ranks() == std::vector<int>{3});
        CHECK(r.waited.count() > last);  // at the threshold, then twice it ...
        CHECK(r.waited.count() < timeout);
        last = r.waited.count();
    }
}

TEST_CASE("stall: a rank still in an earlier call, and a rank whose group is gone", "[allreduce][stall]") {
    const double warning = hitch_test::scaled_seconds(0.25);
    collected seen;
    std::atomic<bool> reported{false};
    run_local(
        3,
        [&](local& c) {
            hitch::stall_options stall;
            stall.warning_s = warning;
            hitch::observer watch = seen.observer();
            const auto keep = watch.stall;
            watch.stall = [&reported, keep](const hitch::stall_report& r) {
                keep(r);
                reported = true;
            };
            group g(c, watch, stall);
            // Call #0 (unchecked, nothing to exchange): rank 2 stays inside it until rank 0 has reported call #1,
            // which ranks 0 and 1 entered at once.
            call_options unchecked;
            unchecked.check = false;
            g.run(
                unchecked,
                [] {
                    call_descriptor d;
                    d.operation = static_cast<std::uint8_t>(operation::broadcast);
                    d.set_schedule("held");
                    return d;
                },
                [&](transport<local>&, const call_descriptor&) {
                    if (c.rank() == 2)
                        while (!reported.load()) sleep_s(0.01);
                });
            std::vector<float> x{1.0f};
            allreduce(g, hitch::view(x), reduce_op::sum);
            expect(x[0] == 3.0f, "the sum");
        },
        with_timeout(hitch_test::scaled_seconds(10)));
    const auto reports = seen.take();
    REQUIRE(reports.size() == 1);
    const hitch::stall_report& r = reports.front();
    CHECK(r.sequence == 1);
    REQUIRE(r.absent_ranks() == std::vector<int>{2});
    CHECK(r.absent[0].answered);
    CHECK(r.absent[0].in_call);
    CHECK(r.absent[0].in_call_sequence == 0);
    CHECK(r.absent[0].in_operation == "broadcast");
    CHECK(r.message().find("rank 2 has not arrived (still in broadcast #0)") != std::string::npos);

    // A rank whose group is gone does not answer: "no answer".
    collected silent;
    std::atomic<int> gone{0};
    run_local(
        2,
        [&](local& c) {
            hitch::stall_options stall;
            stall.warning_s = warning;
            std::optional<group<local>> g;
            g.emplace(c, silent.observer(), stall);
            if (c.rank() == 1) {
                g.reset();
                gone = 1;
                return;
            }
            while (gone.load() == 0) sleep_s(0.001);
            std::vector<float> x{1.0f};
            call_options o;
            o.timeout_s = hitch_test::scaled_seconds(1.0);
            try {
                allreduce(*g, hitch::view(x), reduce_op::sum, ring{}, o);
                expect(false, "a timeout");
            } catch (const hitch::timeout_error&) {}
        },
        with_timeout(hitch_test::scaled_seconds(10)));
    const auto unanswered = silent.take();
    REQUIRE(!unanswered.empty());
    CHECK(!unanswered[0].absent[0].answered);
    CHECK(unanswered[0].message().find("rank 1 has not arrived (no answer)") != std::string::npos);
}

TEST_CASE("stall: the threshold is a validated option", "[allreduce][stall]") {
    hitch::stall_options o;
    o.warning_s = -1.0;
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("warning_s") && Catch::Contains("[0, 1e+09]"));
    run_local(1, [&](local& c) { CHECK_THROWS_AS(group<local>(c, {}, o), hitch::config_error); });
    o.warning_s = 2.5;
    CHECK_NOTHROW(o.validate());
}
