// comm::simulated at scale: 1,024 ranks (fibers) run a 1 MiB all-reduce to completion within a minute of wall time on
// a 2-core machine, each of the ring, Rabenseifner and recursive doubling, with the right sums on every rank and the
// virtual time of the alpha-beta formula.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <vector>

#include "../time_scale.hpp"
#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/simulated.hpp"
#include "suite.hpp"

using hitch::seconds_f;
using hitch::comm::simulated;
using hitch::comm::simulated_network;
namespace ar = hitch::allreduce;

namespace {

constexpr double alpha = 5e-6;
constexpr double beta = 1e-10;
constexpr int p = 1024;
constexpr std::size_t count = (std::size_t{1} << 20) / sizeof(float);

template <class Schedule>
double run(const Schedule& schedule, double expected) {
    const auto start = std::chrono::steady_clock::now();
    const auto times =
        hitch::comm::run_simulated(p, simulated_network::single_switch({alpha, 1.0 / beta}), [&](simulated& comm) {
            ar::group g(comm);
            std::vector<float> data(count, static_cast<float>(comm.rank() % 8));
            ar::call_options o;
            o.check = false;
            comm.compute(seconds_f(1.0 - comm.virtual_time().count()));
            ar::allreduce(g, hitch::view(data), ar::reduce_op::sum, schedule, o);
            const float want = 28.0f * (p / 8);  // (0 + 1 + ... + 7) per 8 ranks
            for (std::size_t i = 0; i < count; i += 997) hitch_test::expect(data[i] == want, "sum");
            return comm.virtual_time().count() - 1.0;
        });
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (double t : times) CHECK(std::abs(t - expected) < 0.5e-12);
    return wall;
}

}  // namespace

TEST_CASE("comm::simulated: 1,024 ranks all-reduce 1 MiB within a minute of wall time", "[comm][simulated][scale]") {
    const double n = count * sizeof(float);
    const double lg = std::log2(p);
    // The ring: 2,046 steps on every rank, two million turns between ranks (fibers: a turn is a context switch).
    const double ring_wall = run(ar::ring{}, 2.0 * (p - 1) * alpha + 2.0 * (p - 1) / p * n * beta);
    WARN("ring, 1024 ranks, 1 MiB: " << ring_wall << " s of wall time");
    CHECK(ring_wall < hitch_test::scaled_seconds(60.0));  // (longer under a sanitizer)
    const double rab_wall = run(ar::rabenseifner{}, 2 * lg * alpha + 2.0 * (p - 1) / p * n * beta);
    WARN("rabenseifner, 1024 ranks, 1 MiB: " << rab_wall << " s of wall time");
    CHECK(rab_wall < hitch_test::scaled_seconds(60.0));
    const double rd_wall = run(ar::recursive_doubling{}, lg * (alpha + n * beta));
    WARN("recursive_doubling, 1024 ranks, 1 MiB: " << rd_wall << " s of wall time");
    CHECK(rd_wall < hitch_test::scaled_seconds(60.0));
}
