// The parameter-server policies over comm::mpi (processes): soft sync at c = workers and backup workers at b = 0
// equal hard sync, asynchronous SGD's deterministic staleness is N - 1, and SSP's bound holds, checked from every
// rank's step times (one monotonic clock for the processes of one machine).
#include <catch2/catch.hpp>

#include <mpi.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "hitch/allreduce/native.hpp"
#include "hitch/comm/mpi.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/async.hpp"
#include "hitch/sync/backup_workers.hpp"
#include "hitch/sync/easgd.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/sync/soft.hpp"
#include "hitch/sync/ssp.hpp"
#include "hitch/train/data_parallel.hpp"
#include "model.hpp"

using hitch::comm::mpi;
using hitch_test::quad_model;

namespace {

const std::vector<std::size_t> sizes{5, 300, 1, 77};

template <class P>
std::vector<float> train(mpi& comm, const typename P::options_type& sync, int steps) {
    using dp_t = hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, P>;
    quad_model m(sizes, comm.rank());
    hitch::cpu dev;
    typename dp_t::options o;
    o.learning_rate = hitch::lr::constant({0.1});
    o.sync = sync;
    dp_t dp(comm, dev, m.layers(), o);
    for (int s = 0; s < steps; ++s) {
        m.gradients(s);
        dp.step();
    }
    dp.finish();
    return m.flat();
}

void require_close(const std::vector<float>& got, const std::vector<float>& want) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
        if (std::abs(got[i] - want[i]) > 1e-5f * (1.0f + std::abs(want[i])))
            FAIL("element " << i << ": " << got[i] << " != " << want[i]);
}

}  // namespace

TEST_CASE("over MPI: soft at c = workers and backup workers at b = 0 equal hard sync", "[sync][mpi]") {
    mpi comm;
    const auto hard = train<hitch::sync::hard>(comm, {}, 5);
    hitch::sync::soft::options_type soft;
    soft.gradients_per_update = 0;
    soft.scale_by_staleness = false;
    soft.server.deterministic = true;
    require_close(train<hitch::sync::soft>(comm, soft, 5), hard);
    hitch::sync::backup_workers::options_type backup;
    backup.backups = 0;
    backup.server.sharding = hitch::sync::shard_by::range;
    require_close(train<hitch::sync::backup_workers>(comm, backup, 5), hard);
}

TEST_CASE("over MPI: asynchronous SGD in deterministic order has staleness N - 1", "[sync][mpi]") {
    mpi comm;
    using dp_t = hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::async>;
    quad_model m(sizes, comm.rank());
    hitch::cpu dev;
    dp_t::options o;
    o.learning_rate = hitch::lr::constant({0.01});
    o.sync.server.deterministic = true;
    dp_t dp(comm, dev, m.layers(), o);
    for (int s = 0; s < 20; ++s) {
        m.gradients(s);
        dp.step();
    }
    dp.finish();
    const auto h = dp.staleness_histogram();
    const auto p = static_cast<std::size_t>(comm.size());
    REQUIRE(h.size() == p);
    REQUIRE(h[p - 1] >= 20 - p);
}

