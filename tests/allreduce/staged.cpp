// The transport's staged path over comm::mpi (processes on one node, pipes in shared memory), under mpiexec with 2
// and 3 ranks: the path is taken; messages on several channels consumed in another order than sent, larger than
// a pipe holds, arrive intact (a piece takes a slot once its receive is posted, or eagerly while the pipe is
// mostly empty: staging everything eagerly deadlocks this case); more views than may be lent are copied; pieces a
// failed call left behind never reach the next call; a receive nobody sends to times out naming its peer and
// channel; a message of the wrong size or type fails the receive and leaves its buffer untouched; a receive
// released before its message arrives never writes its buffer, and its message (larger than a pipe) is dropped
// rather than blocking the next.
// Ranks 0 and 1 talk; a third rank joins every call and sends nothing.
#include <catch2/catch.hpp>

#include <mpi.h>

#include <string>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/mpi.hpp"

using namespace hitch::allreduce;
using hitch::comm::mpi;

namespace {

bool everywhere(bool ok) {
    int mine = ok ? 1 : 0, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all == 1;
}

call_descriptor custom() {
    call_descriptor d;
    d.operation = static_cast<std::uint8_t>(operation::allreduce);
    d.set_schedule("staged-test");
    return d;
}

/// Runs `body` as one collective call of `g` with the agreement check off.
template <class Body>
void call(group<mpi>& g, Body&& body, double timeout_s = 0) {
    call_options o;
    o.check = false;
    o.timeout_s = timeout_s;
    g.run(o, custom, [&](transport<mpi>& t, const call_descriptor&) { body(t); });
}

float value(int from, int channel, std::size_t message, std::size_t i) {
    return static_cast<float>(from * 1000003 + channel * 10007 + static_cast<int>(message) * 101) +
           static_cast<float>(i % 4099);
}

}  // namespace

TEST_CASE("staged: processes on one node take the staged path; off, they use messages", "[allreduce][mpi][staged]") {
    mpi comm;
    group g(comm);
    bool staged = false, plain = true;
    call(g, [&](transport<mpi>& t) { staged = t.staged(); });
    call_options off;
    off.check = false;
    off.shared_memory = false;
    g.run(off, custom, [&](transport<mpi>& t, const call_descriptor&) { plain = t.staged(); });
    REQUIRE(everywhere(staged));
    REQUIRE(everywhere(!plain));
}

TEST_CASE("staged: channels received out of order, more than a pipe holds, both directions",
          "[allreduce][mpi][staged]") {
    mpi comm;
    group g(comm);
    const int me = comm.rank();
    const std::size_t big = std::size_t{1} << 20;  // 4 MiB of floats: several times a pipe
    bool ok = true;
    for (int round = 0; round < 3; ++round) {
        call(g, [&](transport<mpi>& t) {
            if (me > 1) return;
            const int peer = 1 - me;
            // Sent: channel 0 first (three messages), then channel 1 (a big one and a small one).
            std::vector<std::vector<float>> out;
            for (std::size_t m = 0; m < 3; ++m) out.emplace_back(big / 4 + m * 777);
            out.emplace_back(big);
            out.emplace_back(100);
            for (std::size_t k = 0; k < out.size(); ++k) {
                const int ch = k < 3 ? 0 : 1;
                const std::size_t m = k < 3 ? k : k - 3;
                for (std::size_t i = 0; i < out[k].size(); ++i) out[k][i] = value(me, ch, m, i);
            }
            std::vector<transport<mpi>::outgoing> sends;
            for (std::size_t k = 0; k < out.size(); ++k)
                sends.push_back(t.send<float>(peer, k < 3 ? 0 : 1, std::span<const float>(out[k])));
            // Received: channel 1 first, then channel 0, as views (with a slot) and as copies.
            std::vector<float> into1(big), slot1(100), slot0(big / 4 + 2 * 777), into0(big / 4 + 777);
            auto a = t.receive_into<float>(peer, 1, std::span<float>(into1));
            a.wait(t.limit());
            auto b = t.receive<float>(peer, 1, 100, std::span<float>(slot1));
            b.wait(t.limit());
            for (std::size_t i = 0; i < into1.size(); ++i) ok = ok && into1[i] == value(peer, 1, 0, i);
            for (std::size_t i = 0; i < 100; ++i) ok = ok && b.data()[i] == value(peer, 1, 1, i);
            b.release();
            for (std::size_t m = 0; m < 3; ++m) {
                const std::size_t n = big / 4 + m * 777;
                if (m == 1) {
                    auto r = t.receive_into<float>(peer, 0, std::span<float>(into0.data(), n));
                    r.wait(t.limit());
                    for (std::size_t i = 0; i < n; ++i) ok = ok && into0[i] == value(peer, 0, m, i);
                } else {
                    auto r = t.receive<float>(peer, 0, n, std::span<float>(slot0.data(), n));
                    r.wait(t.limit());
                    for (std::size_t i = 0; i < n; ++i) ok = ok && r.data()[i] == value(peer, 0, m, i);
                    r.release();
                }
            }
            for (auto& s : sends) s.wait(t.limit());
        });
    }
    REQUIRE(everywhere(ok));
}

