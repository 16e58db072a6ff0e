// The sparse exchanges over comm::mpi (2, 3 and 4 processes; also under HITCH_EMULATE_NODES=2): exact data against
// decode-then-sum, random data bit for bit and byte for byte against the serial simulation, hierarchical over the
// communicator's node layout and over a non-consecutive one, NaN on one rank.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "hitch/comm/mpi.hpp"
#include "hitch/compress/dgc.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/threshold.hpp"
#include "hitch/compress/topk.hpp"
#include "sparse_exchanges_suite.hpp"

namespace hc = hitch::compress;
using hitch_test::sparse_exchange;

namespace {

std::vector<sparse_exchange> exchanges_for(hitch::comm::mpi& comm) {
    std::vector<int> alternating;
    for (int r = 0; r < comm.size(); ++r) alternating.push_back(r % 2);
    if (const char* e = std::getenv("HITCH_EMULATE_NODES"); e != nullptr && std::string(e) == "2")
        hitch_test::require(comm.node_layout().nodes == 2, "HITCH_EMULATE_NODES=2 gives two nodes");
    return {{false, {}}, {true, comm.node_layout()}, {true, hitch_test::layout_of(alternating)}};
}

}  // namespace

TEST_CASE("sparse exchanges over MPI: exact data and the serial simulation", "[compress][sparse][mpi]") {
    hitch::comm::mpi comm;
    for (const auto& x : exchanges_for(comm)) {
        INFO(x.label());
        REQUIRE_NOTHROW(hitch_test::sparse_exact_equals_decode_then_sum(comm, hc::topk({.density = 0.02}), 4099, x, 3));
        REQUIRE_NOTHROW(hitch_test::sparse_exact_equals_decode_then_sum(comm, hc::topk({.density = 0.4}), 4099, x, 2));
        REQUIRE_NOTHROW(
            hitch_test::sparse_exact_equals_decode_then_sum(comm, hc::threshold({.tau = 0.875f}), 4099, x, 2));
        REQUIRE_NOTHROW(hitch_test::sparse_matches_simulation(comm, hc::topk({.density = 0.01}), 4099, x, 3, 0));
        REQUIRE_NOTHROW(hitch_test::sparse_matches_simulation(comm, hc::topk({.density = 0.4}), 4099, x, 2, 1));
        REQUIRE_NOTHROW(hitch_test::sparse_matches_simulation(comm, hc::threshold({.tau = 1e-3f}), 4099, x, 2));
        REQUIRE_NOTHROW(hitch_test::sparse_matches_simulation(comm, hc::dgc({.final_density = 0.02}), 4099, x, 3));
        REQUIRE_NOTHROW(hitch_test::sparse_matches_simulation(
            comm, hc::error_feedback<hc::topk>(hc::topk({.density = 0.05})), 4099, x, 3));
    }
}

TEST_CASE("sparse exchanges over MPI: a rank with NaN stops every rank", "[compress][sparse][mpi][failure]") {
    hitch::comm::mpi comm;
    for (const auto& x : exchanges_for(comm)) {
        INFO(x.label());
        REQUIRE_NOTHROW(hitch_test::sparse_failure_reaches_every_rank(
            comm, hc::error_feedback<hc::topk>(hc::topk({.density = 0.05})), 999, x,
            [](const auto& st) { return st.codec.residual; }));
        REQUIRE_NOTHROW(hitch_test::sparse_failure_reaches_every_rank(comm, hc::dgc({.final_density = 0.02}), 999, x,
                                                                      [](const auto& st) { return st.codec.v; }));
    }
}
