#pragma once
// hitch::allreduce::staged_path: the transport path between processes on one node (a communicator that
// maps_node_memory, e.g. comm::mpi with every rank on one node). Messages pass through small pipes in shared memory
// (allreduce/detail/pipes.hpp), matched there by call, channel and order, instead of through the communicator:
// one copy in and one read out, both through the shared cache, where a message through MPI costs two copies and a
// pass over scratch. A combining receive folds each piece in as it arrives, straight from the sender's slot.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "hitch/allreduce/detail/pipes.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport/combine.hpp"
#include "hitch/allreduce/transport/spin.hpp"
#include "hitch/allreduce/transport/tags.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"

namespace hitch::allreduce {

static_assert(channels_per_call == static_cast<int>(detail::pipes::channels),
              "the staged path matches messages per channel: it must know every channel a call may use");

class staged_path {
public:
    /// A plain receive lands in its slot (or is lent in place); a combining one reads the sender's slots.
    static constexpr bool needs_slots = true;
    static constexpr bool combine_needs_slot = false;
    static constexpr bool reads_in_place = false;

    /// A send in flight: complete once its last piece is staged.
    class outgoing {
    public:
        outgoing() = default;
        outgoing(const outgoing&) = delete;
        outgoing& operator=(const outgoing&) = delete;
        outgoing(outgoing&& o) noexcept
            : pipe_(std::exchange(o.pipe_, nullptr)),
              engine_(o.engine_),
              peer_(o.peer_),
              channel_(o.channel_),
              spin_(o.spin_) {}
        outgoing& operator=(outgoing&& o) noexcept {
            if (this != &o) {
                abandon();
                pipe_ = std::exchange(o.pipe_, nullptr);
                engine_ = o.engine_;
                peer_ = o.peer_;
                channel_ = o.channel_;
                spin_ = o.spin_;
            }
            return *this;
        }
        ~outgoing() { abandon(); }

        bool test() {
            if (pipe_ == nullptr) return true;
            if (!pipe_->done) engine_->progress();
            return pipe_->done;
        }
        void wait(const deadline& limit) {
            if (detail::spin_for(spin_, [&] { return test(); })) return;
            if (poll_until(limit, [&] { return test(); })) return;
            throw timeout_error("hitch::allreduce staged send",
                                hitch::detail::concat(
                                    "to rank ", peer_, " on channel ", channel_, ": ", pipe_->staged, " of ",
                                    pipe_->pieces, " pieces staged, the peer's pipe stayed full (it did not receive)"),
                                limit.waited());
        }
        [[nodiscard]] bool active() const noexcept { return pipe_ != nullptr; }

    private:
        friend class staged_path;
        void abandon() noexcept {
            if (pipe_ != nullptr) engine_->abandon(std::exchange(pipe_, nullptr));
        }
        detail::pipes::send_op* pipe_ = nullptr;
        detail::pipes* engine_ = nullptr;
        int peer_ = 0;
        int channel_ = 0;
        std::chrono::nanoseconds spin_{0};
    };