TEST_CASE("staged: many views at once, zero-length messages", "[allreduce][mpi][staged]") {
    mpi comm;
    group g(comm);
    const int me = comm.rank();
    bool ok = true;
    call(g, [&](transport<mpi>& t) {
        if (me > 1) return;
        const int peer = 1 - me;
        constexpr std::size_t count = 40, n = 1000;
        std::vector<std::vector<float>> out(count, std::vector<float>(n));
        std::vector<transport<mpi>::outgoing> sends;
        for (std::size_t m = 0; m < count; ++m) {
            for (std::size_t i = 0; i < n; ++i) out[m][i] = value(me, 2, m, i);
            sends.push_back(t.send<float>(peer, 2, std::span<const float>(out[m])));
        }
        sends.push_back(t.send<float>(peer, 3, std::span<const float>()));
        // All 40 held at once: only some may stay lent in the pipe, the rest land in their slots.
        std::vector<float> slots(count * n);
        std::vector<transport<mpi>::incoming<float>> in;
        for (std::size_t m = 0; m < count; ++m)
            in.push_back(t.receive<float>(peer, 2, n, std::span<float>(slots).subspan(m * n, n)));
        auto empty = t.receive<float>(peer, 3, 0, std::span<float>());
        for (auto& r : in) r.wait(t.limit());
        empty.wait(t.limit());
        ok = ok && empty.size() == 0;
        for (std::size_t m = 0; m < count; ++m)
            for (std::size_t i = 0; i < n; ++i) ok = ok && in[m].data()[i] == value(peer, 2, m, i);
        for (auto& r : in) r.release();
        for (auto& s : sends) s.wait(t.limit());
    });
    REQUIRE(everywhere(ok));
}

TEST_CASE("staged: what a failed call left behind never reaches the next; a missing sender times out",
          "[allreduce][mpi][staged]") {
    mpi comm;
    group g(comm);
    const int me = comm.rank(), p = comm.size();
    // Rank 0 sends on channel 0; nobody receives it.
    call(g, [&](transport<mpi>& t) {
        if (me != 0) return;
        std::vector<float> junk(5000, -1.0f);
        auto s = t.send<float>(1, 0, std::span<const float>(junk));
        s.wait(t.limit());
    });
    // Rank 1 waits on channel 3 for a message rank 0 never sends.
    std::string message;
    try {
        call(
            g,
            [&](transport<mpi>& t) {
                if (me != 1) return;
                std::vector<float> in(10);
                auto r = t.receive_into<float>(0, 3, std::span<float>(in));
                r.wait(t.limit());
            },
            0.5);
    } catch (const hitch::timeout_error& e) {
        message = e.what();
    }
    INFO(message);
    REQUIRE(everywhere(me != 1 || message.find("staged receive") != std::string::npos));
    REQUIRE(everywhere(me != 1 || message.find("from rank 0 on channel 3") != std::string::npos));
    // The next call's channel 0 sees only its own message.
    bool ok = true;
    call(g, [&](transport<mpi>& t) {
        if (me > 1) return;
        std::vector<float> mine(5000, static_cast<float>(me + 1)), theirs(5000, 0.0f);
        auto r = t.receive_into<float>(1 - me, 0, std::span<float>(theirs));
        auto s = t.send<float>(1 - me, 0, std::span<const float>(mine));
        r.wait(t.limit());
        s.wait(t.limit());
        for (float x : theirs) ok = ok && x == static_cast<float>(2 - me);
    });
    std::vector<float> v(100000, 1.0f);
    allreduce(g, hitch::view(v), reduce_op::sum, ring{});
    for (float x : v) ok = ok && x == static_cast<float>(p);
    REQUIRE(everywhere(ok));
}

