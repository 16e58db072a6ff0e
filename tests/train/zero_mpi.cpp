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

namespace {

template <class O>
void check(hitch::comm::mpi& comm, bool elementwise, const typename O::options_type& opt = {}) {
    const hitch_test::outcome plain = hitch_test::train_zero<O>(comm, 0, 4, opt);
    for (unsigned zero : {1u, 2u}) {
        CAPTURE(O::name, comm.size(), zero);
        const hitch_test::outcome sharded = hitch_test::train_zero<O>(comm, zero, 4, opt);
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
