// allreduce::automatic over comm::mpi: the first call calibrates outside the caller's deadline (run with
// HITCH_TIMEOUT_S=5 on 5 ranks by ctest), and every rank takes the same decisions.
#include <catch2/catch.hpp>

#include <mpi.h>

#include <cstring>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/allreduce/native.hpp"
#include "hitch/comm/mpi.hpp"

using namespace hitch::allreduce;
using hitch::comm::mpi;

TEST_CASE("comm::mpi: the first automatic all-reduce succeeds inside the communicator's deadline",
          "[allreduce][mpi][automatic]") {
    mpi comm;
    group g(comm);
    std::vector<float> v(1000, 1.0f);
    allreduce(g, hitch::view(v));  // calibrates, then reduces: must not throw timeout_error
    for (float x : v) REQUIRE(x == static_cast<float>(comm.size()));
    REQUIRE(g.constants().has_value());
    const auto profile = automatic::measured_profile(g.state());
    REQUIRE(profile != nullptr);
    std::vector<automatic_profile> all(static_cast<std::size_t>(comm.size()));
    MPI_Allgather(profile.get(), sizeof(automatic_profile), MPI_BYTE, all.data(), sizeof(automatic_profile), MPI_BYTE,
                  MPI_COMM_WORLD);
    for (const auto& o : all) REQUIRE(std::memcmp(&o, profile.get(), sizeof(automatic_profile)) == 0);
    allreduce(g, hitch::view(v));
    for (float x : v) REQUIRE(x == static_cast<float>(comm.size() * comm.size()));
}
