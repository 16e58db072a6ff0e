// The stall inspector over comm::mpi (2 and 3 processes): the last rank comes to an all-reduce later than the
// threshold but before the deadline; rank 0 reports it exactly once (operation, call number, rank), on the staged
// path and on the message path, and the call succeeds. The late rank's peers waited (group::waited) about its delay,
// the late rank itself almost nothing. Then a rank that never comes: reports, then the timeout naming it.
#include <catch2/catch.hpp>

#include <mpi.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../time_scale.hpp"
#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/mpi.hpp"
#include "hitch/core/observer.hpp"

using namespace hitch::allreduce;
using hitch::comm::mpi;

namespace {

bool everywhere(bool ok) {
    int mine = ok ? 1 : 0, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all == 1;
}

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

}  // namespace

TEST_CASE("stall over MPI: a late rank is reported once by rank 0; its peers waited for it",
          "[allreduce][mpi][stall]") {
    hitch::comm::mpi_options mo;
    mo.timeout_s = hitch_test::scaled_seconds(20);
    mpi comm(MPI_COMM_WORLD, mo);
    const int p = comm.size(), me = comm.rank();
    const double warning = hitch_test::scaled_seconds(0.4);
    const double late = hitch_test::scaled_seconds(0.65);
    for (const bool shared_memory : {true, false}) {
        collected seen;
        hitch::stall_options stall;
        stall.warning_s = warning;
        group g(comm, seen.observer(), stall);
        REQUIRE(g.inspects_stalls());
        call_options o;
        o.shared_memory = shared_memory;
        std::vector<float> x(1000, 1.0f);
        allreduce(g, hitch::view(x), reduce_op::sum, ring{}, o);  // call #0 on time
        const double before = g.waited().count();
        if (me == p - 1) sleep_s(late);
        for (auto& v : x) v = static_cast<float>(me);
        allreduce(g, hitch::view(x), reduce_op::sum, ring{}, o);  // call #1: the last rank is late
        const double waited = g.waited().count() - before;
        bool ok = true;
        for (const float v : x) ok = ok && v == static_cast<float>(p * (p - 1) / 2);
        REQUIRE(everywhere(ok));
        const auto reports = seen.take();
        INFO("rank " << me << (shared_memory ? " (shared memory)" : " (messages)") << ": " << reports.size()
                     << " reports, waited " << waited << " s");
        bool right = true;
        if (me == 0) {
            right = reports.size() == 1;
            if (right) {
                const hitch::stall_report& r = reports.front();
                INFO(r.message());
                right = r.sequence == 1 && r.operation == "allreduce" && r.absent_ranks() == std::vector<int>{p - 1} &&
                        r.absent[0].answered && r.waited.count() >= warning &&
                        r.message().find("hitch: stall: allreduce #1 (ring) on rank 0 of " + std::to_string(p)) == 0;
                CHECK(right);
            }
        } else {
            right = reports.empty();
        }
        CHECK(right);
        REQUIRE(everywhere(right));
        const bool waited_right = me == p - 1 ? waited < 0.25 * late : waited > 0.9 * late;
        CHECK(waited_right);
        REQUIRE(everywhere(waited_right));
    }
}

TEST_CASE("stall over MPI: a rank that never comes is reported, then the deadline names it",
          "[allreduce][mpi][stall]") {
    mpi comm;
    const int p = comm.size(), me = comm.rank();
    collected seen;
    hitch::stall_options stall;
    stall.warning_s = hitch_test::scaled_seconds(0.2);
    const double timeout = hitch_test::scaled_seconds(1.0);
    std::string error = "no error";
    {
        group g(comm, seen.observer(), stall);
        if (me != p - 1) {
            call_options o;
            o.timeout_s = timeout;
            std::vector<float> x(10, 1.0f);
            try {
                allreduce(g, hitch::view(x), reduce_op::sum, ring{}, o);
            } catch (const hitch::timeout_error& e) {
                error = e.what();
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);  // the absent rank's inspector answers until every other rank has given up
    }
    const auto reports = seen.take();
    bool right = true;
    if (me != p - 1) {
        INFO(error);
        right = error.find("allreduce #0") != std::string::npos &&
                error.find("rank " + std::to_string(p - 1) + " did not arrive") != std::string::npos;
        CHECK(right);
    }
    if (me == 0) {
        right = right && !reports.empty() && reports.size() <= 3;
        for (const auto& r : reports) {
            INFO(r.message());
            right = right && r.absent_ranks() == std::vector<int>{p - 1} && r.absent[0].answered &&
                    !r.absent[0].in_call && r.sequence == 0;
        }
        CHECK(right);
    } else {
        CHECK(reports.empty());
        right = right && reports.empty();
    }
    REQUIRE(everywhere(right));
}
