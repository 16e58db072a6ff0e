// comm::mpi under mpiexec: the communicator suite, isolation from the user's traffic, MPI errors, and the node
// layout.
#include <catch2/catch.hpp>

#include <mpi.h>

#include <vector>

#include "hitch/comm/agree.hpp"
#include "hitch/comm/mpi.hpp"
#include "hitch/core/node_layout.hpp"
#include "suite.hpp"

using hitch::comm::mpi;

TEST_CASE("comm::mpi passes the communicator suite", "[comm][mpi]") {
    mpi comm;
    REQUIRE_NOTHROW(hitch_test::ordered_delivery(comm));
    REQUIRE_NOTHROW(hitch_test::message_sizes(comm, {0, 1, 4, 7, 4096, 65536, 65540, 1 << 20, std::size_t{64} << 20}));
    REQUIRE_NOTHROW(hitch_test::many_outstanding(comm));
    REQUIRE_NOTHROW(hitch_test::split_groups(comm));
    REQUIRE_NOTHROW(hitch_test::any_source_with_probe(comm));
    REQUIRE_NOTHROW(hitch_test::bad_arguments(comm));
    REQUIRE_NOTHROW(hitch_test::size_mismatch_reported(comm));
    REQUIRE_NOTHROW(hitch_test::receive_times_out(comm, 0.3));
}

TEST_CASE("comm::mpi traffic never mixes with the user's", "[comm][mpi]") {
    mpi comm;
    const int p = comm.size(), me = comm.rank();
    const int next = (me + 1) % p, prev = (me - 1 + p) % p;
    int user_out = 1000 + me, hitch_out = 2000 + me, user_in = -1, hitch_in = -1;
    MPI_Request user_send;
    MPI_Isend(&user_out, 1, MPI_INT, next, 5, MPI_COMM_WORLD, &user_send);
    auto s = comm.isend(std::span<const int>(&hitch_out, 1), next, 5);
    comm.irecv(std::span<int>(&hitch_in, 1), prev, 5).wait();  // posted first, must still get hitch's message
    MPI_Recv(&user_in, 1, MPI_INT, prev, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&user_send, MPI_STATUS_IGNORE);
    s.wait();
    CHECK(hitch_in == 2000 + prev);
    CHECK(user_in == 1000 + prev);
}

TEST_CASE("comm::mpi: a second environment is a no-op, and bad options are config_error", "[comm][mpi]") {
    hitch::comm::mpi_environment again;
    CHECK_FALSE(again.owns());
    CHECK(again.thread_level() >= MPI_THREAD_SINGLE);
    hitch::comm::mpi_options bad;
    bad.timeout_s = -1;
    CHECK_THROWS_WITH(mpi(MPI_COMM_WORLD, bad), Catch::Contains("timeout_s = -1"));
    mpi comm;
    CHECK(comm.max_tag() >= 32767);
    CHECK_THROWS_AS(comm.isend(std::span<const int>(), 0, comm.max_tag() + 1 < 0 ? -1 : -2), hitch::config_error);
    comm.barrier();
}

TEST_CASE("comm::mpi: a barrier with a missing rank times out naming it", "[comm][mpi]") {
    mpi comm;
    if (comm.size() < 2) return;
    mpi part = comm.split(0, 0);
    part.set_timeout(hitch::seconds_f(0.5));
    const int last = comm.size() - 1;
    if (comm.rank() != last) {
        CHECK_THROWS_WITH(part.barrier(), Catch::Contains(": rank " + std::to_string(last) + " did not arrive"));
    }
    comm.barrier();  // the full communicator still works afterwards (its own barrier channel)
}

TEST_CASE("comm::mpi: an agreement gather with a missing rank names it on every other rank", "[comm][mpi]") {
    mpi comm;
    if (comm.size() < 2) return;
    mpi part = comm.split(0, 0);
    part.set_timeout(hitch::seconds_f(0.5));
    const int last = comm.size() - 1;
    if (comm.rank() != last) {
        CHECK_THROWS_WITH(hitch::comm::allgather_value(part, comm.rank()),
                          Catch::Contains("allgather on rank " + std::to_string(comm.rank())) &&
                              Catch::Contains(": rank " + std::to_string(last) + " did not arrive"));
    }
    comm.barrier();
}

TEST_CASE("comm::mpi: MPI errors are returned, not fatal, and become comm_error with MPI's error string",
          "[comm][mpi]") {
    mpi comm;
    int x = 0;
    // An invalid tag on the duplicated communicator: with MPI's default handler this would abort the job.
    const int code = MPI_Send(&x, 1, MPI_INT, comm.rank(), -5, comm.native_handle());
    REQUIRE(code != MPI_SUCCESS);
    const std::string mpi_text = hitch::comm::detail::mpi_error_string(code);
    REQUIRE_FALSE(mpi_text.empty());
    CHECK_THROWS_MATCHES(hitch::comm::detail::mpi_check(code, "MPI_Send"), hitch::comm_error,
                         Catch::Matchers::Message("hitch::comm::mpi: MPI_Send failed: " + mpi_text));
    comm.barrier();
}

TEST_CASE("comm::mpi: the node layout matches MPI's shared-memory split, on every rank alike", "[comm][mpi]") {
    STATIC_REQUIRE(hitch::has_node_layout<mpi>);
    STATIC_REQUIRE(hitch::maps_node_memory<mpi>);
    STATIC_REQUIRE_FALSE(hitch::shares_address_space<mpi>);
    mpi comm;
    const hitch::node_layout layout = comm.node_layout();
    REQUIRE(layout.node_of_rank.size() == static_cast<std::size_t>(comm.size()));
    REQUIRE(layout.node_of(0) == 0);  // nodes are numbered by their lowest rank

    // Ranks on my node, by MPI, are exactly the ranks the layout puts on my node.
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(comm.native_handle(), MPI_COMM_TYPE_SHARED, comm.rank(), MPI_INFO_NULL, &node);
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    std::vector<int> mine(static_cast<std::size_t>(node_size));
    const int me = comm.rank();
    MPI_Allgather(&me, 1, MPI_INT, mine.data(), 1, MPI_INT, node);
    MPI_Comm_free(&node);
    CHECK(layout.ranks_on(layout.node_of(me)) == mine);

    // Every rank computed the same layout.
    std::vector<int> all(static_cast<std::size_t>(comm.size()) * layout.node_of_rank.size());
    MPI_Allgather(layout.node_of_rank.data(), comm.size(), MPI_INT, all.data(), comm.size(), MPI_INT,
                  comm.native_handle());
    for (int r = 0; r < comm.size(); ++r)
        CHECK(std::vector<int>(all.begin() + r * comm.size(), all.begin() + (r + 1) * comm.size()) ==
              layout.node_of_rank);

    // A split knows its own layout, over no more nodes than the whole.
    mpi half = comm.split(comm.rank() % 2, comm.rank());
    const hitch::node_layout sub = half.node_layout();
    CHECK(sub.node_of_rank.size() == static_cast<std::size_t>(half.size()));
    CHECK((sub.nodes >= 1 && sub.nodes <= layout.nodes));
}
