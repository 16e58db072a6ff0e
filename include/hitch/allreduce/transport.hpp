#pragma once
// hitch::allreduce::transport<C>: what a schedule sees of the communicator during one collective call.
//
// Schedules are written once against three primitives and a pipelined helper built from them:
//
//   send(peer, channel, data)          -> outgoing      complete once the peer has taken the data
//   receive(peer, channel, slot)       -> incoming<T>   a read-only view of the peer's data, valid until released
//   receive_into(peer, channel, dst)   -> incoming<T>   the peer's data copied into dst
//   exchange(to, out, from, in, ...)   send `out` while receiving into `in` (copied or combined), in segments
//
// How the bytes move is one of three paths (allreduce/transport/*_path.hpp, each a transport_path), chosen when
// the call starts from the communicator's capabilities (concepts/communicator.hpp) and the call's
// call_options::shared_memory: direct (shares_address_space<C>, e.g. comm::local: the receiver reads the sender's
// memory in place), staged (maps_node_memory<C> with every rank on one node, e.g. comm::mpi: pipes in shared
// memory), node (ranks on several nodes: the staged path's pipes with the peers of this rank's node, messages
// with the others), or message (every communicator: messages carry the data). The transport holds exactly one path, in
// a variant of only the paths C can take; the pipelined helpers dispatch once per call and then run on the path's own
// operations, so nothing per piece pays for the choice.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport/direct_path.hpp"
#include "hitch/allreduce/transport/message_path.hpp"
#include "hitch/allreduce/transport/node_path.hpp"
#include "hitch/allreduce/transport/path.hpp"
#include "hitch/allreduce/transport/scratch.hpp"
#include "hitch/allreduce/transport/shared_state.hpp"
#include "hitch/allreduce/transport/spin.hpp"
#include "hitch/allreduce/transport/staged_path.hpp"
#include "hitch/allreduce/transport/tags.hpp"
#include "hitch/allreduce/tuning.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"

namespace hitch::allreduce {

namespace detail {

[[nodiscard]] inline bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) noexcept {
    if (a_bytes == 0 || b_bytes == 0) return false;
    const auto x = reinterpret_cast<std::uintptr_t>(a);
    const auto y = reinterpret_cast<std::uintptr_t>(b);
    return x < y + b_bytes && y < x + a_bytes;
}

/// The paths a call on C may take: message always, direct, staged and node where C has the capability.
template <class C>
using paths_of = std::conditional_t<
    shares_address_space<C>,
    std::conditional_t<maps_node_memory<C>, std::variant<message_path<C>, direct_path<C>, staged_path, node_path<C>>,
                       std::variant<message_path<C>, direct_path<C>>>,
    std::conditional_t<maps_node_memory<C>, std::variant<message_path<C>, staged_path, node_path<C>>,
                       std::variant<message_path<C>>>>;

/// The operations of a set of paths (an empty alternative first: a default-constructed operation, already done).
template <class Paths>
struct operations_of;
template <class... P>
struct operations_of<std::variant<P...>> {
    using outgoing = std::variant<std::monostate, typename P::outgoing...>;
    template <class T>
    using incoming = std::variant<std::monostate, typename P::template incoming<T>...>;
    template <class Q>
    static constexpr bool offers = (std::is_same_v<Q, P> || ...);
    static constexpr bool all_paths = (transport_path<P> && ...);
};

template <class Op>
inline constexpr bool is_empty_op = std::is_same_v<std::remove_cvref_t<Op>, std::monostate>;

}  // namespace detail

/// One collective call's view of the communicator (see the file comment). Not thread-safe; one per call.
template <communicator C>
class transport {
    using paths = detail::paths_of<C>;
    using operations = detail::operations_of<paths>;
    static_assert(operations::all_paths, "every path of the transport models hitch::allreduce::transport_path");

public:
    using request_type = typename C::request;

    /// A send in flight.
    class outgoing {
    public:
        outgoing() = default;
        /// True once the buffer may be reused (message sent, staged, or the peer consumed it in place).
        bool test() {
            return std::visit(
                [](auto& o) {
                    if constexpr (detail::is_empty_op<decltype(o)>)
                        return true;
                    else
                        return static_cast<bool>(o.test());
                },
                op_);
        }
        void wait(const deadline& limit) {
            std::visit(
                [&](auto& o) {
                    if constexpr (!detail::is_empty_op<decltype(o)>) o.wait(limit);
                },
                op_);
        }
        [[nodiscard]] bool active() const noexcept {
            return std::visit(
                [](const auto& o) {
                    if constexpr (detail::is_empty_op<decltype(o)>)
                        return false;
                    else
                        return o.active();
                },
                op_);
        }

