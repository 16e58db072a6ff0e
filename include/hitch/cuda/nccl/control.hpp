#pragma once
// hitch::cuda::nccl_control: cuda::nccl's control channel, small host messages between the ranks over the
// communicator it was bootstrapped from (comm::local threads, comm::mpi processes, or any hitch::communicator with a
// non-blocking probe). It carries what NCCL cannot: each message's header (tag, size, sequence number), the
// handshake that orders the NCCL transfers, host payloads, barriers and the agreements of split and the native
// collectives (cuda/nccl/detail/engine.hpp says how). Host only.
//
// control_over<C> owns a private duplicate of the bootstrap communicator (C::split), so the channel's messages never
// meet the user's; every message travels on one tag, so messages between two ranks arrive in the order they were
// sent.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/concepts/communicator.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/node_layout.hpp"

namespace hitch::cuda {

/// The control channel as cuda::nccl uses it: queued sends that never block, and polling for whatever arrived.
/// Implementations need not be thread-safe: cuda::nccl calls one channel from one thread at a time.
class nccl_control {
public:
    nccl_control() = default;
    nccl_control(const nccl_control&) = delete;
    nccl_control& operator=(const nccl_control&) = delete;
    virtual ~nccl_control() = default;

    [[nodiscard]] virtual int rank() const = 0;
    [[nodiscard]] virtual int size() const = 0;
    /// Name of the bootstrap communicator, for messages ("comm::mpi").
    [[nodiscard]] virtual std::string_view bootstrap_name() const = 0;
    /// Starts sending `message` to rank `to`; never waits for the receiver. Returns a number for sent().
    virtual std::uint64_t send(int to, std::vector<std::byte> message) = 0;
    /// True once the send numbered `id` has completed (the bootstrap communicator has taken its bytes), as of the
    /// last poll().
    [[nodiscard]] virtual bool sent(std::uint64_t id) = 0;
    /// True when no send is still in flight.
    [[nodiscard]] virtual bool idle() = 0;
    /// The next message that has arrived from any rank (its source and bytes), or nothing. Throws comm_error when
    /// the bootstrap communicator has failed (e.g. a comm::local world aborted because another rank threw).
    [[nodiscard]] virtual std::optional<std::pair<int, std::vector<std::byte>>> poll() = 0;
    /// Which node each rank of the channel runs on.
    [[nodiscard]] virtual node_layout layout() = 0;
};

/// A bootstrap communicator usable as a control channel: a hitch::communicator with a non-blocking probe
/// (comm::local and comm::mpi have one).
template <class C>
concept control_communicator = communicator<C> && requires(C& c, int peer, int tag) {
    { c.iprobe(peer, tag) } -> std::convertible_to<std::optional<message_info>>;
};

/// The control channel over a duplicate of a bootstrap communicator.
template <control_communicator C>
class control_over final : public nccl_control {
public:
    /// Takes `dup`, a communicator private to this channel (make it with bootstrap.split(0, bootstrap.rank())).
    explicit control_over(C dup) : comm_(std::move(dup)) {}
    ~control_over() override = default;

    [[nodiscard]] int rank() const override { return comm_.rank(); }
    [[nodiscard]] int size() const override { return comm_.size(); }
    [[nodiscard]] std::string_view bootstrap_name() const override { return C::name; }

    std::uint64_t send(int to, std::vector<std::byte> message) override {
        const std::uint64_t id = next_id_++;
        outgoing& entry = outbox_[id];
        entry.bytes = std::move(message);
        entry.request = comm_.isend(std::span<const std::byte>(entry.bytes), to, tag);
        return id;
    }
    [[nodiscard]] bool sent(std::uint64_t id) override { return outbox_.count(id) == 0; }
    [[nodiscard]] bool idle() override {
        finish_sends();
        return outbox_.empty();
    }

    [[nodiscard]] std::optional<std::pair<int, std::vector<std::byte>>> poll() override {
        finish_sends();
        if constexpr (requires { comm_.throw_if_aborted(std::string_view()); })
            comm_.throw_if_aborted("cuda::nccl's control channel");
        const std::optional<message_info> info = comm_.iprobe(any_source, tag);
        if (!info) return std::nullopt;
        std::vector<std::byte> bytes(info->bytes);
        auto r = comm_.irecv(std::span<std::byte>(bytes), info->source, tag);
        r.wait();  // probed: it is there
        return std::pair<int, std::vector<std::byte>>{info->source, std::move(bytes)};
    }

    [[nodiscard]] node_layout layout() override { return node_layout_of(comm_); }

private:
    static constexpr int tag = 1;

    struct outgoing {
        std::vector<std::byte> bytes;
        typename C::request request;
    };

    /// Drops the sends that completed (the rest keep their bytes alive). Called once per poll.
    void finish_sends() {
        for (auto it = outbox_.begin(); it != outbox_.end();) {
            if (it->second.request.test())
                it = outbox_.erase(it);
            else
                ++it;
        }
    }

    C comm_;
    std::map<std::uint64_t, outgoing> outbox_;  // by number: sent() looks one up
    std::uint64_t next_id_ = 1;
};

}  // namespace hitch::cuda
