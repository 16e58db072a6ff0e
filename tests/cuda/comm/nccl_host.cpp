// cuda::nccl's engine on the host, over the fake NCCL (fake_nccl.hpp): the communicator suite on 1 to 4 ranks with
// the bytes over (fake) NCCL, inline on the control channel, and staged through device memory; messages between
// host and device buffers; the ordering of NCCL transfers under random patterns; splits; requests dropped while
// pending.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../../comm/suite.hpp"
#include "fake_nccl.hpp"
#include "harness.hpp"
#include "hitch/cuda/nccl/communicator.hpp"

using hitch::cuda::nccl;
using hitch_test::expect;
using hitch_test::fake_nccl_options;
using hitch_test::fake_nccl_world;
using hitch_test::run_fake_nccl;

namespace {

/// The communicator suite of tests/comm/suite.hpp.
void suite(nccl& comm) {
    hitch_test::ordered_delivery(comm, 12);
    hitch_test::message_sizes(comm, {0, 1, 4, 7, 4096, 65540, 1 << 20});
    hitch_test::many_outstanding(comm, 120);
    hitch_test::split_groups(comm);
    hitch_test::any_source_with_probe(comm);
    hitch_test::bad_arguments(comm);
    hitch_test::size_mismatch_reported(comm);
}

fake_nccl_options host_memory() {
    fake_nccl_options o;
    o.all_device = false;
    return o;
}

}  // namespace

TEST_CASE("cuda::nccl over fake NCCL passes the communicator suite, bytes over NCCL", "[cuda][nccl]") {
    for (int p = 1; p <= 4; ++p) {
        CAPTURE(p);
        REQUIRE_NOTHROW(run_fake_nccl(p, [](nccl& comm, fake_nccl_world& world) {
            suite(comm);
            comm.barrier();
            expect(world.bytes_sent(comm.rank()) > 0 || comm.size() == 1 ? true : false,
                   "device messages must travel over NCCL");
            expect(world.groups_started(comm.rank()) > 0, "NCCL groups were issued");
        }));
    }
}

TEST_CASE("cuda::nccl over fake NCCL passes the communicator suite, host bytes inline", "[cuda][nccl]") {
    for (int p = 1; p <= 4; ++p) {
        CAPTURE(p);
        REQUIRE_NOTHROW(run_fake_nccl(
            p,
            [](nccl& comm, fake_nccl_world& world) {
                suite(comm);
                comm.barrier();
                expect(world.groups_started(comm.rank()) == 0, "host messages stay on the control channel");
            },
            host_memory()));
    }
}

TEST_CASE("cuda::nccl over fake NCCL passes the communicator suite, host bytes staged over NCCL", "[cuda][nccl]") {
    hitch::cuda::nccl_options staged;
    staged.stage_host_bytes = 0;
    for (int p = 1; p <= 3; ++p) {
        CAPTURE(p);
        REQUIRE_NOTHROW(run_fake_nccl(
            p,
            [](nccl& comm, fake_nccl_world& world) {
                suite(comm);
                comm.barrier();
                expect(comm.size() == 1 || world.bytes_sent(comm.rank()) > 0, "staged host messages use NCCL");
            },
            host_memory(), staged));
    }
}

TEST_CASE("cuda::nccl over fake NCCL: a receive nobody sends to times out and the communicator goes on",
          "[cuda][nccl]") {
    REQUIRE_NOTHROW(run_fake_nccl(2, [](nccl& comm, fake_nccl_world&) { hitch_test::receive_times_out(comm, 0.3); }));
    REQUIRE_NOTHROW(run_fake_nccl(
        2, [](nccl& comm, fake_nccl_world&) { hitch_test::receive_times_out(comm, 0.3); }, host_memory()));
}