    private:
        friend class transport;
        template <class Op>
            requires(!std::is_same_v<std::remove_cvref_t<Op>, outgoing>)
        explicit outgoing(Op&& op) : op_(std::in_place_type<std::remove_cvref_t<Op>>, std::forward<Op>(op)) {}
        typename operations::outgoing op_;
    };

    /// A receive in flight: once ready(), data() points at the peer's `size()` elements (in scratch, or in the
    /// peer's own memory on the direct path) until release().
    template <class T>
    class incoming {
    public:
        incoming() = default;
        /// True once the data can be read (and, for receive_into, once it has been copied).
        bool test() {
            return std::visit(
                [](auto& i) {
                    if constexpr (detail::is_empty_op<decltype(i)>)
                        return true;
                    else
                        return static_cast<bool>(i.test());
                },
                op_);
        }
        void wait(const deadline& limit) {
            std::visit(
                [&](auto& i) {
                    if constexpr (!detail::is_empty_op<decltype(i)>) i.wait(limit);
                },
                op_);
        }
        [[nodiscard]] const T* data() const noexcept {
            return std::visit(
                [](const auto& i) -> const T* {
                    if constexpr (detail::is_empty_op<decltype(i)>)
                        return nullptr;
                    else
                        return i.data();
                },
                op_);
        }
        [[nodiscard]] std::size_t size() const noexcept {
            return std::visit(
                [](const auto& i) -> std::size_t {
                    if constexpr (detail::is_empty_op<decltype(i)>)
                        return 0;
                    else
                        return i.size();
                },
                op_);
        }
        /// True when the sender used send_writable() on the direct path: write_back() may store into its buffer.
        [[nodiscard]] bool writable() const noexcept {
            return std::visit(
                [](const auto& i) {
                    if constexpr (detail::is_empty_op<decltype(i)>)
                        return false;
                    else
                        return i.writable();
                },
                op_);
        }
        /// Stores `result` (size() elements) into the sender's buffer, where its data came from. Direct path,
        /// writable sends only; call before release().
        void write_back(const T* result) {
            std::visit(
                [&](auto& i) {
                    if constexpr (detail::is_empty_op<decltype(i)>)
                        throw config_error(
                            "hitch::allreduce::transport::incoming::write_back: the sender's buffer is "
                            "not writable here (a direct send_writable() that has arrived and is not "
                            "released)");
                    else
                        i.write_back(result);
                },
                op_);
        }
        /// Done reading: a direct sender may now reuse its buffer.
        void release() noexcept {
            std::visit(
                [](auto& i) {
                    if constexpr (!detail::is_empty_op<decltype(i)>) i.release();
                },
                op_);
        }

    private:
        friend class transport;
        template <class Op>
            requires(!std::is_same_v<std::remove_cvref_t<Op>, incoming>)
        explicit incoming(Op&& op) : op_(std::in_place_type<std::remove_cvref_t<Op>>, std::forward<Op>(op)) {}
        typename operations::template incoming<T> op_;
    };

    /// `shared_memory` asks for the direct path (C shares an address space) or the staged path (the group has
    /// pipes); without either the call takes the message path.
    transport(C& comm, std::uint64_t sequence, const deadline& limit, bool shared_memory, shared_state<C>& state)
        : comm_(comm),
          limit_(limit),
          state_(state),
          sequence_(sequence),
          tag_base_(call_tag_base(comm, sequence)),
          rank_(comm.rank()),
          size_(comm.size()),
          shared_memory_(shared_memory),
          path_(choose_path(comm, sequence, shared_memory, state)) {}
    transport(const transport&) = delete;
    transport& operator=(const transport&) = delete;

