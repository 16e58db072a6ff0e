#pragma once
// hitch::allreduce::message_path<C>: the transport path on which messages carry the data. A receive lands in a
// slot the schedule gives it (scratch owned by the call); a combining receive then folds the slot into its
// destination. Every communicator offers this path; it is the one taken without call_options::shared_memory.

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <utility>

#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport/combine.hpp"
#include "hitch/allreduce/transport/spin.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"

namespace hitch::allreduce {

template <communicator C>
class message_path {
public:
    using request_type = typename C::request;
    /// A receive needs a slot of its own to land in, a combining receive too.
    static constexpr bool needs_slots = true;
    static constexpr bool combine_needs_slot = true;
    /// Receives read a copy, never the sender's memory.
    static constexpr bool reads_in_place = false;

    /// A send in flight: complete once the communicator has taken the data.
    class outgoing {
    public:
        outgoing() = default;
        bool test() { return request_->test(); }
        void wait(const deadline& limit) {
            if (detail::spin_for(spin_, [&] { return request_->test(); })) return;
            request_->wait(limit);
        }
        [[nodiscard]] bool active() const noexcept { return request_.has_value(); }

    private:
        friend class message_path;
        std::optional<request_type> request_;
        std::chrono::nanoseconds spin_{0};
    };

    /// A receive in flight: once ready, data() points at the received elements (in the slot, or in the destination
    /// of a receive_into or a combining receive) until release().
    template <class T>
    class incoming {
    public:
        incoming() = default;
        bool test() {
            if (state_ != waiting) return true;
            if (!request_->test()) return false;
            arrive();
            return true;
        }
        void wait(const deadline& limit) {
            if (state_ != waiting) return;
            if (!detail::spin_for(spin_, [&] { return request_->test(); })) request_->wait(limit);
            arrive();
        }
        [[nodiscard]] const T* data() const noexcept { return data_; }
        [[nodiscard]] std::size_t size() const noexcept { return count_; }
        [[nodiscard]] static constexpr bool writable() noexcept { return false; }
        void write_back(const T*) {
            throw config_error(
                "hitch::allreduce::transport::incoming::write_back: the sender's buffer is not "
                "writable here (a direct send_writable() that has arrived and is not released)");
        }
        void release() noexcept { state_ = released; }

    private:
        friend class message_path;
        enum state_t { waiting, ready, released };
        void arrive() {
            state_ = ready;
            if constexpr (floating_element<T>) {
                if (combine_dst_ != nullptr) {
                    detail::combine_into(combine_dst_, data_, combine_dst_, count_, spec_);
                    data_ = combine_dst_;
                    release();
                    detail::charge_combine(*comm_, count_ * sizeof(T));
                }
            }
        }
        std::optional<request_type> request_;
        const T* data_ = nullptr;
        T* combine_dst_ = nullptr;
        C* comm_ = nullptr;  // a combining receive's, told of the combine
        combine_spec spec_{};
        std::chrono::nanoseconds spin_{0};
        std::size_t count_ = 0;
        state_t state_ = waiting;
    };

    message_path(C& comm, std::chrono::nanoseconds spin) : comm_(comm), spin_(spin) {}
    message_path(const message_path&) = delete;
    message_path& operator=(const message_path&) = delete;

    template <element_type T>
    [[nodiscard]] outgoing send(int peer, int, int tag, std::span<const T> data, bool /*writable*/) {
        outgoing op;
        op.spin_ = spin_;
        op.request_.emplace(comm_.isend(data, peer, tag));
        return op;
    }

    template <element_type T>
    [[nodiscard]] incoming<T> receive(int peer, int, int tag, std::size_t count, std::span<T> slot) {
        if (slot.size() < count)
            throw config_error(hitch::detail::concat("hitch::allreduce::transport::receive: a slot of ", slot.size(),
                                                     " elements for ", count));
        return post(peer, tag, slot.first(count));
    }
    template <element_type T>
    [[nodiscard]] incoming<T> receive_into(int peer, int, int tag, std::span<T> dst) {
        return post(peer, tag, dst);
    }
    template <floating_element T>
    [[nodiscard]] incoming<T> receive_combine(int peer, int channel, int tag, std::span<T> dst,
                                              const combine_spec& spec, std::span<T> slot) {
        incoming<T> op = receive<T>(peer, channel, tag, dst.size(), slot);
        op.combine_dst_ = dst.data();
        op.comm_ = &comm_;
        op.spec_ = spec;
        return op;
    }

private:
    template <element_type T>
    [[nodiscard]] incoming<T> post(int peer, int tag, std::span<T> into) {
        incoming<T> op;
        op.count_ = into.size();
        op.spin_ = spin_;
        op.data_ = into.data();
        op.request_.emplace(comm_.irecv(into, peer, tag));
        return op;
    }

    C& comm_;
    std::chrono::nanoseconds spin_;
};

}  // namespace hitch::allreduce
