#pragma once
// hitch::allreduce::direct_path<C>: the transport path for communicators whose ranks share one address space
// (shares_address_space<C>, e.g. comm::local). A send posts a small descriptor (address, size, element type) and
// the receiver reads, or reduces from, the sender's memory in place, then marks it consumed; the send completes
// only then. That is the synchronisation discipline of a rendezvous message, so every schedule runs unchanged on
// either path, and a reduction reads the peer's bytes exactly once instead of copying them first.

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <utility>

#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport/combine.hpp"
#include "hitch/allreduce/transport/mismatch.hpp"
#include "hitch/allreduce/transport/spin.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"

namespace hitch::allreduce {

namespace detail {

/// Shared between a direct send and the receive that reads it: the sender may reuse its buffer once consumed.
struct direct_lease {
    enum : int { open = 0, reading = 1, consumed = 2, revoked = 3 };
    std::atomic<int> state{open};
};

/// What a direct send puts on the wire instead of the data.
struct direct_descriptor {
    // 0: the lease travels as the message's attachment (a communicator with isend_attached, as comm::local);
    // else a heap std::shared_ptr<direct_lease>* the receiver takes ownership of.
    std::uint64_t holder = 0;
    std::uint64_t address = 0;
    std::uint64_t bytes = 0;
    std::uint64_t type = 0;  // the element dtype; writable_flag set when the receiver may write the result back
};
inline constexpr std::uint64_t writable_flag = std::uint64_t{1} << 32;

/// Communicators that can send an object along with a message (and release it if the message is never received).
template <class C>
concept attaches_objects =
    requires(C& c, std::span<const std::byte> d, std::shared_ptr<void> a, typename C::request& r) {
        { c.isend_attached(d, 0, 0, a) } -> std::same_as<typename C::request>;
        { r.take_attachment() } -> std::same_as<std::shared_ptr<void>>;
    };

}  // namespace detail

template <communicator C>
class direct_path {
public:
    using request_type = typename C::request;
    /// Receives read the sender's memory: no slots, not even for combining.
    static constexpr bool needs_slots = false;
    static constexpr bool combine_needs_slot = false;
    static constexpr bool reads_in_place = true;

    /// A send in flight: complete once the peer has read the data in place (and written back, if writable).
    class outgoing {
    public:
        outgoing() = default;
        outgoing(const outgoing&) = delete;
        outgoing& operator=(const outgoing&) = delete;
        outgoing(outgoing&& o) noexcept
            : request_(std::move(o.request_)),
              lease_(std::move(o.lease_)),
              comm_(o.comm_),
              peer_(o.peer_),
              channel_(o.channel_),
              spin_(o.spin_) {}
        outgoing& operator=(outgoing&& o) noexcept {
            if (this != &o) {
                abandon();
                request_ = std::move(o.request_);
                lease_ = std::move(o.lease_);
                comm_ = o.comm_;
                peer_ = o.peer_;
                channel_ = o.channel_;
                spin_ = o.spin_;
            }
            return *this;
        }
        ~outgoing() { abandon(); }

        bool test() {
            if (request_ && !request_->test()) return false;
            if (lease_) return lease_->state.load(std::memory_order_acquire) == detail::direct_lease::consumed;
            return true;
        }
        void wait(const deadline& limit) {
            if (detail::spin_for(spin_, [&] { return test(); })) return;
            if (request_) request_->wait(limit);
            if (!lease_) return;
            if (poll_until(limit, [&] {
                    // A world aborted by a failing rank releases this wait too, as it does the communicator's own.
                    if constexpr (requires(const C& c) { c.throw_if_aborted("x"); })
                        comm_->throw_if_aborted(hitch::detail::concat("hitch::allreduce direct send to rank ", peer_));
                    return lease_->state.load(std::memory_order_acquire) == detail::direct_lease::consumed;
                }))
                return;
            throw timeout_error(
                "hitch::allreduce direct send",
                hitch::detail::concat("to rank ", peer_, " on channel ", channel_, ": the peer did not read the data"),
                limit.waited());
        }
        [[nodiscard]] bool active() const noexcept { return request_.has_value() || lease_ != nullptr; }

    private:
        friend class direct_path;
        /// Given up before the peer read it: revoke it, or let a read in progress finish, so the buffer is never
        /// read after the caller moves on.
        void abandon() noexcept {
            if (!lease_) return;
            int expected = detail::direct_lease::open;
            if (!lease_->state.compare_exchange_strong(expected, detail::direct_lease::revoked)) {
                while (lease_->state.load(std::memory_order_acquire) == detail::direct_lease::reading)
                    std::this_thread::yield();
            }
            lease_.reset();
        }
        std::optional<request_type> request_;
        std::shared_ptr<detail::direct_lease> lease_;
        const C* comm_ = nullptr;
        int peer_ = 0;
        int channel_ = 0;
        std::chrono::nanoseconds spin_{0};
    };

