// ZeRO stages 1 and 2 over comm::mpi (2, 3 and 4 processes): for every optimizer, the parameters after a few steps
// equal the unsharded run's, and each process holds 1/p of the optimizer state (summed over the processes with
// MPI's own all-reduce: the whole).
#include <catch2/catch.hpp>

#include <mpi.h>

#include <cmath>
#include <vector>

#include "hitch/allreduce/native.hpp"
#include "hitch/comm/mpi.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/adamw.hpp"
#include "hitch/optim/lamb.hpp"
#include "hitch/optim/lars.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/train/data_parallel.hpp"
#include "zero_model.hpp"

using hitch_test::net;

namespace {

struct outcome {
    std::vector<std::vector<float>> w;
    std::size_t state_bytes = 0;
};

template <class O>
outcome train(hitch::comm::mpi& comm, unsigned zero, const typename O::options_type& opt) {
    net m;
    hitch::cpu dev;
    using dp_t = hitch::data_parallel<O, hitch::compress::none, hitch::sync::hard, hitch::allreduce::ring>;
    typename dp_t::options o;
    o.optimizer = opt;
    o.learning_rate = hitch::lr::constant({0.05});
    o.zero_stage = zero;
    o.bucket_bytes = 8192;
    dp_t dp(comm, dev, m.layers(), o);
    for (int s = 0; s < 4; ++s) {
        m.fill(comm.rank(), s);
        for (std::size_t k = hitch_test::shape.size(); k-- > 0;) dp.gradient_ready(k);
        (void)dp.step();
    }
    return {m.w, dp.optimizer_state_bytes()};
}

template <class O>
void check(hitch::comm::mpi& comm, bool elementwise, const typename O::options_type& opt = {}) {
    const outcome plain = train<O>(comm, 0, opt);
    for (unsigned zero : {1u, 2u}) {
        CAPTURE(O::name, comm.size(), zero);
        const outcome sharded = train<O>(comm, zero, opt);
        if (elementwise && zero == 1)
            CHECK(sharded.w == plain.w);
        else
            CHECK(hitch_test::relative_difference(sharded.w, plain.w) <= 1e-5);
        unsigned long long mine = sharded.state_bytes, total = 0;
        MPI_Allreduce(&mine, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        CHECK(total == plain.state_bytes);
        const double share = static_cast<double>(plain.state_bytes) / comm.size();
        CHECK(std::fabs(static_cast<double>(mine) - share) <= 3 * 2 * sizeof(float) * 8);
    }
}

}  // namespace

TEST_CASE("ZeRO over MPI trains as the unsharded optimizer with 1/p of the state", "[train][zero][mpi]") {
    hitch::comm::mpi comm;
    check<hitch::optim::sgd>(comm, true);
    check<hitch::optim::momentum>(comm, true, {.momentum = 0.9f, .nesterov = true});
    check<hitch::optim::adam>(comm, true);
    check<hitch::optim::adamw>(comm, true, {.weight_decay = 0.01f});
    check<hitch::optim::lars_sgd>(comm, false, {.base = {.momentum = 0.9f}, .weight_decay = 1e-3f});
    check<hitch::optim::lamb>(comm, false, {.weight_decay = 0.01f});
}
