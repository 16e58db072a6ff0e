#pragma once
// hitch::allreduce::node_path<C>: the transport path of a communicator whose ranks span several nodes (real, or
// emulated with HITCH_EMULATE_NODES). Peers on this rank's node go through the staged path's pipes, mapped over
// the node's ranks only (attach_pipes in transport/shared_state.hpp); peers on other nodes through messages. Each
// operation is the one of the path its peer takes, so nothing is shared across nodes.
//
// Both halves make progress only when someone polls them (the pipes stage pieces when a rank waits, MPI moves a
// large message only inside MPI calls), and a rank blocked on one half can hold up a chain of peers waiting on
// the other (a ring across two nodes: a rank waiting for its remote message stops staging the pieces its local
// successor waits for). So every test and wait here polls both halves.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "hitch/allreduce/detail/pipes.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport/message_path.hpp"
#include "hitch/allreduce/transport/staged_path.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"

namespace hitch::allreduce {

template <communicator C>
class node_path {
    using remote_path = message_path<C>;

public:
    /// A receive from another node lands in its slot, a combining one too (messages); the traits are the
    /// stricter of the two halves.
    static constexpr bool needs_slots = true;
    static constexpr bool combine_needs_slot = true;
    static constexpr bool reads_in_place = false;

    /// A send in flight, staged or as a message.
    class outgoing {
    public:
        outgoing() = default;
        bool test() {
            return std::visit(
                [&](auto& o) {
                    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(o)>, std::monostate>) {
                        return true;
                    } else {
                        path_->progress_other(op_.index() == 1);
                        return static_cast<bool>(o.test());
                    }
                },
                op_);
        }
        void wait(const deadline& limit) {
            if (poll_until(limit, [&] { return test(); })) return;
            std::visit(
                [&](auto& o) {
                    if constexpr (!std::is_same_v<std::remove_cvref_t<decltype(o)>, std::monostate>)
                        o.wait(limit);  // expired: the half's own wait names what is missing
                },
                op_);
        }
        [[nodiscard]] bool active() const noexcept {
            return std::visit(
                [](const auto& o) {
                    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(o)>, std::monostate>)
                        return false;
                    else
                        return o.active();
                },
                op_);
        }

