// cuda::nccl's engine on the host, over the fake NCCL (fake_nccl.hpp), when things go wrong, each rank's own error
// checked: a rank that never comes (to the creation, to a native all-reduce, to a message) is named within the
// deadline; a stream that stalls with an NCCL transfer issued aborts the communicator (ncclCommAbort) and the
// timeout names the operation, its message number and the peer; an asynchronous NCCL error aborts every rank with
// NCCL's text; sizes that differ are reported on every rank (the collectives' check) or on the receiver before a
// byte moves (point to point); dropped requests do not swallow later messages; and random traffic in any order of
// posting and waiting, with jittered streams, never deadlocks (the slot ordering of engine.hpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../../comm/suite.hpp"
#include "fake_nccl.hpp"
#include "harness.hpp"
#include "hitch/allreduce/allreduce.hpp"
#include "hitch/cuda/nccl/communicator.hpp"
#include "hitch/cuda/nccl/native.hpp"

namespace ar = hitch::allreduce;
using hitch::cuda::nccl;
using hitch_test::expect;
using hitch_test::fake_nccl_options;
using hitch_test::fake_nccl_world;
using hitch_test::make_fake_nccl;
using hitch_test::rank_outcome;
using hitch_test::run_ranks;

namespace {

hitch::cuda::nccl_options quick(double seconds) {
    hitch::cuda::nccl_options o;
    o.timeout_s = seconds;
    return o;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string show(const std::vector<rank_outcome>& all) {
    std::string out;
    for (std::size_t r = 0; r < all.size(); ++r)
        out += "rank " + std::to_string(r) + " (" + std::to_string(all[r].seconds) + " s) " + all[r].type + ": " +
               all[r].error + "\n";
    return out;
}

}  // namespace

TEST_CASE("cuda::nccl: a rank that never comes to the creation is named, within the deadline", "[cuda][nccl][faults]") {
    const auto world = fake_nccl_world::make(3);
    const auto out = run_ranks(3, world, [&](hitch::comm::local& c, const auto& w) {
        if (c.rank() == 2) return;  // never creates its communicator
        nccl comm = make_fake_nccl(c, w, quick(1.0));
    });
    INFO(show(out));
    for (int r : {0, 1}) {
        CHECK(out[static_cast<std::size_t>(r)].type == "timeout");
        CHECK(contains(out[static_cast<std::size_t>(r)].error, "rank 2 did not arrive"));
        CHECK(out[static_cast<std::size_t>(r)].seconds < 6.0);
    }
}

TEST_CASE("cuda::nccl: a rank that never comes to a native all-reduce is named; the communicator is aborted",
          "[cuda][nccl][faults]") {
    const auto world = fake_nccl_world::make(3);
    const auto out = run_ranks(3, world, [&](hitch::comm::local& c, const auto& w) {
        nccl comm = make_fake_nccl(c, w, quick(1.0));
        if (comm.rank() == 2) {
            // Never calls it; it hears of the others' abort.
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(8);
            while (comm.aborted().empty() && std::chrono::steady_clock::now() < until)
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
            expect(contains(comm.aborted(), "aborted it"), "rank 2 hears of the abort: " + comm.aborted());
            return;
        }
        std::vector<float> data(100, 1.0f);
        try {
            comm.allreduce_native(std::span<float>(data), hitch::reduce_op::sum, hitch::deadline(comm.timeout()));
        } catch (const hitch::timeout_error& e) {
            expect(!comm.aborted().empty(), "a collective that timed out while agreeing its place aborts");
            bool refused = false;
            try {
                (void)comm.isend(std::span<const float>(data), 1 - comm.rank(), 0);
            } catch (const hitch::comm_error& again) {
                refused = contains(again.what(), "aborted");
            }
            expect(refused, "an aborted communicator refuses further work");
            throw;
        }
    });
    INFO(show(out));
    for (int r : {0, 1}) {
        // Its own timeout, or the abort of the rank that timed out first, which passes the reason on.
        const auto& o = out[static_cast<std::size_t>(r)];
        CHECK((o.type == "timeout" || (o.type == "comm" && contains(o.error, "aborted it"))));
        CHECK(contains(o.error, "native all-reduce #0"));
        CHECK(contains(o.error, "rank 2 did not arrive"));
    }
    CHECK(out[2].error.empty());
}

TEST_CASE("cuda::nccl: the group's check reports sizes that differ on every rank", "[cuda][nccl][faults]") {
    const auto world = fake_nccl_world::make(3);
    const auto out = run_ranks(3, world, [&](hitch::comm::local& c, const auto& w) {
        nccl comm = make_fake_nccl(c, w, quick(5.0));
        ar::group g(comm);
        std::vector<float> data(comm.rank() == 1 ? 101 : 100, 1.0f);
        ar::allreduce(g, hitch::view(data), ar::reduce_op::sum, ar::native{});
    });
    INFO(show(out));
    for (const auto& o : out) {
        CHECK(o.type == "mismatch");
        CHECK(contains(o.error, "101"));
    }
}

TEST_CASE("cuda::nccl: a device message of the wrong size fails the receive before a byte moves",
          "[cuda][nccl][faults]") {
    fake_nccl_options registry;
    registry.all_device = false;
    const auto world = fake_nccl_world::make(2, registry);
    const auto out = run_ranks(2, world, [&](hitch::comm::local& c, const auto& w) {
        nccl comm = make_fake_nccl(c, w, quick(5.0));
        auto out_buf = w->template device_buffer<float>(100);
        auto in_buf = w->template device_buffer<float>(99);
        if (comm.rank() == 0) {
            comm.isend(std::span<const float>(out_buf.get(), 100), 1, 4).wait();  // completes: the receiver reports
        } else {
            bool reported = false;
            try {
                comm.irecv(std::span<float>(in_buf.get(), 99), 0, 4).wait();
            } catch (const hitch::comm_error& e) {
                reported = contains(e.what(), "message mismatch on rank 1") && contains(e.what(), "400 bytes") &&
                           contains(e.what(), "396 bytes");
            }
            expect(reported, "the receiver reports the mismatch");
        }
        comm.barrier();
        expect(w->groups_started(comm.rank()) == 0, "no NCCL transfer for a mismatched message");
        // The communicator goes on.
        auto a = w->template device_buffer<float>(10);
        auto b = w->template device_buffer<float>(10);
        std::fill(a.get(), a.get() + 10, static_cast<float>(comm.rank() + 1));
        auto r = comm.irecv(std::span<float>(b.get(), 10), 1 - comm.rank(), 5);
        auto s = comm.isend(std::span<const float>(a.get(), 10), 1 - comm.rank(), 5);
        r.wait();
        s.wait();
        expect(b.get()[9] == static_cast<float>(2 - comm.rank()), "traffic after a mismatch");
        expect(w->groups_started(comm.rank()) > 0, "which went over NCCL");
    });
    INFO(show(out));
    for (const auto& o : out) CHECK(o.error.empty());
}

TEST_CASE("cuda::nccl: a message nobody sends times out naming the peer; the communicator goes on",
          "[cuda][nccl][faults]") {
    const auto world = fake_nccl_world::make(2);
    const auto out = run_ranks(2, world, [&](hitch::comm::local& c, const auto& w) {
        nccl comm = make_fake_nccl(c, w, quick(0.5));
        std::vector<float> x(64, 0.0f);
        if (comm.rank() == 0) {
            bool named = false;
            try {
                comm.irecv(std::span<float>(x), 1, 31).wait();
            } catch (const hitch::timeout_error& e) {
                named = contains(e.what(), "cuda::nccl recv") && contains(e.what(), "from rank 1") &&
                        contains(e.what(), "tag 31");
            }
            expect(named, "the timeout names the operation, the peer and the tag");
            expect(comm.aborted().empty(), "nothing reached NCCL: the communicator goes on");
        } else {
            // A send nobody receives: withdrawn at its deadline.
            bool named = false;
            try {
                comm.isend(std::span<const float>(x), 0, 32).wait();
            } catch (const hitch::timeout_error& e) {
                named = contains(e.what(), "cuda::nccl send") && contains(e.what(), "to rank 0") &&
                        contains(e.what(), "message #0");
            }
            expect(named, "the send's timeout names its peer and message number");
        }
        comm.barrier();
        std::vector<float> y(64, static_cast<float>(comm.rank()));
        auto r = comm.irecv(std::span<float>(x), 1 - comm.rank(), 32);
        auto s = comm.isend(std::span<const float>(y), 1 - comm.rank(), 32);
        r.wait();
        s.wait();
        expect(x[0] == static_cast<float>(1 - comm.rank()), "the withdrawn send was not delivered instead");
    });
    INFO(show(out));
    for (const auto& o : out) CHECK(o.error.empty());
}

TEST_CASE("cuda::nccl: a stream that stalls with a transfer issued: abort, and a timeout naming op, number, peer",
          "[cuda][nccl][faults]") {
    const auto world = fake_nccl_world::make(2);
    world->stall_at_group(1, 0);  // rank 1's GPU never runs its first group
    const auto out = run_ranks(2, world, [&](hitch::comm::local& c, const auto& w) {
        nccl comm = make_fake_nccl(c, w, quick(1.0));
        std::vector<float> x(1000, 1.0f);
        if (comm.rank() == 0)
            comm.isend(std::span<const float>(x), 1, 9).wait();  // 1 s
        else
            comm.irecv(std::span<float>(x), 0, 9).wait(hitch::deadline(hitch::seconds_f(6.0)));
    });
    INFO(show(out));
    CHECK(out[0].type == "timeout");
    CHECK(contains(out[0].error, "cuda::nccl send"));
    CHECK(contains(out[0].error, "to rank 1"));
    CHECK(contains(out[0].error, "message #0"));
    CHECK(contains(out[0].error, "ncclCommAbort"));
    // Rank 1, stalled, hears of rank 0's abort long before its own deadline, with rank 0's reason.
    CHECK(out[1].type == "comm");
    CHECK(contains(out[1].error, "rank 0 aborted it"));
    CHECK(contains(out[1].error, "message #0"));
    for (const auto& o : out) CHECK(o.seconds < 5.0);
}

TEST_CASE("cuda::nccl: an asynchronous NCCL error aborts every rank with NCCL's text", "[cuda][nccl][faults]") {
    const auto world = fake_nccl_world::make(3);
    world->fail_at_group(1, 0, "remote process exited or there was a network error (injected)");
    const auto out = run_ranks(3, world, [&](hitch::comm::local& c, const auto& w) {
        nccl comm = make_fake_nccl(c, w, quick(10.0));
        std::vector<float> x(1000, 1.0f), y(1000);
        const int p = comm.size(), me = comm.rank();
        auto r = comm.irecv(std::span<float>(y), (me - 1 + p) % p, 1);
        auto s = comm.isend(std::span<const float>(x), (me + 1) % p, 1);
        try {
            r.wait();
            s.wait();
        } catch (const hitch::comm_error&) {
            bool refused = false;
            try {
                comm.barrier();
            } catch (const hitch::comm_error& e) {
                refused = contains(e.what(), "aborted");
            }
            expect(refused, "an aborted communicator refuses further work");
            throw;
        }
    });
    INFO(show(out));
    CHECK(out[1].type == "comm");
    CHECK(contains(out[1].error, "NCCL reported an error on rank 1"));
    CHECK(contains(out[1].error, "(injected)"));
    for (int r : {0, 2}) {
        CHECK(out[static_cast<std::size_t>(r)].type == "comm");
        CHECK(contains(out[static_cast<std::size_t>(r)].error, "rank 1 aborted it"));
        CHECK(contains(out[static_cast<std::size_t>(r)].error, "(injected)"));
    }
    for (const auto& o : out) CHECK(o.seconds < 8.0);  // long before the 10 s deadline
}

TEST_CASE("cuda::nccl: a dropped receive does not swallow a later message, before or after it matched",
          "[cuda][nccl][faults]") {
    const auto world = fake_nccl_world::make(2);
    const auto out = run_ranks(2, world, [&](hitch::comm::local& c, const auto& w) {
        nccl comm = make_fake_nccl(c, w, quick(5.0));
        std::vector<int> got(4, -1);
        if (comm.rank() == 0) {
            {
                auto dropped = comm.irecv(std::span<int>(got), 1, 3);
            }  // before any message: withdrawn
            comm.barrier();                                            // rank 1 sends A
            (void)comm.probe(1, 3);                                    // A announced
            { auto dropped = comm.irecv(std::span<int>(got), 1, 3); }  // matches A, then dropped: A lands apart
            comm.barrier();                                            // rank 1 sends B
            comm.irecv(std::span<int>(got), 1, 3).wait();
            expect(got[0] == 2, "the next receive gets B, not A");
        } else {
            const std::vector<int> a(4, 1), b(4, 2);
            comm.barrier();
            auto sa = comm.isend(std::span<const int>(a), 0, 3);
            comm.barrier();
            auto sb = comm.isend(std::span<const int>(b), 0, 3);
            sa.wait();  // A's transfer ran, into rank 0's staging
            sb.wait();
        }
        comm.barrier();
    });
    INFO(show(out));
    for (const auto& o : out) CHECK(o.error.empty());
    CHECK(world->live_allocations() == 0);
}

TEST_CASE("cuda::nccl: random traffic, any order of posting and waiting, jittered streams: no deadlock",
          "[cuda][nccl][faults]") {
    // Every rank sends `per_rank` messages of random sizes to random peers on random tags, from device or host
    // buffers; receivers post in a shuffled order of (source, tag) classes (in order within a class, or with
    // any_source) and wait in another shuffled order.
    for (std::uint32_t seed : {1u, 2u, 3u}) {
        fake_nccl_options o;
        o.all_device = false;
        o.jitter_us = 50;
        const int p = 4;
        const int per_rank = 40;
        const auto world = fake_nccl_world::make(p, o);
        struct message {
            int from, to, tag;
            std::size_t n;
            bool device;
            int id;
        };
        std::mt19937 plan(seed);
        std::vector<message> messages;
        for (int from = 0; from < p; ++from)
            for (int k = 0; k < per_rank; ++k)
                messages.push_back({from, static_cast<int>(plan() % p), static_cast<int>(plan() % 3),
                                    plan() % 4 == 0 ? std::size_t{0} : 1 + plan() % 5000, plan() % 3 != 0,
                                    static_cast<int>(messages.size())});
        const auto out = run_ranks(p, world, [&](hitch::comm::local& c, const auto& w) {
            nccl comm = make_fake_nccl(c, w, quick(20.0));
            const int me = comm.rank();
            std::mt19937 random(seed * 100 + static_cast<std::uint32_t>(me));
            std::vector<std::shared_ptr<int[]>> buffers;
            std::vector<nccl::request> requests;
            const auto buffer = [&](std::size_t n, bool device) {
                std::shared_ptr<int[]> b =
                    device ? w->template device_buffer<int>(n) : std::shared_ptr<int[]>(new int[n == 0 ? 1 : n]());
                buffers.push_back(b);
                return b.get();
            };
            // Receives: my incoming messages by (source, tag), in send order within each class.
            std::map<std::pair<int, int>, std::vector<const message*>> classes;
            for (const message& m : messages)
                if (m.to == me) classes[{m.from, m.tag}].push_back(&m);
            struct expected {
                int* data;
                const message* m;
            };
            std::vector<expected> checks;
            std::vector<std::pair<int, int>> order;
            for (auto& [key, list] : classes) order.push_back(key);
            std::shuffle(order.begin(), order.end(), random);
            // Sends first for half the ranks, receives first for the others.
            const auto post_sends = [&] {
                for (const message& m : messages) {
                    if (m.from != me) continue;
                    int* data = buffer(m.n, m.device);
                    for (std::size_t i = 0; i < m.n; ++i) data[i] = m.id * 7919 + static_cast<int>(i);
                    requests.push_back(comm.isend(std::span<const int>(data, m.n), m.to, m.tag));
                }
            };
            if (me % 2 == 0) post_sends();
            for (const auto& key : order)
                for (const message* m : classes[key]) {
                    int* data = buffer(m->n, !m->device);  // the other space than the sender's
                    requests.push_back(comm.irecv(std::span<int>(data, m->n), m->from, m->tag));
                    checks.push_back({data, m});
                }
            if (me % 2 == 1) post_sends();
            std::vector<std::size_t> wait_order(requests.size());
            for (std::size_t i = 0; i < wait_order.size(); ++i) wait_order[i] = i;
            std::shuffle(wait_order.begin(), wait_order.end(), random);
            for (std::size_t i : wait_order) requests[i].wait();
            for (const expected& e : checks)
                for (std::size_t i = 0; i < e.m->n; ++i)
                    if (e.data[i] != e.m->id * 7919 + static_cast<int>(i))
                        expect(false, "message " + std::to_string(e.m->id) + " element " + std::to_string(i));
            comm.barrier();
        });
        INFO("seed " << seed << "\n" << show(out));
        for (const auto& r : out) CHECK(r.error.empty());
        CHECK(world->live_allocations() == 0);
    }
}

TEST_CASE("cuda::nccl: a ring of receive-then-send on every rank, the 3-cycle that naive NCCL ordering deadlocks",
          "[cuda][nccl][faults]") {
    fake_nccl_options o;
    o.jitter_us = 100;
    for (int p : {3, 4}) {
        const auto world = fake_nccl_world::make(p, o);
        const auto out = run_ranks(p, world, [&](hitch::comm::local& c, const auto& w) {
            nccl comm = make_fake_nccl(c, w, quick(20.0));
            const int me = comm.rank(), n = comm.size();
            for (int round = 0; round < 50; ++round) {
                std::vector<float> in(4096), out_buf(4096, static_cast<float>(me * 1000 + round));
                auto r = comm.irecv(std::span<float>(in), (me - 1 + n) % n, round % 4);
                auto s = comm.isend(std::span<const float>(out_buf), (me + 1) % n, round % 4);
                if (round % 2 == 0) {
                    r.wait();
                    s.wait();
                } else {
                    s.wait();
                    r.wait();
                }
                expect(in[17] == static_cast<float>(((me - 1 + n) % n) * 1000 + round), "ring payload");
            }
        });
        INFO("p = " << p << "\n" << show(out));
        for (const auto& r : out) CHECK(r.error.empty());
    }
}

TEST_CASE("cuda::nccl: splits by ncclCommSplit, traffic and native on the parts, a member that does not come",
          "[cuda][nccl][faults]") {
    {
        const auto world = fake_nccl_world::make(4);
        const auto out = run_ranks(4, world, [&](hitch::comm::local& c, const auto& w) {
            nccl comm = make_fake_nccl(c, w, quick(10.0));
            nccl half = comm.split(comm.rank() / 2, -comm.rank());  // {1, 0} and {3, 2}
            expect(half.size() == 2 && half.rank() == 1 - comm.rank() % 2, "split order by key");
            std::vector<double> v(1000, comm.rank() + 1.0);
            half.allreduce_native(std::span<double>(v), hitch::reduce_op::sum, hitch::deadline(half.timeout()));
            const double want = comm.rank() < 2 ? 3.0 : 7.0;
            expect(v[999] == want, "native on a split");
            nccl again = half.split(0, 0);
            std::vector<int> a(10, comm.rank()), b(10, -1);
            auto r = again.irecv(std::span<int>(b), 1 - again.rank(), 0);
            auto s = again.isend(std::span<const int>(a), 1 - again.rank(), 0);
            r.wait();
            s.wait();
            expect(b[0] == (comm.rank() ^ 1), "traffic on a split of a split");
            comm.barrier();
        });
        INFO(show(out));
        for (const auto& r : out) CHECK(r.error.empty());
    }
    {
        const auto world = fake_nccl_world::make(3);
        const auto out = run_ranks(3, world, [&](hitch::comm::local& c, const auto& w) {
            nccl comm = make_fake_nccl(c, w, quick(1.0));
            if (comm.rank() == 0) {
                std::this_thread::sleep_for(std::chrono::seconds(3));  // not in the split
                return;
            }
            nccl part = comm.split(0, comm.rank());
        });
        INFO(show(out));
        for (int r : {1, 2}) {
            const auto& o = out[static_cast<std::size_t>(r)];
            CHECK((o.type == "timeout" || (o.type == "comm" && contains(o.error, "aborted it"))));
            CHECK(contains(o.error, "split #0"));
            CHECK(contains(o.error, "rank 0 did not arrive"));
        }
    }
}

TEST_CASE("cuda::nccl: a send left in flight into a native all-reduce is not held back by it", "[cuda][nccl][faults]") {
    // Rank 0 posts a send and enters the all-reduce before waiting for it; rank 1 waits for the message before it
    // comes to the all-reduce. (Reserving the collective's slot on entry would hold rank 0's send behind it.)
    const auto world = fake_nccl_world::make(2);
    const auto out = run_ranks(2, world, [&](hitch::comm::local& c, const auto& w) {
        nccl comm = make_fake_nccl(c, w, quick(5.0));
        std::vector<float> message(5000, 7.0f), sums(100, 1.0f);
        if (comm.rank() == 0) {
            auto s = comm.isend(std::span<const float>(message), 1, 0);
            comm.allreduce_native(std::span<float>(sums), hitch::reduce_op::sum, hitch::deadline(comm.timeout()));
            s.wait();
        } else {
            std::vector<float> in(5000, 0.0f);
            comm.irecv(std::span<float>(in), 0, 0).wait();
            expect(in[4999] == 7.0f, "the message");
            comm.allreduce_native(std::span<float>(sums), hitch::reduce_op::sum, hitch::deadline(comm.timeout()));
        }
        expect(sums[99] == 2.0f, "the all-reduce");
    });
    INFO(show(out));
    for (const auto& o : out) {
        CHECK(o.error.empty());
        CHECK(o.seconds < 4.0);
    }
}