    [[nodiscard]] C& comm() noexcept { return comm_; }
    [[nodiscard]] int rank() const noexcept { return rank_; }
    [[nodiscard]] int size() const noexcept { return size_; }
    [[nodiscard]] const deadline& limit() const noexcept { return limit_; }
    [[nodiscard]] std::uint64_t sequence() const noexcept { return sequence_; }
    /// True on the direct path (ranks of one address space read each other's buffers in place).
    [[nodiscard]] bool direct() const noexcept { return on<direct_path<C>>(); }
    /// True when the call asked for shared memory (call_options::shared_memory), whichever path that gave.
    [[nodiscard]] bool shared_memory() const noexcept { return shared_memory_; }
    /// True on the staged path (shared-memory pipes between processes on one node).
    [[nodiscard]] bool staged() const noexcept { return on<staged_path>(); }
    /// True on the node path (ranks on several nodes: pipes with the peers of this rank's node, messages with the
    /// others).
    [[nodiscard]] bool node_staged() const noexcept { return on<node_path<C>>(); }
    /// True when the call's agreement check passed: every rank has entered this very call.
    [[nodiscard]] bool agreed() const noexcept { return agreed_; }
    void set_agreed(bool v) noexcept { agreed_ = v; }
    /// What calls on this communicator share (constants, caches).
    [[nodiscard]] shared_state<C>& state() noexcept { return state_; }

    /// `count` elements of scratch, valid until this transport is destroyed (or release_scratch(mark) below it).
    template <class T>
    [[nodiscard]] std::span<T> scratch(std::size_t count) {
        leases_.push_back(state_.arena.acquire(count * sizeof(T)));
        return {reinterpret_cast<T*>(leases_.back().data()), count};
    }
    /// How much scratch is held now, for release_scratch().
    [[nodiscard]] std::size_t scratch_mark() const noexcept { return leases_.size(); }
    /// Gives back to the arena the scratch taken since `mark` (callers that run many schedules on one transport,
    /// such as automatic's probes, so each run reuses the same memory instead of taking fresh pages).
    void release_scratch(std::size_t mark) noexcept {
        while (leases_.size() > mark) leases_.pop_back();
    }

    /// Sends `data` to `peer` on `channel`. The buffer must stay untouched until the returned operation completes.
    template <element_type T>
    [[nodiscard]] outgoing send(int peer, int channel, std::span<const T> data) {
        const int tag = tag_of(channel);
        return std::visit([&](auto& p) { return outgoing(p.send(peer, channel, tag, data, false)); }, path_);
    }
    /// As send(), and on the direct path the receiver may also store a result into `data` (write_back) before it
    /// releases it; the send completes after that. On the other paths it is a plain send.
    template <element_type T>
    [[nodiscard]] outgoing send_writable(int peer, int channel, std::span<T> data) {
        const int tag = tag_of(channel);
        return std::visit([&](auto& p) { return outgoing(p.send(peer, channel, tag, std::span<const T>(data), true)); },
                          path_);
    }

    /// Receives `count` elements from `peer` on `channel`. On the message and staged paths they land in `slot` (at
    /// least `count` elements); on the direct path data() points into the sender's buffer and `slot` is not used
    /// (it may be empty: see needs_slots()).
    template <floating_element T>
    [[nodiscard]] incoming<T> receive(int peer, int channel, std::size_t count, std::span<T> slot) {
        const int tag = tag_of(channel);
        return std::visit([&](auto& p) { return incoming<T>(p.receive(peer, channel, tag, count, slot)); }, path_);
    }
    /// Receives `dst.size()` elements from `peer` on `channel` and combines them into `dst` per `spec` (dst =
    /// op(theirs, dst), or op(dst, theirs)); the receive completes once they are combined and holds nothing then.
    /// On the staged path each piece is combined as it arrives, straight from the sender's slot, and `slot` is not
    /// used; otherwise the message lands in `slot` (message path) or is read in place (direct path) and is
    /// combined on arrival. Like a receive_into, `dst` belongs to the receive until it completes.
    template <floating_element T>
    [[nodiscard]] incoming<T> receive_combine(int peer, int channel, std::span<T> dst, const combine_spec& spec,
                                              std::span<T> slot) {
        const int tag = tag_of(channel);
        return std::visit([&](auto& p) { return incoming<T>(p.receive_combine(peer, channel, tag, dst, spec, slot)); },
                          path_);
    }
    /// False on the direct path, where receive() reads the sender's memory and needs no scratch slot.
    [[nodiscard]] bool needs_slots() const noexcept {
        return std::visit([](const auto& p) { return std::remove_cvref_t<decltype(p)>::needs_slots; }, path_);
    }
    /// Receives `dst.size()` elements from `peer` on `channel` into `dst`.
    template <element_type T>
    [[nodiscard]] incoming<T> receive_into(int peer, int channel, std::span<T> dst) {
        const int tag = tag_of(channel);
        return std::visit([&](auto& p) { return incoming<T>(p.receive_into(peer, channel, tag, dst)); }, path_);
    }