    /// A receive in flight: once ready, data() points at the message (in its slot, or lent in place from the
    /// sender's pipe) until release(); a receive_into or a combining receive holds nothing once complete.
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
                pipe_ = std::exchange(o.pipe_, nullptr);
                engine_ = o.engine_;
                channel_ = o.channel_;
                combine_dst_ = o.combine_dst_;
                data_ = o.data_;
                into_ = o.into_;
                spin_ = o.spin_;
                count_ = o.count_;
                peer_ = o.peer_;
                state_ = o.state_;
            }
            return *this;
        }
        ~incoming() { finish_abandoned(); }

        bool test() {
            if (state_ != waiting) return true;
            if (!pipe_->done) engine_->progress();
            if (!pipe_->done) return false;
            arrive();
            return true;
        }
        void wait(const deadline& limit) {
            if (state_ != waiting) return;
            if (detail::spin_for(spin_, [&] { return test(); }) || poll_until(limit, [&] { return test(); })) return;
            throw timeout_error("hitch::allreduce staged receive",
                                hitch::detail::concat("from rank ", peer_, " on channel ", channel_, ": ",
                                                      detail::pipes::progress_of(*pipe_)),
                                limit.waited());
        }
        [[nodiscard]] const T* data() const noexcept { return data_; }
        [[nodiscard]] std::size_t size() const noexcept { return count_; }
        [[nodiscard]] static constexpr bool writable() noexcept { return false; }
        void write_back(const T*) {
            throw config_error(
                "hitch::allreduce::transport::incoming::write_back: the sender's buffer is not "
                "writable here (a direct send_writable() that has arrived and is not released)");
        }
        /// Done reading: a slot lent in place goes back to the sender.
        void release() noexcept {
            if (pipe_ != nullptr) engine_->release(std::exchange(pipe_, nullptr));
            state_ = released;
        }

    private:
        friend class staged_path;
        enum state_t { waiting, ready, released };

        void arrive() {
            if (!pipe_->error.empty()) {
                std::string why = pipe_->error;
                release();
                throw comm_error(why);
            }
            if (pipe_->view != nullptr) data_ = reinterpret_cast<const T*>(pipe_->view);
            if (combine_dst_ != nullptr) data_ = combine_dst_;
            if (into_ != nullptr || combine_dst_ != nullptr) {  // copied or combined: nothing is held
                release();
                return;
            }
            state_ = ready;
        }
        void finish_abandoned() noexcept {
            if (pipe_ != nullptr) engine_->abandon(std::exchange(pipe_, nullptr));
            state_ = released;
        }

        detail::pipes::recv_op* pipe_ = nullptr;
        detail::pipes* engine_ = nullptr;
        int channel_ = 0;
        T* combine_dst_ = nullptr;
        const T* data_ = nullptr;
        T* into_ = nullptr;
        std::chrono::nanoseconds spin_{0};
        std::size_t count_ = 0;
        int peer_ = 0;
        state_t state_ = waiting;
    };

    /// Starts call `sequence` on `engine` (the group's pipes); the call ends with this object.
    staged_path(detail::pipes& engine, std::uint64_t sequence, int rank, int size, std::chrono::nanoseconds spin)
        : engine_(engine), rank_(rank), size_(size), spin_(spin) {
        engine_.begin_call(sequence);
    }
    ~staged_path() { engine_.end_call(); }
    staged_path(const staged_path&) = delete;
    staged_path& operator=(const staged_path&) = delete;

    template <element_type T>
    [[nodiscard]] outgoing send(int peer, int channel, int, std::span<const T> data, bool /*writable*/) {
        check_peer(peer);
        outgoing op;
        op.peer_ = peer;
        op.channel_ = channel;
        op.spin_ = spin_;
        op.engine_ = &engine_;
        op.pipe_ = engine_.post_send(peer, channel, reinterpret_cast<const std::byte*>(data.data()), data.size_bytes(),
                                     dtype_of<T>());
        return op;
    }

    /// Lands in `slot`, or is lent in place from the sender's pipe when it fits one piece.
    template <element_type T>
    [[nodiscard]] incoming<T> receive(int peer, int channel, int, std::size_t count, std::span<T> slot) {
        if (slot.size() < count)
            throw config_error(hitch::detail::concat("hitch::allreduce::transport::receive: a slot of ", slot.size(),
                                                     " elements for ", count));
        return post<T>(peer, channel, count, slot.data(), false, nullptr, {});
    }
    template <element_type T>
    [[nodiscard]] incoming<T> receive_into(int peer, int channel, int, std::span<T> dst) {
        return post<T>(peer, channel, dst.size(), dst.data(), true, nullptr, {});
    }
    /// Each piece is combined into `dst` as it arrives; `slot` is not used.
    template <floating_element T>
    [[nodiscard]] incoming<T> receive_combine(int peer, int channel, int, std::span<T> dst, const combine_spec& spec,
                                              std::span<T> /*slot*/) {
        incoming<T> op = post<T>(peer, channel, dst.size(), dst.data(), false, &detail::combine_piece<T>, spec);
        op.combine_dst_ = dst.data();
        return op;
    }

private:
    template <element_type T>
    [[nodiscard]] incoming<T> post(int peer, int channel, std::size_t count, T* buffer, bool into,
                                   detail::piece_combiner combiner, const combine_spec& spec) {
        check_peer(peer);
        incoming<T> op;
        op.count_ = count;
        op.peer_ = peer;
        op.spin_ = spin_;
        op.engine_ = &engine_;
        op.channel_ = channel;
        op.data_ = buffer;
        if (into) op.into_ = buffer;
        op.pipe_ = engine_.post_recv(peer, channel, reinterpret_cast<std::byte*>(buffer), count * sizeof(T),
                                     dtype_of<T>(), !into && combiner == nullptr, combiner, spec);
        return op;
    }

    void check_peer(int peer) const {
        if (peer < 0 || peer >= size_ || peer == rank_)
            throw config_error(hitch::detail::concat("hitch::allreduce::transport: peer ", peer,
                                                     " is not another rank of [0, ", size_, ") (this is rank ", rank_,
                                                     ")"));
    }

    detail::pipes& engine_;
    int rank_;
    int size_;
    std::chrono::nanoseconds spin_;
};

}  // namespace hitch::allreduce