    /// A receive in flight: once ready, data() points into the sender's buffer until release() (or at the
    /// destination of a receive_into or a combining receive, which hold nothing once complete).
    template <class T>
    class incoming {
    public:
        incoming() = default;
        incoming(const incoming&) = delete;
        incoming& operator=(const incoming&) = delete;
        incoming(incoming&& o) noexcept { *this = std::move(o); }
        incoming& operator=(incoming&& o) noexcept {
            if (this != &o) {
                finish_abandoned();
                combine_dst_ = o.combine_dst_;
                spec_ = o.spec_;
                request_ = std::move(o.request_);
                descriptor_ = std::move(o.descriptor_);
                lease_ = std::move(o.lease_);
                data_ = o.data_;
                into_ = o.into_;
                copy_into_ = o.copy_into_;
                writable_ = o.writable_;
                spin_ = o.spin_;
                count_ = o.count_;
                peer_ = o.peer_;
                rank_ = o.rank_;
                state_ = o.state_;
            }
            return *this;
        }
        ~incoming() { finish_abandoned(); }

        bool test() {
            if (state_ != waiting) return true;
            if (request_ && !request_->test()) return false;
            arrive();
            return true;
        }
        void wait(const deadline& limit) {
            if (state_ != waiting) return;
            if (request_ && !detail::spin_for(spin_, [&] { return request_->test(); })) request_->wait(limit);
            arrive();
        }
        [[nodiscard]] const T* data() const noexcept { return data_; }
        [[nodiscard]] std::size_t size() const noexcept { return count_; }
        /// True when the sender used send_writable(): write_back() may store into its buffer.
        [[nodiscard]] bool writable() const noexcept { return writable_; }
        /// Stores `result` (size() elements) into the sender's buffer, where its data came from; before release().
        void write_back(const T* result) {
            if (!writable_ || state_ != ready)
                throw config_error(
                    "hitch::allreduce::transport::incoming::write_back: the sender's buffer is not "
                    "writable here (a direct send_writable() that has arrived and is not released)");
            if (count_ != 0 && result != data_) std::memcpy(const_cast<T*>(data_), result, count_ * sizeof(T));
        }
        /// Done reading: the sender may now reuse its buffer.
        void release() noexcept {
            if (lease_) {
                lease_->state.store(detail::direct_lease::consumed, std::memory_order_release);
                lease_.reset();
            }
            state_ = released;
        }

    private:
        friend class direct_path;
        enum state_t { waiting, ready, released };

        void arrive() {
            if (descriptor_) {
                const detail::direct_descriptor d = *descriptor_;
                lease_ = take_lease(d);
                descriptor_.reset();
                if (!lease_) {
                    state_ = released;
                    throw comm_error(hitch::detail::concat("hitch::allreduce: rank ", rank_,
                                                           " received a direct-send descriptor from rank ", peer_,
                                                           " without its lease"));
                }
                int expected = detail::direct_lease::open;
                if (!lease_->state.compare_exchange_strong(expected, detail::direct_lease::reading)) {
                    lease_.reset();
                    state_ = released;
                    throw comm_error(hitch::detail::concat("hitch::allreduce: rank ", peer_,
                                                           " withdrew a message before rank ", rank_,
                                                           " could read it (it failed or timed out)"));
                }
                const std::uint64_t type = d.type & (detail::writable_flag - 1);
                writable_ = (d.type & detail::writable_flag) != 0 && !copy_into_;
                if (d.bytes != count_ * sizeof(T) || type != static_cast<std::uint64_t>(dtype_of<T>())) {
                    release();
                    throw comm_error(detail::message_mismatch(rank_, peer_, count_ * sizeof(T), dtype_of<T>(), d.bytes,
                                                              static_cast<dtype>(type)));
                }
                data_ = reinterpret_cast<const T*>(d.address);
                if (copy_into_) {  // receive_into: copied out and released at once (also with no elements)
                    if (count_ != 0) std::memcpy(into_, data_, count_ * sizeof(T));
                    data_ = into_;
                    release();
                    return;
                }
            }
            state_ = ready;
            if constexpr (floating_element<T>) {
                if (combine_dst_ != nullptr) {
                    detail::combine_into(combine_dst_, data_, combine_dst_, count_, spec_);
                    data_ = combine_dst_;
                    release();
                }
            }
        }
        /// The lease of an arrived descriptor: the message's attachment, or the heap holder it names.
        std::shared_ptr<detail::direct_lease> take_lease(const detail::direct_descriptor& d) {
            if (d.holder == 0) {
                if constexpr (detail::attaches_objects<C>)
                    return std::static_pointer_cast<detail::direct_lease>(request_->take_attachment());
                return nullptr;
            }
            auto* holder = reinterpret_cast<std::shared_ptr<detail::direct_lease>*>(d.holder);
            std::shared_ptr<detail::direct_lease> lease = std::move(*holder);
            delete holder;
            return lease;
        }
        void finish_abandoned() noexcept {
            if (descriptor_ && request_) {
                // The descriptor may have arrived without being looked at: take the lease so the sender can go on.
                bool arrived = false;
                try {
                    arrived = request_->test();
                } catch (...) {}
                if (arrived) {
                    if (const auto lease = take_lease(*descriptor_))
                        lease->state.store(detail::direct_lease::consumed, std::memory_order_release);
                }
            }
            release();
        }

