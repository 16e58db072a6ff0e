// Every collective call is checked across ranks before data moves: a rank with a different element count, element
// type, reduce op, schedule, root, operation or sequence number makes every rank throw mismatch_error naming each
// rank's values, within the deadline, and the group stays usable afterwards.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/local.hpp"
#include "reference.hpp"

using namespace hitch::allreduce;
using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;

namespace {

/// Runs `call(g)` on p ranks; returns each rank's mismatch_error message ("" if it did not throw one). Afterwards
/// every rank makes one agreeing call, which must succeed.
template <class Call, class CatchUp>
std::vector<std::string> mismatch_messages(int p, Call&& call, CatchUp&& catch_up) {
    hitch::comm::local_options options;
    options.timeout_s = 20;
    return run_local(
        p,
        [&](local& c) {
            group g(c);
            std::string message;
            try {
                call(g, c.rank());
            } catch (const hitch::mismatch_error& e) {
                message = e.what();
            }
            catch_up(g, c.rank());
            std::vector<float> ok(5, 1.0f);
            allreduce<ring>(g, hitch::view(ok));
            expect(ok[0] == static_cast<float>(c.size()), "the group works after a mismatch");
            return message;
        },
        options);
}

template <class Call>
std::vector<std::string> mismatch_messages(int p, Call&& call) {
    return mismatch_messages(p, std::forward<Call>(call), [](group<local>&, int) {});
}

/// An unchecked call of nothing: takes a sequence number without moving data.
void empty_call(group<local>& g) {
    std::vector<float> none;
    call_options unchecked;
    unchecked.check = false;
    allreduce<ring>(g, hitch::view(none), reduce_op::sum, ring{}, unchecked);
}

void all_equal(const std::vector<std::string>& messages, const std::string& want) {
    for (std::size_t r = 0; r < messages.size(); ++r) {
        INFO("rank " << r);
        CHECK(messages[r] == want);
    }
}

}  // namespace

TEST_CASE("different element counts: every rank names every rank's count", "[allreduce][agreement]") {
    const auto messages = mismatch_messages(3, [](group<local>& g, int rank) {
        std::vector<float> v(rank == 1 ? 1001 : 1000, 1.0f);
        allreduce<ring>(g, hitch::view(v));
    });
    all_equal(messages, "allreduce #0: rank 0 has 1000 x float, rank 1 has 1001 x float, rank 2 has 1000 x float");
}

TEST_CASE("different element types", "[allreduce][agreement]") {
    const auto messages = mismatch_messages(2, [](group<local>& g, int rank) {
        if (rank == 0) {
            std::vector<double> v(64, 1.0);
            allreduce<recursive_doubling>(g, hitch::view(v));
        } else {
            std::vector<float> v(64, 1.0f);
            allreduce<recursive_doubling>(g, hitch::view(v));
        }
    });
    all_equal(messages, "allreduce #0: rank 0 has 64 x double, rank 1 has 64 x float");
}

TEST_CASE("different reduce ops, schedules, roots and operations", "[allreduce][agreement]") {
    all_equal(mismatch_messages(3,
                                [](group<local>& g, int rank) {
                                    std::vector<hitch::half> v(8);
                                    allreduce<binary_tree>(g, hitch::view(v),
                                                           rank == 2 ? reduce_op::max : reduce_op::sum);
                                }),
              "allreduce #0: rank 0 has 8 x half sum, rank 1 has 8 x half sum, rank 2 has 8 x half max");
    all_equal(mismatch_messages(2,
                                [](group<local>& g, int rank) {
                                    std::vector<float> v(8);
                                    if (rank == 0)
                                        allreduce<ring>(g, hitch::view(v));
                                    else
                                        allreduce<binary_tree>(g, hitch::view(v));
                                }),
              "allreduce #0: rank 0 has 8 x float (ring), rank 1 has 8 x float (binary_tree)");
    all_equal(mismatch_messages(2,
                                [](group<local>& g, int rank) {
                                    std::vector<float> v(8);
                                    broadcast(g, hitch::view(v), rank);
                                }),
              "broadcast #0: rank 0 has 8 x float root 0, rank 1 has 8 x float root 1");
    const auto ops = mismatch_messages(2, [](group<local>& g, int rank) {
        std::vector<float> v(8);
        if (rank == 0)
            allgather(g, hitch::view(v));
        else
            (void)reduce_scatter(g, hitch::view(v));
    });
    // each rank names its own call first
    CHECK(ops[0] == "allgather #0: rank 0 has allgather of 8 x float, rank 1 has reduce_scatter of 8 x float");
    CHECK(ops[1] == "reduce_scatter #0: rank 0 has allgather of 8 x float, rank 1 has reduce_scatter of 8 x float");
}

