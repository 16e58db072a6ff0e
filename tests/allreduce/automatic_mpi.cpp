// allreduce::automatic over comm::mpi: the first call calibrates outside the caller's deadline (run with
// HITCH_TIMEOUT_S=5 on 5 ranks by ctest), and every rank takes the same decisions, the online re-ranking's too.
#include <catch2/catch.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <set>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/allreduce/native.hpp"
#include "hitch/comm/mpi.hpp"
#include "watched_automatic.hpp"

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

TEST_CASE("comm::mpi: automatic's online re-ranking runs the same schedule on every rank in every call",
          "[allreduce][mpi][automatic][rerank]") {
    mpi comm;
    group g(comm);
    automatic::options_type o;
    o.explore_fraction = 1.0;  // explore as much as allowed: many different schedules, each agreed or deadlocked
    o.max_review_calls = 2;
    const hitch_test::watched_automatic a(o);
    constexpr int calls = 200;
    std::vector<float> v(std::size_t{16} << 10);
    for (int call = 0; call < calls; ++call) {
        for (std::size_t i = 0; i < v.size(); ++i)
            v[i] = static_cast<float>(static_cast<int>((i + static_cast<std::size_t>(call * 7 + comm.rank())) % 9) - 4);
        allreduce(g, hitch::view(v), reduce_op::sum, a);
        for (std::size_t i = 0; i < v.size(); ++i) {
            float want = 0;
            for (int r = 0; r < comm.size(); ++r)
                want += static_cast<float>(static_cast<int>((i + static_cast<std::size_t>(call * 7 + r)) % 9) - 4);
            REQUIRE(v[i] == want);
        }
    }
    REQUIRE(a.calls->size() == static_cast<std::size_t>(calls));
    std::vector<int> mine;
    for (const auto& c : *a.calls) {
        mine.push_back(
            static_cast<int>(std::find(automatic::candidate_names.begin(), automatic::candidate_names.end(), c.ran) -
                             automatic::candidate_names.begin()));
        mine.push_back(c.current);
    }
    std::vector<int> all(mine.size() * static_cast<std::size_t>(comm.size()));
    MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT, all.data(), static_cast<int>(mine.size()),
                  MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < comm.size(); ++r)
        REQUIRE(std::equal(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(r * mine.size())));
    std::set<int> ran;
    for (std::size_t i = 0; i < mine.size(); i += 2) ran.insert(mine[i]);
    CHECK(ran.size() >= 2);  // runners-up were explored
}
