#pragma once
// hitch::communicator<C>: point-to-point messages between the ranks of a group. Modelled by comm::local (threads
// as ranks) and comm::mpi. Every collective in hitch is written against
// this concept, so a user's own transport plugs in by modelling it.
//
//   c.rank(), c.size()                    this rank and the group size
//   c.isend(std::span<const T>, peer, tag) -> C::request      non-blocking; T an element type (hitch/core/dtype.hpp)
//   c.irecv(std::span<T>, peer, tag)       -> C::request      peer may be hitch::any_source; the message must
//                                                              have exactly the span's size, else comm_error
//   c.probe(peer, tag) -> message_info     blocks until a matching message is pending; gives its source and bytes
//   c.barrier()                            every rank arrives or timeout_error names who did not
//   c.split(color, key) -> C               sub-communicators (color >= 0), ranks ordered by (key, old rank)
//   c.timeout(), c.set_timeout(seconds)    the deadline of every blocking call on this communicator
//   c.max_tag()                            tags are in [0, max_tag()]
//   C::name                                static constexpr std::string_view, for messages ("comm::local")
//
// C::request models hitch::request: test() (non-blocking), wait() (communicator's deadline), wait(deadline),
// status() after completion, describe() for error messages. A request destroyed while pending is cancelled.
// Messages between one pair of ranks with the same tag arrive in the order they were sent.
//
// A communicator with its own time (a simulated cluster on virtual time) models has_clock (c.clock() ->
// const clock_source&); blocking calls build their deadlines with deadline_for(comm, timeout).

#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/core/tensor.hpp"