        T* combine_dst_ = nullptr;  // receive_combine(): the buffer the message is combined into
        combine_spec spec_{};
        std::optional<request_type> request_;
        std::unique_ptr<detail::direct_descriptor> descriptor_;
        std::shared_ptr<detail::direct_lease> lease_;
        const T* data_ = nullptr;
        T* into_ = nullptr;
        bool copy_into_ = false;  // receive_into (into_ may be null for an empty destination)
        bool writable_ = false;
        std::chrono::nanoseconds spin_{0};
        std::size_t count_ = 0;
        int peer_ = 0;
        int rank_ = 0;
        state_t state_ = waiting;
    };

    direct_path(C& comm, int rank, std::chrono::nanoseconds spin) : comm_(comm), rank_(rank), spin_(spin) {}
    direct_path(const direct_path&) = delete;
    direct_path& operator=(const direct_path&) = delete;

    template <element_type T>
    [[nodiscard]] outgoing send(int peer, int channel, int tag, std::span<const T> data, bool writable) {
        outgoing op;
        op.comm_ = &comm_;
        op.peer_ = peer;
        op.channel_ = channel;
        op.spin_ = spin_;
        op.lease_ = std::make_shared<detail::direct_lease>();
        detail::direct_descriptor d;
        d.address = reinterpret_cast<std::uint64_t>(data.data());
        d.bytes = data.size_bytes();
        d.type = static_cast<std::uint64_t>(dtype_of<T>()) | (writable ? detail::writable_flag : 0);
        const std::span<const detail::direct_descriptor> wire(&d, 1);
        if constexpr (detail::attaches_objects<C>) {
            // The receiver's share of the lease travels with the message, and is released with it if the message
            // is never received (a world aborted between the send and the receive).
            op.request_.emplace(comm_.isend_attached(std::as_bytes(wire), peer, tag, op.lease_));
        } else {
            auto holder = std::make_unique<std::shared_ptr<detail::direct_lease>>(op.lease_);
            d.holder = reinterpret_cast<std::uint64_t>(holder.get());
            op.request_.emplace(comm_.isend(std::as_bytes(wire), peer, tag));
            holder.release();  // the receiver owns it now (leaked only if the message is never received)
        }
        return op;
    }

    /// The slot is not used: data() will point into the sender's buffer.
    template <element_type T>
    [[nodiscard]] incoming<T> receive(int peer, int, int tag, std::size_t count, std::span<T> /*slot*/) {
        return post<T>(peer, tag, count, nullptr);
    }
    template <element_type T>
    [[nodiscard]] incoming<T> receive_into(int peer, int, int tag, std::span<T> dst) {
        incoming<T> op = post<T>(peer, tag, dst.size(), dst.data());
        op.copy_into_ = true;
        return op;
    }
    template <floating_element T>
    [[nodiscard]] incoming<T> receive_combine(int peer, int, int tag, std::span<T> dst, const combine_spec& spec,
                                              std::span<T> /*slot*/) {
        incoming<T> op = post<T>(peer, tag, dst.size(), nullptr);
        op.combine_dst_ = dst.data();
        op.spec_ = spec;
        return op;
    }

private:
    template <element_type T>
    [[nodiscard]] incoming<T> post(int peer, int tag, std::size_t count, T* into) {
        incoming<T> op;
        op.count_ = count;
        op.peer_ = peer;
        op.rank_ = rank_;
        op.spin_ = spin_;
        op.into_ = into;
        op.descriptor_ = std::make_unique<detail::direct_descriptor>();
        op.request_.emplace(comm_.irecv(
            std::as_writable_bytes(std::span<detail::direct_descriptor>(op.descriptor_.get(), 1)), peer, tag));
        return op;
    }

    C& comm_;
    int rank_;
    std::chrono::nanoseconds spin_;
};

}  // namespace hitch::allreduce
