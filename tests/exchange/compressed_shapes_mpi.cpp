// The compressed halving-doubling and hierarchical exchanges over comm::mpi (2, 3 and 4 processes; also under
// HITCH_EMULATE_NODES=2, where the hierarchical shape takes the emulated nodes of node_layout_of): bit for bit
// against their serial simulations, the exact sum on one node, and the failure protocol.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <vector>

#include "compressed_shapes_suite.hpp"
#include "hitch/comm/mpi.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/terngrad.hpp"

namespace hc = hitch::compress;
using hitch_test::shape;

namespace {

hitch::node_layout alternating(int p) {
    hitch::node_layout l;
    for (int r = 0; r < p; ++r) l.node_of_rank.push_back(r % 2);
    l.nodes = p >= 2 ? 2 : 1;
    return l;
}

}  // namespace

TEST_CASE("compressed shapes over MPI equal their serial simulations", "[compress][aggregate][shapes][mpi]") {
    hitch::comm::mpi comm;
    const hitch::node_layout machine = hitch::node_layout_of(comm);
    const hitch::node_layout interleaved = alternating(comm.size());
    if (const char* emulated = std::getenv("HITCH_EMULATE_NODES"); emulated != nullptr && *emulated != '\0')
        REQUIRE(machine.nodes == std::atoi(emulated));
    for (std::size_t n : {std::size_t{5}, std::size_t{3001}}) {
        INFO(n << " elements");
        REQUIRE_NOTHROW(hitch_test::shape_matches_simulation(comm, shape::halving_doubling, hc::onebit{}, n, machine));
        REQUIRE_NOTHROW(hitch_test::shape_matches_simulation(comm, shape::halving_doubling, hc::qsgd{}, n, machine));
        REQUIRE_NOTHROW(
            hitch_test::shape_matches_simulation(comm, shape::halving_doubling, hc::terngrad{}, n, machine));
        REQUIRE_NOTHROW(hitch_test::shape_matches_simulation(comm, shape::halving_doubling,
                                                             hc::error_feedback<hc::qsgd>{}, n, machine));
        for (const hitch::node_layout& nodes : {machine, interleaved}) {
            INFO(nodes.nodes << " nodes");
            REQUIRE_NOTHROW(hitch_test::shape_matches_simulation(comm, shape::hierarchical, hc::onebit{}, n, nodes));
            REQUIRE_NOTHROW(
                hitch_test::shape_matches_simulation(comm, shape::hierarchical, hc::qsgd{}, n, nodes, false));
            REQUIRE_NOTHROW(hitch_test::shape_matches_simulation(comm, shape::hierarchical, hc::terngrad{}, n, nodes));
            REQUIRE_NOTHROW(hitch_test::shape_matches_simulation(comm, shape::hierarchical,
                                                                 hc::error_feedback<hc::qsgd>{}, n, nodes, false));
        }
    }
    REQUIRE_NOTHROW(hitch_test::one_node_is_exact(comm, hc::onebit{}, 1001));
}

TEST_CASE("compressed shapes over MPI: mismatched sizes and NaN fail on every rank and change no state",
          "[compress][aggregate][shapes][mpi][failure]") {
    hitch::comm::mpi comm;
    const hitch::node_layout nodes = alternating(comm.size());
    for (shape sh : {shape::halving_doubling, shape::hierarchical}) {
        REQUIRE_NOTHROW(hitch_test::shape_rejects_mismatched_sizes(comm, sh, hc::onebit{}, nodes));
        for (int failing : {0, comm.size() - 1}) {
            REQUIRE_NOTHROW(hitch_test::shape_failure_changes_nothing(comm, sh, hc::onebit{}, 999, nodes, failing));
            REQUIRE_NOTHROW(hitch_test::shape_failure_changes_nothing(comm, sh, hc::error_feedback<hc::qsgd>{}, 999,
                                                                      nodes, failing));
        }
    }
}