TEST_CASE("over MPI: SSP never lets a worker start a clock more than s ahead of the slowest", "[sync][mpi]") {
    mpi comm;
    const int p = comm.size(), steps = 16;
    for (std::uint64_t s : {std::uint64_t{0}, std::uint64_t{2}}) {
        CAPTURE(s);
        using dp_t = hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::ssp>;
        quad_model m(sizes, comm.rank());
        hitch::cpu dev;
        dp_t::options o;
        o.sync.staleness_bound = s;
        dp_t dp(comm, dev, m.layers(), o);
        // enter[t]: this rank begins pushing clock t; leave[t]: its step t returned (it may start clock t + 1).
        std::vector<double> enter(steps), leave(steps);
        auto now = [] {
            return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
        };
        for (int t = 0; t < steps; ++t) {
            m.gradients(t);
            if (comm.rank() == p - 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
            enter[static_cast<std::size_t>(t)] = now();
            dp.step();
            leave[static_cast<std::size_t>(t)] = now();
        }
        dp.finish();
        std::vector<double> all_enter(static_cast<std::size_t>(p * steps)), all_leave(all_enter.size());
        MPI_Allgather(enter.data(), steps, MPI_DOUBLE, all_enter.data(), steps, MPI_DOUBLE, MPI_COMM_WORLD);
        MPI_Allgather(leave.data(), steps, MPI_DOUBLE, all_leave.data(), steps, MPI_DOUBLE, MPI_COMM_WORLD);
        // A worker leaving step t - 1 starts clock t; by then every worker has pushed clock t - s - 1.
        for (int w = 0; w < p; ++w)
            for (int t = static_cast<int>(s) + 1; t < steps; ++t)
                for (int v = 0; v < p; ++v)
                    REQUIRE(all_enter[static_cast<std::size_t>(v * steps + t - static_cast<int>(s) - 1)] <=
                            all_leave[static_cast<std::size_t>(w * steps + t - 1)]);
    }
}

TEST_CASE("over MPI: a dedicated server rank serves while the others train", "[sync][mpi]") {
    mpi comm;
    if (comm.size() < 3) return;  // one server and at least two workers
    using dp_t = hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::async>;
    quad_model m(sizes, comm.rank());
    hitch::cpu dev;
    dp_t::options o;
    o.learning_rate = hitch::lr::constant({0.01});
    o.sync.server.deterministic = true;
    o.sync.server.placement = hitch::sync::server_placement::dedicated;
    o.sync.server.dedicated_servers = 1;
    dp_t dp(comm, dev, m.layers(), o);
    const int workers = comm.size() - 1;
    REQUIRE(dp.worker_count() == workers);
    REQUIRE(dp.serves_only() == (comm.rank() == workers));
    if (dp.serves_only()) {
        REQUIRE_THROWS_AS(dp.step(), hitch::config_error);
        dp.serve();
        return;
    }
    for (int s = 0; s < 12; ++s) {
        m.gradients(s);
        dp.step();
    }
    dp.finish();
    const auto h = dp.staleness_histogram();
    REQUIRE(h.size() == static_cast<std::size_t>(workers));
    REQUIRE(h[static_cast<std::size_t>(workers - 1)] >= static_cast<std::uint64_t>(12 - workers));
}

TEST_CASE("over MPI: backup workers drop a slow worker's gradients; easgd's synchronous centre", "[sync][mpi]") {
    mpi comm;
    const int p = comm.size();
    {
        using dp_t = hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::backup_workers>;
        quad_model m(sizes, comm.rank());
        hitch::cpu dev;
        dp_t::options o;
        o.sync.backups = 1;
        dp_t dp(comm, dev, m.layers(), o);
        for (int s = 0; s < 10; ++s) {
            m.gradients(s);
            if (comm.rank() == p - 1) std::this_thread::sleep_for(std::chrono::milliseconds(60));
            dp.step();
        }
        const auto dropped = dp.dropped_gradients();
        dp.finish();
        if (comm.rank() == p - 1)
            REQUIRE(dropped >= 1);
        else
            REQUIRE(dropped == 0);
    }
    {
        // With a learning rate of 0 each rank only moves towards the centre, which starts at the mean of the
        // initial parameters: x_r - alpha (x_r - mean).
        using dp_t = hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::easgd>;
        quad_model m(sizes, comm.rank(), /*differ=*/true);
        hitch::cpu dev;
        dp_t::options o;
        o.learning_rate = hitch::lr::constant({0.0});
        o.sync.kind = hitch::sync::easgd::form::synchronous;
        o.sync.period = 1;
        o.sync.alpha = 0.25;
        o.broadcast_parameters = false;  // the ranks start apart on purpose
        dp_t dp(comm, dev, m.layers(), o);
        const auto x = m.flat();
        m.gradients(0);
        dp.step();
        std::vector<float> mean(x.size(), 0.0f);
        for (int r = 0; r < p; ++r) {
            const auto xr = quad_model(sizes, r, true).flat();
            for (std::size_t i = 0; i < x.size(); ++i) mean[i] += xr[i];
        }
        std::vector<float> want(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) want[i] = x[i] - 0.25f * (x[i] - mean[i] / static_cast<float>(p));
        require_close(m.flat(), want);
    }
}
