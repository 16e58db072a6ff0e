#pragma once
// Collectives on buffers outside host memory. The host floor knows no device: a memory space's own headers register
// a space_backend for that space when they are included (hitch/cuda/allreduce/collectives.hpp for
// memory_space::cuda), and the collectives (collectives.hpp) hand it every call whose buffer lives there, with
//   - the host algorithm of the call, to run on host memory that holds the buffer or a piece of it (a backend that
//     stages: copy in, run the host schedule, copy back), and
//   - the call's point-to-point messages (space_messages), for a backend that moves the buffer's memory directly
//     on a communicator that carries it.
// The backend also names what the ranks must agree on beyond the host call (its plan), folded into the call's
// fingerprint, so ranks that would move different messages get mismatch_error instead of a hang. A call on a space
// without a backend throws config_error naming the header to include. The registry is a run-time table, not a
// template specialisation, so translation units that include the device headers and units that do not instantiate
// the same collectives identically.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/tensor.hpp"

namespace hitch::allreduce {

/// Bytes [offset, offset + bytes) of a call's buffer.
struct byte_range {
    std::size_t offset = 0;
    std::size_t bytes = 0;
    friend bool operator==(const byte_range&, const byte_range&) = default;
};

/// Memory a call reads or writes, and the space it lives in.
struct space_region {
    void* data = nullptr;
    std::size_t bytes = 0;
    memory_space space = memory_space::host;
};

/// One collective call on a buffer outside host memory, as its space's backend sees it.
struct space_call {
    operation what = operation::allreduce;
    /// The buffer the host algorithm runs on (in place).
    space_region buffer{};
    /// allgather(mine, all): `mine`, which the call places at `input_offset` of `buffer` first; else empty.
    space_region input{};
    std::size_t input_offset = 0;
    /// The part of `buffer` the host algorithm reads on this rank (its inputs), and the part it changes (the
    /// results this rank keeps): a staging backend copies those and nothing else.
    byte_range reads{};
    byte_range writes{};
    /// The host algorithm may run on consecutive pieces of the buffer, one after another, with the same result as
    /// on the whole (each piece a multiple of element_bytes); a staging backend may then pipeline the copies.
    bool piecewise = false;
    std::size_t element_bytes = 0;
    dtype type = dtype::f32;
    reduce_op op = reduce_op::sum;
    int root = -1;
    int rank = 0;
    int size = 1;
    /// The schedule's name (allreduce, broadcast, reduce) or the algorithm's (ring for the others).
    std::string_view schedule;
    /// The communicator's name (C::name), and whether it declares that it carries the call's memory space (the
    /// buffer's, or the input's when the buffer is in host memory): carries_device_memory<C> and c.carries(space).
    std::string_view communicator;
    bool carries = false;
    /// The group's per-communicator store, for the backend's caches (pinned buffers, streams).
    slot_store* slots = nullptr;
};

/// Runs the call's host algorithm on `host`, which holds bytes [offset, offset + bytes) of the buffer (the whole
/// buffer unless the call is piecewise). Valid during space_backend::run only.
class host_runner {
public:
    template <class F>
    explicit host_runner(F& f) noexcept
        : context_(&f), call_([](void* c, std::byte* host, std::size_t offset, std::size_t bytes) {
              (*static_cast<F*>(c))(host, offset, bytes);
          }) {}
    void operator()(std::byte* host, std::size_t offset, std::size_t bytes) const {
        call_(context_, host, offset, bytes);
    }

private:
    void* context_;
    void (*call_)(void*, std::byte*, std::size_t, std::size_t);
};

/// The call's point-to-point messages, for a backend that hands the buffer's memory to the communicator itself
/// (only where the communicator carries that memory). Channels are the call's, [0, channels_per_call); every wait
/// is bounded by the call's deadline (timeout_error).
class space_messages {
public:
    virtual ~space_messages() = default;
    [[nodiscard]] virtual int rank() const noexcept = 0;
    [[nodiscard]] virtual int size() const noexcept = 0;
    /// Posts a send of `bytes` at `data` to `peer`; returns its id. The memory must stay untouched until it completes.
    [[nodiscard]] virtual std::size_t send(const void* data, std::size_t bytes, int peer, int channel) = 0;
    /// Posts a receive of exactly `bytes` into `data` from `peer`; returns its id.
    [[nodiscard]] virtual std::size_t receive(void* data, std::size_t bytes, int peer, int channel) = 0;
    /// True once operation `id` has completed; throws comm_error if it failed.
    [[nodiscard]] virtual bool test(std::size_t id) = 0;
    /// Waits for operation `id` until the call's deadline.
    virtual void wait(std::size_t id) = 0;
    /// Waits for every operation posted so far.
    virtual void wait_all() = 0;
};

/// What a memory space's headers provide to run the collectives on its buffers. Thread-safe: calls of several
/// groups may run at once.
class space_backend {
public:
    virtual ~space_backend() = default;
    /// Where the call's ranks must agree beyond the host call's descriptor: 0 when this rank moves the same
    /// messages as the host collective on a host buffer of the same size would; otherwise a value every rank that
    /// moves the same messages computes alike (it is folded into the call's fingerprint).
    [[nodiscard]] virtual std::uint64_t plan(const space_call& call) = 0;
    /// Runs the call (collective: every rank calls it). `host` runs the host algorithm; `messages` carries the
    /// buffer's memory where the communicator can.
    virtual void run(const space_call& call, const host_runner& host, space_messages& messages) = 0;
};

namespace detail {
inline constexpr std::size_t memory_spaces = 2;  // memory_space::host, memory_space::cuda
inline std::array<std::atomic<space_backend*>, memory_spaces> space_backends{};
[[nodiscard]] constexpr std::size_t space_index(memory_space s) noexcept { return static_cast<std::size_t>(s); }
}  // namespace detail

/// Installs the backend of `space` (null removes it); returns the one it replaces. The backend must outlive every
/// call that uses it.
inline space_backend* set_space_backend(memory_space space, space_backend* backend) noexcept {
    const std::size_t i = detail::space_index(space);
    if (i >= detail::memory_spaces) return nullptr;
    return detail::space_backends[i].exchange(backend, std::memory_order_acq_rel);
}

/// The backend of `space`, or null.
[[nodiscard]] inline space_backend* space_backend_for(memory_space space) noexcept {
    const std::size_t i = detail::space_index(space);
    return i < detail::memory_spaces ? detail::space_backends[i].load(std::memory_order_acquire) : nullptr;
}

namespace detail {

/// space_messages over one call's transport: the communicator's own typed messages on the call's tags.
template <communicator C>
class transport_messages final : public space_messages {
public:
    explicit transport_messages(transport<C>& t) : t_(t) {}
    [[nodiscard]] int rank() const noexcept override { return t_.rank(); }
    [[nodiscard]] int size() const noexcept override { return t_.size(); }
    [[nodiscard]] std::size_t send(const void* data, std::size_t bytes, int peer, int channel) override {
        ops_.push_back(t_.comm().isend(std::span<const std::byte>(static_cast<const std::byte*>(data), bytes), peer,
                                       t_.tag_of(channel)));
        return ops_.size() - 1;
    }
    [[nodiscard]] std::size_t receive(void* data, std::size_t bytes, int peer, int channel) override {
        ops_.push_back(
            t_.comm().irecv(std::span<std::byte>(static_cast<std::byte*>(data), bytes), peer, t_.tag_of(channel)));
        return ops_.size() - 1;
    }
    [[nodiscard]] bool test(std::size_t id) override { return ops_.at(id).test(); }
    void wait(std::size_t id) override { ops_.at(id).wait(t_.limit()); }
    void wait_all() override {
        for (auto& r : ops_) r.wait(t_.limit());
    }

private:
    transport<C>& t_;
    std::vector<typename C::request> ops_;
};

template <communicator C>
[[nodiscard]] bool carries_space(C& comm, memory_space space) {
    if constexpr (carries_device_memory<C>)
        return static_cast<bool>(comm.carries(space));
    else
        return false;
}

/// The backend of `space`, or config_error naming what to include.
[[nodiscard]] inline space_backend& require_backend(memory_space space, std::string_view who) {
    if (space_backend* b = space_backend_for(space)) return *b;
    throw config_error(concat(
        "hitch::allreduce::", who, ": the buffer is in ", name(space), " memory and no backend for it is installed",
        space == memory_space::cuda ? " (include hitch/cuda/allreduce/collectives.hpp and link hitch::cuda)" : ""));
}

/// A call with its fields for group g filled in: rank, size, communicator, slots, the backend's checks.
template <communicator C>
[[nodiscard]] space_call space_call_for(group<C>& g, operation what, std::string_view schedule) {
    space_call call;
    call.what = what;
    call.rank = g.rank();
    call.size = g.size();
    call.schedule = schedule;
    call.communicator = C::name;
    call.slots = &g.state().slots;
    return call;
}

/// Runs now (blocking) or queues (non-blocking) a call on a buffer outside host memory: `describe()` is the host
/// call's descriptor, to which the backend's plan is added; `host_body(transport&, std::byte* host, offset, bytes)`
/// runs the host algorithm on host memory.
template <bool Async, communicator C, class Describe, class HostBody>
auto issue_in_space(group<C>& g, const call_options& options, space_call call, std::string_view who,
                    Describe&& describe, HostBody&& host_body) {
    const memory_space space = call.buffer.space != memory_space::host ? call.buffer.space : call.input.space;
    space_backend& backend = require_backend(space, who);
    call.carries = carries_space(g.comm(), space);
    auto what = [&backend, call, describe = std::forward<Describe>(describe)] {
        call_descriptor d = describe();
        d.fingerprint ^= backend.plan(call);
        return d;
    };
    auto body = [&backend, call, host_body = std::forward<HostBody>(host_body)](transport<C>& t,
                                                                                const call_descriptor&) mutable {
        auto run_host = [&](std::byte* host, std::size_t offset, std::size_t bytes) {
            host_body(t, host, offset, bytes);
        };
        transport_messages<C> messages(t);
        backend.run(call, host_runner(run_host), messages);
    };
    if constexpr (Async)
        return g.submit(options, std::move(what), std::move(body));
    else
        g.run(options, std::move(what), std::move(body));
}

}  // namespace detail

}  // namespace hitch::allreduce