    /// Sends `out` to `to` while receiving `in.size()` elements from `from` into `in` (either side may be -1: no
    /// such side), both cut into segments of `segment` elements. `out` and `in` must not overlap.
    template <element_type T>
    void exchange_copy(int to, std::span<const T> out, int from, std::span<T> in, std::size_t segment, int channel) {
        segment = std::max<std::size_t>(segment, 1);
        if (to >= 0 && from >= 0 && detail::overlaps(out.data(), out.size_bytes(), in.data(), in.size_bytes()))
            throw config_error("hitch::allreduce::transport::exchange_copy: the buffers overlap");
        std::visit([&](auto& p) { exchange_copy_on(p, to, out, from, in, segment, channel); }, path_);
    }

    /// Sends `out` to `to` while receiving `in.size()` elements from `from` and combining them into `in` per `spec`,
    /// in segments of `segment` elements with up to `depth` receives in flight (either side may be -1). `out` may
    /// overlap `in` (a recursive-doubling step): each segment is then combined aside and written back once the
    /// peer has taken our original.
    template <floating_element T>
    void exchange_reduce(int to, std::span<const T> out, int from, std::span<T> in, const combine_spec& spec,
                         std::size_t segment, int depth, int channel) {
        std::visit([&](auto& p) { exchange_reduce_on(p, to, out, from, in, spec, segment, depth, channel); }, path_);
    }

    /// Posts one send per segment of `out` (none when `to` < 0).
    template <element_type T>
    [[nodiscard]] std::vector<outgoing> post_sends(int to, std::span<const T> out, std::size_t segment, int channel) {
        std::vector<outgoing> sends;
        if (to < 0) return sends;
        segment = std::max<std::size_t>(segment, 1);
        sends.reserve(segments(out.size(), segment));
        for (std::size_t off = 0; off < out.size(); off += segment)
            sends.push_back(send<T>(to, channel, out.subspan(off, std::min(segment, out.size() - off))));
        return sends;
    }

    [[nodiscard]] static constexpr std::size_t segments(std::size_t n, std::size_t segment) noexcept {
        return segment == 0 ? 0 : (n + segment - 1) / segment;
    }

    /// The tag a channel uses in this call.
    [[nodiscard]] int tag_of(int channel) const {
        if (channel < 0 || channel >= channels_per_call)
            throw config_error(hitch::detail::concat("hitch::allreduce::transport: channel ", channel,
                                                     " is outside the allowed range [0, ", channels_per_call, ")"));
        return tag_base_ + channel;
    }

private:
    template <class P>
    [[nodiscard]] bool on() const noexcept {
        if constexpr (operations::template offers<P>)
            return std::holds_alternative<P>(path_);
        else
            return false;
    }

    static paths choose_path(C& comm, [[maybe_unused]] std::uint64_t sequence, bool shared_memory,
                             [[maybe_unused]] shared_state<C>& state) {
        // Threads of one process, or processes on one node, each with a core: poll before yielding.
        const auto spin = [&](bool polls) {
            return polls && comm.size() <= detail::cores() ? std::chrono::nanoseconds(tuning::transport_spin_wait)
                                                           : std::chrono::nanoseconds(0);
        };
        if constexpr (shares_address_space<C>) {
            if (shared_memory) return paths(std::in_place_type<direct_path<C>>, comm, comm.rank(), spin(true));
        } else if constexpr (maps_node_memory<C>) {
            if (shared_memory && state.pipes != nullptr)
                return paths(std::in_place_type<staged_path>, *state.pipes, sequence, comm.rank(), comm.size(),
                             spin(true));
            if (shared_memory && state.node_pipes != nullptr)
                return paths(std::in_place_type<node_path<C>>, comm, *state.node_pipes, state.local_of, sequence,
                             state.node_comm->size(), spin(true), spin(false));
        }
        return paths(std::in_place_type<message_path<C>>, comm, spin(shares_address_space<C>));
    }

    template <class P, element_type T>
    [[nodiscard]] std::vector<typename P::outgoing> post_sends_on(P& path, int to, std::span<const T> out,
                                                                  std::size_t segment, int channel) {
        std::vector<typename P::outgoing> sends;
        if (to < 0) return sends;
        sends.reserve(segments(out.size(), segment));
        for (std::size_t off = 0; off < out.size(); off += segment)
            sends.push_back(
                path.send(to, channel, tag_of(channel), out.subspan(off, std::min(segment, out.size() - off)), false));
        return sends;
    }