TEST_CASE("staged: a message of the wrong size or type fails the receive, the buffer untouched",
          "[allreduce][mpi][staged]") {
    mpi comm;
    group g(comm);
    const int me = comm.rank();
    std::string size_error, type_error;
    bool untouched = true;
    call(g, [&](transport<mpi>& t) {
        if (me == 0) {
            std::vector<float> a(1000000, 1.0f);  // more than a pipe holds: the rest must be dropped, not block
            std::vector<double> b(500, 2.0);
            auto s1 = t.send<float>(1, 0, std::span<const float>(a));
            auto s2 = t.send<double>(1, 1, std::span<const double>(b));
            s1.wait(t.limit());
            s2.wait(t.limit());
        } else if (me == 1) {
            std::vector<float> a(1000001, 7.0f), b(1000, 7.0f);
            try {
                auto r = t.receive_into<float>(0, 0, std::span<float>(a));
                r.wait(t.limit());
            } catch (const hitch::comm_error& e) {
                size_error = e.what();
            }
            try {
                auto r = t.receive_into<float>(0, 1, std::span<float>(b));
                r.wait(t.limit());
            } catch (const hitch::comm_error& e) {
                type_error = e.what();
            }
            for (float x : a) untouched = untouched && x == 7.0f;
            for (float x : b) untouched = untouched && x == 7.0f;
        }
    });
    INFO(size_error << " | " << type_error);
    REQUIRE(everywhere(me != 1 || size_error.find("expected 1000001 x float but the message has 1000000 x float") !=
                                      std::string::npos));
    REQUIRE(everywhere(me != 1 ||
                       type_error.find("expected 1000 x float but the message has 500 x double") != std::string::npos));
    REQUIRE(everywhere(untouched));
    std::vector<float> v(3000, 2.0f);
    allreduce(g, hitch::view(v), reduce_op::sum, recursive_doubling{});
    bool ok = true;
    for (float x : v) ok = ok && x == 2.0f * static_cast<float>(comm.size());
    REQUIRE(everywhere(ok));
}

TEST_CASE("staged: a receive released before its message arrives never writes its buffer", "[allreduce][mpi][staged]") {
    mpi comm;
    group g(comm);
    const int me = comm.rank();
    bool ok = true;
    call(g, [&](transport<mpi>& t) {
        if (me == 0) {
            std::vector<float> x(300000, 1.0f), y(300000, 2.0f);
            std::vector<float> go(1);
            auto ready = t.receive_into<float>(1, 6, std::span<float>(go));  // rank 1 has given up on its first receive
            ready.wait(t.limit());
            auto s1 = t.send<float>(1, 5, std::span<const float>(x));
            auto s2 = t.send<float>(1, 5, std::span<const float>(y));
            s1.wait(t.limit());
            s2.wait(t.limit());
        } else if (me == 1) {
            std::vector<float> a(300000, 7.0f), b(300000, 0.0f);
            auto first = t.receive_into<float>(0, 5, std::span<float>(a));
            first.release();  // given up: message 0 on channel 5 goes nowhere
            auto second = t.receive_into<float>(0, 5, std::span<float>(b));
            std::vector<float> go(1, 1.0f);
            auto s = t.send<float>(0, 6, std::span<const float>(go));
            second.wait(t.limit());
            s.wait(t.limit());
            for (float v : a) ok = ok && v == 7.0f;
            for (float v : b) ok = ok && v == 2.0f;
        }
    });
    REQUIRE(everywhere(ok));
}