namespace hitch {

/// Receive from whichever rank sends first.
inline constexpr int any_source = -1;

/// What a completed receive or a probe learned about the message.
struct message_info {
    int source = -1;
    int tag = -1;
    std::size_t bytes = 0;
};

template <class R>
concept request_can_test = requires(R& r) {
    { r.test() } -> std::convertible_to<bool>;
};

template <class R>
concept request_can_wait = requires(R& r, const deadline& d) {
    r.wait();
    r.wait(d);
};

template <class R>
concept request_has_status = requires(const R& r) {
    { r.status() } -> std::convertible_to<message_info>;
    { r.describe() } -> std::convertible_to<std::string>;
};

/// A handle to a non-blocking operation.
template <class R>
concept request = std::movable<R> && request_can_test<R> && request_can_wait<R> && request_has_status<R>;

template <class C>
concept communicator_has_rank_and_size = requires(const C& c) {
    { c.rank() } -> std::convertible_to<int>;
    { c.size() } -> std::convertible_to<int>;
};

template <class C>
concept communicator_has_point_to_point =
    requires(C& c, std::span<const std::byte> out, std::span<std::byte> in, std::span<const float> fout,
             std::span<float> fin, int peer, int tag) {
        typename C::request;
        requires request<typename C::request>;
        { c.isend(out, peer, tag) } -> std::same_as<typename C::request>;
        { c.irecv(in, peer, tag) } -> std::same_as<typename C::request>;
        { c.isend(fout, peer, tag) } -> std::same_as<typename C::request>;
        { c.irecv(fin, peer, tag) } -> std::same_as<typename C::request>;
        { c.probe(peer, tag) } -> std::convertible_to<message_info>;
        { c.max_tag() } -> std::convertible_to<int>;
    };

template <class C>
concept communicator_has_barrier = requires(C& c) { c.barrier(); };

template <class C>
concept communicator_has_split = requires(C& c, int color, int key) {
    { c.split(color, key) } -> std::same_as<C>;
};

template <class C>
concept communicator_has_deadline = requires(C& c, const C& cc, seconds_f t) {
    { cc.timeout() } -> std::convertible_to<seconds_f>;
    c.set_timeout(t);
};

template <class C>
concept communicator_has_name = requires {
    { C::name } -> std::convertible_to<std::string_view>;
};

/// A group of ranks that exchange typed point-to-point messages with deadlines.
template <class C>
concept communicator = std::movable<C> && communicator_has_rank_and_size<C> && communicator_has_point_to_point<C> &&
                       communicator_has_barrier<C> && communicator_has_split<C> && communicator_has_deadline<C> &&
                       communicator_has_name<C>;

/// Tags from collective_tag_base(comm) to comm.max_tag() are reserved for hitch's collectives (all-reduce schedules,
/// agreement checks); a program that sends its own point-to-point messages on a communicator it also hands to hitch
/// keeps its tags below. With MPICH (tag_ub = 2^28 - 1) the reserved range starts at 2^27.
template <class C>
    requires communicator_has_point_to_point<C>
[[nodiscard]] int collective_tag_base(const C& comm) {
    return comm.max_tag() / 2 + 1;
}

/// Waits for every request in `requests` with one deadline for the whole set (the given timeout from now).
/// On expiry the timeout_error names the first request still pending; the rest are cancelled when destroyed.
template <class Range>
void wait_all(Range&& requests, seconds_f timeout) {
    const deadline limit(timeout);
    for (auto& r : requests) r.wait(limit);
}

// ---------------------------------------------------------------------------------------------------------------
// Optional capabilities. A communicator declares what it can do beyond messages; schedules, the transport and
// trainers ask for these concepts instead of for a concrete communicator, so a new one (NCCL, a simulated
// cluster) gets the fast paths by declaring its capabilities.
// ---------------------------------------------------------------------------------------------------------------

/// A pointer valid on one rank is valid on every rank (`static constexpr bool shares_address_space = true`, as on
/// comm::local): the transport's direct path reads a peer's buffer in place.
template <class C>
concept shares_address_space = requires { requires static_cast<bool>(C::shares_address_space); };

/// `c.node_layout()` says which node each rank runs on (a hitch::node_layout); it may be collective.
template <class C>
concept has_node_layout = requires(C& c) {
    { c.node_layout() } -> std::convertible_to<node_layout>;
};

/// The node layout of `c` (collective where c.node_layout() is); a communicator that cannot tell is taken as one
/// node per rank, so a rank never assumes it shares a machine it may not share.
template <class C>
[[nodiscard]] node_layout node_layout_of(C& c) {
    if constexpr (has_node_layout<C>) {
        return c.node_layout();
    } else {
        node_layout out;
        out.nodes = c.size();
        for (int r = 0; r < c.size(); ++r) out.node_of_rank.push_back(r);
        return out;
    }
}

/// This rank's place among the ranks of its node, and how many there are (Horovod's hvd.local_rank() and
/// hvd.local_size()): bind device local_rank(c) of a node with one per rank. Collective where the layout is.
template <class C>
[[nodiscard]] int local_rank(C& c) {
    return node_layout_of(c).local_rank(c.rank());
}
template <class C>
[[nodiscard]] int local_size(C& c) {
    return node_layout_of(c).local_size(c.rank());
}

/// Collective `c.map_node_memory(bytes_per_rank)`: memory every rank can read and write (POSIX shared memory with
/// the peers on one node), a pointer-like handle whose `part(r)` is rank r's share; null when the ranks do not all
/// run on one node. The transport's staged path builds its pipes in it.
template <class C>
concept maps_node_memory = requires(C& c, std::size_t bytes_per_rank, int r) {
    { static_cast<bool>(c.map_node_memory(bytes_per_rank)) };
    { c.map_node_memory(bytes_per_rank)->part(r) } -> std::convertible_to<std::byte*>;
};

/// `c.carries(space)`: whether sends may read from, and receives write into, memory in that space (a CUDA-aware
/// communicator carries memory_space::cuda).
template <class C>
concept carries_device_memory = requires(const C& c, memory_space space) {
    { c.carries(space) } -> std::convertible_to<bool>;
};
/// A communicator that measures time on its own clock (virtual time in a simulated cluster).
template <class C>
concept has_clock = requires(const C& c) {
    { c.clock() } -> std::convertible_to<const clock_source&>;
};

/// The deadline `timeout` from now on the communicator's clock: its own where it has one, else the steady clock.
template <class C>
[[nodiscard]] deadline deadline_for(const C& comm, seconds_f timeout) {
    if constexpr (has_clock<C>)
        return deadline(timeout, comm.clock());
    else
        return deadline(timeout);
}

/// Now on the communicator's clock (its own where it has one, else the steady clock): what its deadlines measure,
/// and what a timing of its traffic (automatic's calibration) must read.
template <class C>
[[nodiscard]] clock_source::time_point now_on(const C& comm) {
    if constexpr (has_clock<C>)
        return comm.clock().now();
    else
        return std::chrono::steady_clock::now();
}

/// A communicator that runs a rank's extra threads itself, on its own time: `c.start_thread(f)` runs f() as another
/// thread of this rank and returns a `C::thread` (joinable(), join()), and those threads wait for each other on a
/// `C::condition_variable` (wait(std::unique_lock<std::mutex>&, pred), notify_one(), notify_all()). comm::simulated
/// does: a rank's exchange worker must overlap its computation in virtual time, which a system thread cannot. Code
/// that starts a thread for a rank (data_parallel's exchange worker, a co-located parameter server) goes through
/// rank_threads<C>.
template <class C>
concept starts_rank_threads = requires(C& c, std::function<void()> f) {
    typename C::thread;
    typename C::condition_variable;
    { c.start_thread(std::move(f)) } -> std::same_as<typename C::thread>;
};

/// The threads of a rank of C: the communicator's own where it starts them (starts_rank_threads), else system
/// threads.
template <class C>
struct rank_threads {
    using thread = std::thread;
    using condition_variable = std::condition_variable;
    [[nodiscard]] static thread start(C&, std::function<void()> f) { return std::thread(std::move(f)); }
};
template <starts_rank_threads C>
struct rank_threads<C> {
    using thread = typename C::thread;
    using condition_variable = typename C::condition_variable;
    [[nodiscard]] static thread start(C& c, std::function<void()> f) { return c.start_thread(std::move(f)); }
};

/// Returns true when C models communicator; otherwise fails to compile with one sentence naming the first
/// requirement C misses and what to write. Use it where a user's communicator first meets hitch:
/// `static_assert(check_communicator<C>());`.
template <class C>
consteval bool check_communicator() {
    if constexpr (!std::movable<C>) {
        static_assert(std::movable<C>,
                      "hitch::communicator: the communicator type cannot be moved: give it a move "
                      "constructor and a move assignment");
    } else if constexpr (!communicator_has_rank_and_size<C>) {
        static_assert(communicator_has_rank_and_size<C>,
                      "hitch::communicator: the communicator type has no rank or "
                      "size: add `int rank() const` and `int size() const`");
    } else if constexpr (!communicator_has_point_to_point<C>) {
        static_assert(communicator_has_point_to_point<C>,
                      "hitch::communicator: the communicator type cannot send or receive: add a nested `request` "
                      "type (test(), wait(), wait(deadline), status(), describe()), `request isend(std::span<const "
                      "T>, int peer, int tag)`, `request irecv(std::span<T>, int peer, int tag)`, "
                      "`message_info probe(int peer, int tag)` and `int max_tag() const`");
    } else if constexpr (!communicator_has_barrier<C>) {
        static_assert(communicator_has_barrier<C>,
                      "hitch::communicator: the communicator type has no barrier: add "
                      "`void barrier()`");
    } else if constexpr (!communicator_has_split<C>) {
        static_assert(communicator_has_split<C>,
                      "hitch::communicator: the communicator type cannot split: add "
                      "`C split(int color, int key)` returning the same type");
    } else if constexpr (!communicator_has_deadline<C>) {
        static_assert(communicator_has_deadline<C>,
                      "hitch::communicator: the communicator type has no timeout: add "
                      "`hitch::seconds_f timeout() const` and "
                      "`void set_timeout(hitch::seconds_f)`");
    } else if constexpr (!communicator_has_name<C>) {
        static_assert(communicator_has_name<C>,
                      "hitch::communicator: the communicator type has no name: add "
                      "`static constexpr std::string_view name = \"...\";`");
    }
    return true;
}

}  // namespace hitch