    template <class P, element_type T>
    void exchange_copy_on(P& path, int to, std::span<const T> out, int from, std::span<T> in, std::size_t segment,
                          int channel) {
        std::vector<typename P::template incoming<T>> recvs;
        if (from >= 0) {
            recvs.reserve(segments(in.size(), segment));
            for (std::size_t off = 0; off < in.size(); off += segment)
                recvs.push_back(path.receive_into(from, channel, tag_of(channel),
                                                  in.subspan(off, std::min(segment, in.size() - off))));
        }
        std::vector<typename P::outgoing> sends = post_sends_on(path, to, out, segment, channel);
        for (auto& r : recvs) r.wait(limit_);
        for (auto& s : sends) s.wait(limit_);
    }

    template <class P, floating_element T>
    void exchange_reduce_on(P& path, int to, std::span<const T> out, int from, std::span<T> in,
                            const combine_spec& spec, std::size_t segment, int depth, int channel) {
        segment = std::max<std::size_t>(segment, 1);
        depth = std::max(depth, 1);
        const std::size_t count = from >= 0 ? segments(in.size(), segment) : 0;
        const bool alias = to >= 0 && detail::overlaps(out.data(), out.size_bytes(), in.data(), in.size_bytes());
        std::vector<typename P::outgoing> sends = post_sends_on(path, to, out, segment, channel);
        const auto piece = [&](std::size_t j) {
            return in.subspan(j * segment, std::min(segment, in.size() - j * segment));
        };
        // Message path: `depth` scratch slots in rotation. Direct path: the peer's memory is read in place; one
        // slot is needed only when aliased. Staged path: pieces are combined straight from the pipe unless aliased.
        const bool in_place = !P::combine_needs_slot && (P::reads_in_place || !alias);
        const std::size_t slots =
            in_place ? (alias ? 1 : 0) : std::min<std::size_t>(static_cast<std::size_t>(depth), count);
        const std::size_t width = std::min(segment, in.size());
        std::span<T> space;
        if (count > 0 && slots > 0) space = scratch<T>(slots * width);
        const auto slot = [&](std::size_t j) { return space.subspan((j % slots) * width, piece(j).size()); };
        const std::size_t window = in_place ? count : slots;
        std::vector<typename P::template incoming<T>> recvs(std::max<std::size_t>(window, 1));
        const auto post = [&](std::size_t j) {
            const int tag = tag_of(channel);
            if (!alias)
                recvs[j % recvs.size()] =
                    path.receive_combine(from, channel, tag, piece(j), spec, slots > 0 ? slot(j) : std::span<T>());
            else if constexpr (P::reads_in_place)
                recvs[j % recvs.size()] = path.receive(from, channel, tag, piece(j).size(), std::span<T>());
            else
                recvs[j % recvs.size()] = path.receive(from, channel, tag, piece(j).size(), slot(j));
        };
        for (std::size_t j = 0; j < std::min(window, count); ++j) post(j);
        for (std::size_t j = 0; j < count; ++j) {
            auto& r = recvs[j % recvs.size()];
            r.wait(limit_);
            const std::span<T> dst = piece(j);
            if (!alias) {
                r.release();  // combined on arrival
            } else if constexpr (P::reads_in_place) {
                // The peer reads our original in place and we read its: combine aside, let it go on, and write
                // back once it has taken ours (waiting before reading would deadlock the two).
                T* aside = slot(j).data();
                detail::combine_into(aside, r.data(), dst.data(), dst.size(), spec);
                detail::charge_combine(comm(), dst.size_bytes());
                r.release();
                if (j < sends.size()) sends[j].wait(limit_);
                std::memcpy(dst.data(), aside, dst.size_bytes());
            } else {
                // Messages: once our segment has left, it can be overwritten in place.
                if (j < sends.size()) sends[j].wait(limit_);
                detail::combine_into(dst.data(), r.data(), dst.data(), dst.size(), spec);
                detail::charge_combine(comm(), dst.size_bytes());
                r.release();
            }
            if (j + window < count) post(j + window);
        }
        for (auto& s : sends) s.wait(limit_);
    }

    C& comm_;
    deadline limit_;
    shared_state<C>& state_;
    std::uint64_t sequence_;
    int tag_base_;
    int rank_;
    int size_;
    bool shared_memory_;
    bool agreed_ = false;
    std::vector<scratch_arena::lease> leases_;
    paths path_;  // last: a staged path ends its call before the scratch it may still point into is released
};

}  // namespace hitch::allreduce
