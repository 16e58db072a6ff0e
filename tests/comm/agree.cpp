// allgather_value, agree and any_of over comm::local for 1 to 8 ranks, against the values each rank knows.
#include <catch2/catch.hpp>

#include "hitch/comm/agree.hpp"
#include "hitch/comm/local.hpp"

using hitch::comm::local;
using hitch::comm::run_local;

namespace {
struct descriptor {
    int op;
    long count;
};
}  // namespace

TEST_CASE("allgather_value returns every rank's value in rank order", "[comm][agree]") {
    for (int p = 1; p <= 8; ++p) {
        const auto results = run_local(p, [](local& comm) {
            const descriptor mine{comm.rank() * 3, 1000L + comm.rank()};
            return hitch::comm::allgather_value(comm, mine);
        });
        for (const auto& all : results) {
            REQUIRE(all.size() == static_cast<std::size_t>(p));
            for (int r = 0; r < p; ++r) {
                CHECK(all[static_cast<std::size_t>(r)].op == r * 3);
                CHECK(all[static_cast<std::size_t>(r)].count == 1000L + r);
            }
        }
    }
}

TEST_CASE("agree throws mismatch_error on every rank, naming each rank's value", "[comm][agree]") {
    const auto messages = run_local(3, [](local& comm) {
        hitch::comm::agree(comm, 7, "same everywhere");  // no throw
        try {
            const long count = comm.rank() == 1 ? 1001 : 1000;
            hitch::comm::agree(comm, count, "allreduce #17 element count");
        } catch (const hitch::mismatch_error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    });
    for (const auto& m : messages)
        CHECK(m == "allreduce #17 element count: rank 0 has 1000, rank 1 has 1001, rank 2 has 1000");
}

TEST_CASE("any_of is true everywhere when one rank's flag is set", "[comm][agree]") {
    for (int p = 1; p <= 5; ++p) {
        for (int who = -1; who < p; ++who) {
            const auto flags =
                run_local(p, [who](local& comm) { return hitch::comm::any_of(comm, comm.rank() == who); });
            for (bool f : flags) CHECK(f == (who >= 0));
        }
    }
}

TEST_CASE("agree with a rank that never arrives is a timeout, not a hang", "[comm][agree]") {
    hitch::comm::local_options options;
    options.timeout_s = 0.3;
    CHECK_THROWS_AS(run_local(
                        2,
                        [](local& comm) {
                            if (comm.rank() == 0) hitch::comm::agree(comm, 1, "lonely");
                        },
                        options),
                    hitch::timeout_error);
}