TEST_CASE("a rank one call ahead: the sequence numbers disagree", "[allreduce][agreement]") {
    const auto messages = mismatch_messages(
        2,
        [](group<local>& g, int rank) {
            if (rank == 0) empty_call(g);  // an unchecked call that moves nothing still takes a sequence number
            std::vector<float> v(10);
            allreduce<ring>(g, hitch::view(v));
        },
        [](group<local>& g, int rank) {
            if (rank == 1) empty_call(g);  // realign, so the group is usable again
        });
    CHECK(messages[0] == "allreduce #1: rank 0 has 10 x float as call #1, rank 1 has 10 x float as call #0");
    CHECK(messages[1] == "allreduce #0: rank 0 has 10 x float as call #1, rank 1 has 10 x float as call #0");
}

TEST_CASE("a mismatch in a non-blocking call surfaces from wait() on every rank", "[allreduce][agreement][async]") {
    const auto messages = mismatch_messages(4, [](group<local>& g, int rank) {
        std::vector<float> a(100), b(rank == 3 ? 7 : 8);
        handle h1 = allreduce_async<ring>(g, hitch::view(a));
        handle h2 = allreduce_async<ring>(g, hitch::view(b));
        h1.wait();
        h2.wait();
    });
    all_equal(messages,
              "allreduce #1: rank 0 has 8 x float, rank 1 has 8 x float, rank 2 has 8 x float, rank 3 has 7 x float");
}

TEST_CASE("a fingerprint is checked with the rest", "[allreduce][agreement]") {
    const auto messages = mismatch_messages(2, [](group<local>& g, int rank) {
        std::vector<float> v(4);
        call_options o;
        o.fingerprint = rank == 0 ? 11 : 12;
        allreduce(g, hitch::view(v), reduce_op::sum, ring{}, o);
    });
    all_equal(messages, "allreduce #0: rank 0 has 4 x float fingerprint 11, rank 1 has 4 x float fingerprint 12");
}

TEST_CASE("mismatches are reported within the deadline for every world size", "[allreduce][agreement]") {
    for (int p : {2, 3, 5, 8}) {
        const auto start = std::chrono::steady_clock::now();
        const auto messages = mismatch_messages(p, [p](group<local>& g, int rank) {
            std::vector<float> v(rank == p - 1 ? 3 : 4);
            allreduce<double_binary_tree>(g, hitch::view(v));
        });
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        for (const auto& m : messages) CHECK(m.rfind("allreduce #0: rank 0 has 4 x float", 0) == 0);
        CHECK(waited < 5.0);
    }
}

TEST_CASE("with the check off, agreeing calls still work and skip the agreement round", "[allreduce][agreement]") {
    REQUIRE_NOTHROW(run_local(3, [](local& c) {
        group g(c);
        call_options o;
        o.check = false;
        std::vector<float> v(1000, 2.0f);
        allreduce<rabenseifner>(g, hitch::view(v), reduce_op::average, rabenseifner{}, o);
        for (float x : v) expect(x == 2.0f, "unchecked average");
    }));
}
