// Block momentum (BMUF) for local SGD over comm::mpi (2 and 3 processes) against the serial formula.
#include <catch2/catch.hpp>

#include "bmuf_reference.hpp"
#include "hitch/allreduce/native.hpp"
#include "hitch/comm/mpi.hpp"

namespace bmuf = hitch_test::bmuf;

TEST_CASE("BMUF over MPI equals the serial formula over several periods", "[sync][bmuf][mpi]") {
    hitch::comm::mpi comm;
    for (const hitch::sync::local_sgd::options_type& o : bmuf::sweep(3)) {
        CAPTURE(o.block_momentum, o.block_learning_rate, o.nesterov);
        bmuf::setup c;
        c.ranks = comm.size();
        c.sync = o;
        REQUIRE_NOTHROW(bmuf::check_against_reference(comm, c));
    }
}
