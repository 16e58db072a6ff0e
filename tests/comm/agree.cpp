// allgather_value, agree and any_of over comm::local for 1 to 8 ranks, against the values each rank knows.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

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

namespace {
enum class colour : std::uint8_t { red = 1, green = 2 };
}  // namespace

// Found by fuzz_agree_values (tests/fuzz): the default formatter wrote a character array with operator<<, reading
// past it when another rank's bytes held no NUL (AddressSanitizer: heap-buffer-overflow), and loaded a bool whose
// byte was neither 0 nor 1 (UndefinedBehaviorSanitizer; agree on a bool did not even compile: allgather_value
// memcpy'd into a std::vector<bool>). Now arrays are bounded and quoted, bools, characters and enums are written as
// numbers read through memcpy, a bool's nonzero byte is true, and a pointer from another rank is shown, never
// followed.
TEST_CASE("agree describes any bytes another rank sent without reading past them", "[comm][agree][fuzz]") {
    const auto messages = run_local(2, [](local& comm) {
        std::vector<std::string> out;
        const auto attempt = [&](auto&& call) {
            try {
                call();
                out.emplace_back("no error");
            } catch (const hitch::mismatch_error& e) {
                out.emplace_back(e.what());
            }
        };
        char name[8];
        std::memcpy(name, comm.rank() == 0 ? "fc.weigh" : "fc.bi\"\n\x01", 8);  // no NUL
        attempt([&] { hitch::comm::agree(comm, name, "name"); });
        bool flag = true;
        const unsigned char byte = comm.rank() == 0 ? 1 : 2;  // as a damaged message would carry it: still true
        std::memcpy(&flag, &byte, 1);
        attempt([&] { hitch::comm::agree(comm, flag, "flag"); });
        attempt([&] { hitch::comm::agree(comm, comm.rank() == 0, "first"); });
        attempt([&] { hitch::comm::agree(comm, static_cast<char>(comm.rank() == 0 ? 'A' : 0), "char"); });
        colour c = colour::red;
        const unsigned char raw = comm.rank() == 0 ? 1 : 200;
        std::memcpy(&c, &raw, 1);
        attempt([&] { hitch::comm::agree(comm, c, "colour"); });
        const char* pointer = comm.rank() == 0 ? nullptr : reinterpret_cast<const char*>(std::uintptr_t{0x10});
        attempt([&] { hitch::comm::agree(comm, pointer, "pointer"); });
        return out;
    });
    for (const auto& m : messages) {
        REQUIRE(m.size() == 6);
        CHECK(m[0] == "name: rank 0 has \"fc.weigh\", rank 1 has \"fc.bi\\x22\\x0a\\x01\"");
        CHECK(m[1] == "no error");
        CHECK(m[2] == "first: rank 0 has 1, rank 1 has 0");
        CHECK(m[3] == "char: rank 0 has 65, rank 1 has 0");
        CHECK(m[4] == "colour: rank 0 has 1, rank 1 has 200");
        CHECK(m[5].find("pointer: rank 0 has 0x0000000000000000, rank 1 has 0x1000000000000000") == 0);
    }
}