    private:
        friend class node_path;
        std::variant<std::monostate, staged_path::outgoing, typename remote_path::outgoing> op_;
        node_path* path_ = nullptr;
    };

    /// A receive in flight, from the pipes or as a message; data() as on that half.
    template <class T>
    class incoming {
    public:
        incoming() = default;
        bool test() {
            return std::visit(
                [&](auto& i) {
                    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(i)>, std::monostate>) {
                        return true;
                    } else {
                        path_->progress_other(op_.index() == 1);
                        return static_cast<bool>(i.test());
                    }
                },
                op_);
        }
        void wait(const deadline& limit) {
            if (poll_until(limit, [&] { return test(); })) return;
            std::visit(
                [&](auto& i) {
                    if constexpr (!std::is_same_v<std::remove_cvref_t<decltype(i)>, std::monostate>) i.wait(limit);
                },
                op_);
        }
        [[nodiscard]] const T* data() const noexcept {
            return std::visit(
                [](const auto& i) -> const T* {
                    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(i)>, std::monostate>)
                        return nullptr;
                    else
                        return i.data();
                },
                op_);
        }
        [[nodiscard]] std::size_t size() const noexcept {
            return std::visit(
                [](const auto& i) -> std::size_t {
                    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(i)>, std::monostate>)
                        return 0;
                    else
                        return i.size();
                },
                op_);
        }
        [[nodiscard]] static constexpr bool writable() noexcept { return false; }
        void write_back(const T*) {
            throw config_error(
                "hitch::allreduce::transport::incoming::write_back: the sender's buffer is not "
                "writable here (a direct send_writable() that has arrived and is not released)");
        }
        void release() noexcept {
            std::visit(
                [](auto& i) {
                    if constexpr (!std::is_same_v<std::remove_cvref_t<decltype(i)>, std::monostate>) i.release();
                },
                op_);
        }

    private:
        friend class node_path;
        std::variant<std::monostate, staged_path::template incoming<T>, typename remote_path::template incoming<T>> op_;
        node_path* path_ = nullptr;
    };

    /// Starts call `sequence` on `engine`, the pipes among this rank's node; `local_of[r]` is rank r's place among
    /// the node's `local_size` ranks (-1 on another node).
    node_path(C& comm, detail::pipes& engine, const std::vector<int>& local_of, std::uint64_t sequence, int local_size,
              std::chrono::nanoseconds local_spin, std::chrono::nanoseconds remote_spin)
        : comm_(comm),
          engine_(engine),
          local_of_(local_of),
          local_(engine, sequence, local_of.at(static_cast<std::size_t>(comm.rank())), local_size, local_spin),
          remote_(comm, remote_spin) {}
    node_path(const node_path&) = delete;
    node_path& operator=(const node_path&) = delete;

    template <element_type T>
    [[nodiscard]] outgoing send(int peer, int channel, int tag, std::span<const T> data, bool writable) {
        outgoing op;
        op.path_ = this;
        if (const int l = local_index(peer); l >= 0)
            op.op_.template emplace<staged_path::outgoing>(local_.send(l, channel, tag, data, writable));
        else
            op.op_.template emplace<typename remote_path::outgoing>(remote_.send(peer, channel, tag, data, writable));
        return op;
    }
    template <element_type T>
    [[nodiscard]] incoming<T> receive(int peer, int channel, int tag, std::size_t count, std::span<T> slot) {
        return route<T>(peer,
                        [&](auto& half, int to) { return half.template receive<T>(to, channel, tag, count, slot); });
    }
    template <element_type T>
    [[nodiscard]] incoming<T> receive_into(int peer, int channel, int tag, std::span<T> dst) {
        return route<T>(peer, [&](auto& half, int to) { return half.template receive_into<T>(to, channel, tag, dst); });
    }
    template <floating_element T>
    [[nodiscard]] incoming<T> receive_combine(int peer, int channel, int tag, std::span<T> dst,
                                              const combine_spec& spec, std::span<T> slot) {
        return route<T>(peer, [&](auto& half, int to) {
            return half.template receive_combine<T>(to, channel, tag, dst, spec, slot);
        });
    }

private:
    [[nodiscard]] int local_index(int peer) const {
        if (peer < 0 || peer >= static_cast<int>(local_of_.size()))
            throw config_error(hitch::detail::concat("hitch::allreduce::transport: peer ", peer,
                                                     " is outside the allowed range [0, ", local_of_.size(), ")"));
        return local_of_[static_cast<std::size_t>(peer)];
    }

    template <class T, class Post>
    [[nodiscard]] incoming<T> route(int peer, Post&& post) {
        incoming<T> op;
        op.path_ = this;
        if (const int l = local_index(peer); l >= 0)
            op.op_.template emplace<staged_path::template incoming<T>>(post(local_, l));
        else
            op.op_.template emplace<typename remote_path::template incoming<T>>(post(remote_, peer));
        return op;
    }

    /// While waiting on one half, keep the other moving (see the file comment). A probe moves the communicator
    /// without a request of its own (comm::mpi matches its pending receives and enters MPI's progress engine); it
    /// is taken every few polls, the pipes on every poll.
    void progress_other(bool waiting_on_pipes) {
        if (waiting_on_pipes)
            progress_remote();
        else
            engine_.progress();
    }
    void progress_remote() {
        if constexpr (requires(C& c) { c.iprobe(0, 0); })
            if ((++polls_ & 7) == 0) (void)comm_.iprobe(any_source, 0);
    }

    C& comm_;
    detail::pipes& engine_;
    const std::vector<int>& local_of_;
    staged_path local_;
    remote_path remote_;
    std::uint32_t polls_ = 0;
};

}  // namespace hitch::allreduce
