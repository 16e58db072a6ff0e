#pragma once
// Checks every hitch::communicator must pass, written once against the concept and run on comm::local (threads)
// and comm::mpi (processes). Each function is collective: every rank of `comm` calls it.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "hitch/concepts/communicator.hpp"
#include "hitch/core/error.hpp"

namespace hitch_test {

// Fails the calling rank with a message (Catch2 assertions are not thread-safe, so collective checks throw).
inline void expect(bool ok, const std::string& what) {
    if (!ok) throw std::runtime_error("check failed: " + what);
}

inline std::uint32_t pattern(int source, std::size_t size, std::size_t i) {
    return static_cast<std::uint32_t>(source * 2654435761u) ^ static_cast<std::uint32_t>(size * 40503u + i);
}

/// Each rank sends `count` numbered messages on two tags to every rank (itself included) and receives them:
/// per (source, tag) they must arrive in the order sent, even when the receiver posts the later tag first.
template <hitch::communicator C>
void ordered_delivery(C& comm, int count = 40) {
    const int p = comm.size();
    std::vector<typename C::request> sends;
    std::vector<std::uint64_t> out;
    out.reserve(static_cast<std::size_t>(p * count * 2));
    for (int peer = 0; peer < p; ++peer)
        for (int i = 0; i < count; ++i)
            for (int tag : {3, 4}) {
                out.push_back(static_cast<std::uint64_t>(comm.rank()) << 32 | static_cast<std::uint64_t>(i * 10 + tag));
                sends.push_back(comm.isend(std::span<const std::uint64_t>(&out.back(), 1), peer, tag));
            }
    for (int peer = 0; peer < p; ++peer)
        for (int tag : {4, 3})
            for (int i = 0; i < count; ++i) {
                std::uint64_t got = 0;
                auto r = comm.irecv(std::span<std::uint64_t>(&got, 1), peer, tag);
                r.wait();
                const std::uint64_t want =
                    static_cast<std::uint64_t>(peer) << 32 | static_cast<std::uint64_t>(i * 10 + tag);
                expect(got == want, "message " + std::to_string(i) + " from rank " + std::to_string(peer) + " tag " +
                                        std::to_string(tag) + " arrived out of order");
                expect(r.status().source == peer && r.status().tag == tag && r.status().bytes == 8, "status");
            }
    hitch::wait_all(sends, comm.timeout());
}

/// Ring exchange of every size in `sizes` (bytes, rounded down to whole uint32 plus a byte tail), content checked.
template <hitch::communicator C>
void message_sizes(C& comm, const std::vector<std::size_t>& sizes) {
    const int p = comm.size();
    const int next = (comm.rank() + 1) % p, prev = (comm.rank() - 1 + p) % p;
    for (std::size_t bytes : sizes) {
        const std::size_t n = bytes / 4;
        std::vector<std::uint32_t> out(n), in(n, 0xdeadbeef);
        for (std::size_t i = 0; i < n; ++i) out[i] = pattern(comm.rank(), n, i);
        auto r = comm.irecv(std::span<std::uint32_t>(in), prev, 9);
        auto s = comm.isend(std::span<const std::uint32_t>(out), next, 9);
        r.wait();
        s.wait();
        for (std::size_t i = 0; i < n; ++i)
            if (in[i] != pattern(prev, n, i))
                expect(false, "size " + std::to_string(bytes) + ": element " + std::to_string(i) + " corrupted");
        // odd byte counts travel as std::byte
        std::vector<std::byte> odd_out(bytes % 7 + 1, std::byte{static_cast<unsigned char>(comm.rank())});
        std::vector<std::byte> odd_in(odd_out.size());
        auto r2 = comm.irecv(std::span<std::byte>(odd_in), prev, 10);
        auto s2 = comm.isend(std::span<const std::byte>(odd_out), next, 10);
        r2.wait();
        s2.wait();
        expect(std::all_of(odd_in.begin(), odd_in.end(),
                           [&](std::byte b) { return b == std::byte{static_cast<unsigned char>(prev)}; }),
               "byte message corrupted");
    }
}

/// Hundreds of receives posted before their sends, in reverse tag order, completed with wait_all.
template <hitch::communicator C>
void many_outstanding(C& comm, int count = 300) {
    const int p = comm.size();
    const int next = (comm.rank() + 1) % p, prev = (comm.rank() - 1 + p) % p;
    std::vector<double> in(static_cast<std::size_t>(count), -1.0), out(static_cast<std::size_t>(count));
    std::vector<typename C::request> requests;
    for (int t = count - 1; t >= 0; --t)
        requests.push_back(comm.irecv(std::span<double>(&in[static_cast<std::size_t>(t)], 1), prev, 100 + t));
    for (int t = 0; t < count; ++t) {
        out[static_cast<std::size_t>(t)] = comm.rank() * 1000.0 + t;
        requests.push_back(comm.isend(std::span<const double>(&out[static_cast<std::size_t>(t)], 1), next, 100 + t));
    }
    hitch::wait_all(requests, comm.timeout());
    for (int t = 0; t < count; ++t) expect(in[static_cast<std::size_t>(t)] == prev * 1000.0 + t, "outstanding value");
}

/// split by parity with reversed keys; the sub-communicator's ranks, barrier and traffic are checked.
template <hitch::communicator C>
void split_groups(C& comm) {
    const int p = comm.size(), me = comm.rank();
    C sub = comm.split(me % 2, p - me);  // reverse order inside each group
    std::vector<int> members;
    for (int r = p - 1; r >= 0; --r)
        if (r % 2 == me % 2) members.push_back(r);
    expect(sub.size() == static_cast<int>(members.size()), "split size");
    expect(members[static_cast<std::size_t>(sub.rank())] == me, "split rank order");
    sub.barrier();
    // ring inside the group carries the parent rank; traffic on the parent with the same tag must not interfere
    const int q = sub.size();
    int got = -1, parent_got = -1;
    const int mine = me;
    auto pr = comm.irecv(std::span<int>(&parent_got, 1), (me - 1 + p) % p, 7);
    auto r = sub.irecv(std::span<int>(&got, 1), (sub.rank() - 1 + q) % q, 7);
    auto s = sub.isend(std::span<const int>(&mine, 1), (sub.rank() + 1) % q, 7);
    auto ps = comm.isend(std::span<const int>(&mine, 1), (me + 1) % p, 7);
    r.wait();
    s.wait();
    pr.wait();
    ps.wait();
    expect(got == members[static_cast<std::size_t>((sub.rank() - 1 + q) % q)], "split traffic");
    expect(parent_got == (me - 1 + p) % p, "parent traffic");
    C again = sub.split(0, 0);  // a split of a split
    expect(again.size() == sub.size() && again.rank() == sub.rank(), "nested split");
    again.barrier();
    comm.barrier();
}

/// Rank 0 receives one message from every other rank with any_source, sized by probe first.
template <hitch::communicator C>
void any_source_with_probe(C& comm) {
    const int p = comm.size();
    if (comm.rank() == 0) {
        std::vector<int> seen(static_cast<std::size_t>(p), 0);
        for (int k = 1; k < p; ++k) {
            const hitch::message_info info = comm.probe(hitch::any_source, 21);
            expect(info.source >= 1 && info.source < p && info.tag == 21, "probe info");
            expect(info.bytes == static_cast<std::size_t>(info.source) * sizeof(float), "probe bytes");
            std::vector<float> data(info.bytes / sizeof(float));
            auto r = comm.irecv(std::span<float>(data), info.source, 21);
            r.wait();
            expect(r.status().source == info.source, "recv source");
            for (float x : data) expect(x == static_cast<float>(info.source), "payload");
            ++seen[static_cast<std::size_t>(info.source)];
        }
        for (int k = 1; k < p; ++k) expect(seen[static_cast<std::size_t>(k)] == 1, "each sender seen once");
    } else {
        std::vector<float> data(static_cast<std::size_t>(comm.rank()), static_cast<float>(comm.rank()));
        comm.isend(std::span<const float>(data), 0, 21).wait();
    }
    comm.barrier();
}

/// Peers and tags outside their ranges are config_error, before anything is sent.
template <hitch::communicator C>
void bad_arguments(C& comm) {
    float x = 0;
    auto throws_config = [](auto&& f) {
        try {
            f();
        } catch (const hitch::config_error&) {
            return true;
        }
        return false;
    };
    expect(throws_config([&] { (void)comm.isend(std::span<const float>(&x, 1), comm.size(), 0); }), "peer == size");
    expect(throws_config([&] { (void)comm.isend(std::span<const float>(&x, 1), -1, 0); }), "send to any_source");
    expect(throws_config([&] { (void)comm.irecv(std::span<float>(&x, 1), comm.size() + 5, 0); }), "recv peer");
    expect(throws_config([&] { (void)comm.irecv(std::span<float>(&x, 1), -7, 0); }), "negative peer");
    expect(throws_config([&] { (void)comm.isend(std::span<const float>(&x, 1), 0, -1); }), "negative tag");
    expect(throws_config([&] { (void)comm.split(-1, 0); }), "negative color");
    expect(throws_config([&] { comm.set_timeout(hitch::seconds_f(-1.0)); }), "negative timeout");
}

/// A receive nobody sends to: timeout_error within the deadline plus slack (on the communicator's clock), naming
/// the peer and tag; then the communicator still works.
template <hitch::communicator C>
void receive_times_out(C& comm, double timeout_s = 0.3) {
    const auto saved = comm.timeout();
    comm.set_timeout(hitch::seconds_f(timeout_s));
    float x = 0;
    const auto start = hitch::now_on(comm);  // virtual time on comm::simulated
    bool timed_out = false;
    try {
        comm.irecv(std::span<float>(&x, 1), comm.rank(), 55).wait();
    } catch (const hitch::timeout_error& e) {
        timed_out = true;
        const std::string what = e.what();
        expect(what.find("tag 55") != std::string::npos, "timeout message names the tag: " + what);
        expect(what.find("rank " + std::to_string(comm.rank())) != std::string::npos, "names the peer: " + what);
    }
    const double waited = std::chrono::duration<double>(hitch::now_on(comm) - start).count();
    expect(timed_out, "a receive nobody sends to must time out");
    expect(waited >= timeout_s * 0.95 && waited < timeout_s + 2.0,
           "timed out after " + std::to_string(waited) + " s for a " + std::to_string(timeout_s) + " s deadline");
    comm.set_timeout(saved);
    // The cancelled receive must not swallow a later message with the same tag.
    const float y = 4.0f;
    auto s = comm.isend(std::span<const float>(&y, 1), comm.rank(), 55);
    comm.irecv(std::span<float>(&x, 1), comm.rank(), 55).wait();
    s.wait();
    expect(x == 4.0f, "message after a cancelled receive");
    comm.barrier();
}

/// A message of the wrong size is reported on the receiving side, larger or smaller, never truncated silently.
template <hitch::communicator C>
void size_mismatch_reported(C& comm) {
    std::vector<float> out(100, 1.0f);
    for (std::size_t recv_size : {std::size_t{101}, std::size_t{99}}) {
        std::vector<float> in(recv_size);
        auto s = comm.isend(std::span<const float>(out), comm.rank(), 77);
        bool reported = false;
        try {
            comm.irecv(std::span<float>(in), comm.rank(), 77).wait();
        } catch (const hitch::comm_error& e) {
            reported = std::string(e.what()).find("mismatch") != std::string::npos;
        }
        s.wait();
        expect(reported, "size mismatch (" + std::to_string(recv_size) + " vs 100 floats) must be reported");
    }
    comm.barrier();
}

}  // namespace hitch_test
