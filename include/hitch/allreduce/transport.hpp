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
// How the bytes move depends on a capability of the communicator, not on the schedule. By default messages carry
// the data (the receive lands in `slot`, scratch owned by the call). When the communicator's ranks share one
// address space (C::shares_address_space, e.g. comm::local) the transport is *direct*: a send posts a small
// descriptor (address, size, element type) and the receiver reads, or reduces from, the sender's memory in place,
// then marks it consumed; the send completes only then. That is the synchronisation discipline of a rendezvous
// message, so every schedule runs unchanged on either path, and a reduction reads the peer's bytes exactly once
// instead of copying them first.
//
// Between processes on one node (a communicator offering map_node_memory, e.g. comm::mpi with every rank on one
// node) the transport is *staged*: messages pass through small pipes in shared memory (allreduce/detail/pipes.hpp),
// matched there by call, channel and order, instead of through the communicator: one copy in and one read out,
// both through the shared cache, where a message through MPI costs two copies and a pass over scratch.
//
// Tags: every message of a call uses tags derived from the call's sequence number inside hitch's reserved range
// (collective_tag_base(comm) .. comm.max_tag()), so a late message of one call can never match another call.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/detail/pipes.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"

namespace hitch::allreduce {

/// True when a pointer valid on one rank of C is valid on every rank (C::shares_address_space).
template <class C>
inline constexpr bool shares_address_space_v = requires { requires static_cast<bool>(C::shares_address_space); };

/// Channels a schedule may use in one call: tags call_base + [0, channels_per_call).
inline constexpr int channels_per_call = 64;
static_assert(channels_per_call == static_cast<int>(detail::pipes::channels),
              "the staged path matches messages per channel: it must know every channel a call may use");
/// Offsets inside hitch's reserved tag range: 0 is comm::agree's, [1, first_call_tag_offset) stay free.
inline constexpr int first_call_tag_offset = 16;

/// The first tag of call `sequence` on `comm`: sequence numbers wrap around a window that fits the reserved range.
template <communicator C>
[[nodiscard]] int call_tag_base(const C& comm, std::uint64_t sequence) {
    const long long base = static_cast<long long>(collective_tag_base(comm)) + first_call_tag_offset;
    const long long span = static_cast<long long>(comm.max_tag()) - base + 1;
    const long long window = span / channels_per_call;
    if (window < 1)
        throw config_error(detail::concat("hitch::allreduce: ", comm.name(), " offers tags up to ", comm.max_tag(),
                                          ", too few for hitch's collectives (need at least ",
                                          2 * (collective_tag_base(comm) + first_call_tag_offset + channels_per_call),
                                          ")"));
    return static_cast<int>(base + static_cast<long long>(sequence % static_cast<std::uint64_t>(window)) * channels_per_call);
}

/// Reusable scratch memory of one group: buffers are handed out per call and come back when the call ends, so a
/// steady stream of collectives allocates (and page-faults) nothing.
class scratch_arena {
public:
    class lease {
    public:
        lease() = default;
        lease(const lease&) = delete;
        lease& operator=(const lease&) = delete;
        lease(lease&& o) noexcept : arena_(std::exchange(o.arena_, nullptr)), index_(o.index_), data_(o.data_), bytes_(o.bytes_) {}
        lease& operator=(lease&& o) noexcept {
            if (this != &o) {
                give_back();
                arena_ = std::exchange(o.arena_, nullptr);
                index_ = o.index_;
                data_ = o.data_;
                bytes_ = o.bytes_;
            }
            return *this;
        }
        ~lease() { give_back(); }
        [[nodiscard]] std::byte* data() const noexcept { return data_; }
        [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

    private:
        friend class scratch_arena;
        lease(scratch_arena* a, std::size_t i, std::byte* d, std::size_t b) : arena_(a), index_(i), data_(d), bytes_(b) {}
        void give_back() noexcept {
            if (arena_ != nullptr) arena_->release(index_);
            arena_ = nullptr;
        }
        scratch_arena* arena_ = nullptr;
        std::size_t index_ = 0;
        std::byte* data_ = nullptr;
        std::size_t bytes_ = 0;
    };

    scratch_arena() = default;
    scratch_arena(const scratch_arena&) = delete;
    scratch_arena& operator=(const scratch_arena&) = delete;

    /// At least `bytes` bytes, 64-byte aligned, until the lease is destroyed.
    [[nodiscard]] lease acquire(std::size_t bytes) {
        bytes = std::max<std::size_t>(bytes, 64);
        std::lock_guard lock(m_);
        std::size_t best = buffers_.size();
        for (std::size_t i = 0; i < buffers_.size(); ++i)
            if (!buffers_[i].in_use && buffers_[i].bytes >= bytes &&
                (best == buffers_.size() || buffers_[i].bytes < buffers_[best].bytes))
                best = i;
        if (best == buffers_.size()) {
            // Replace the largest idle buffer that is too small, so the arena does not grow without bound.
            for (std::size_t i = 0; i < buffers_.size(); ++i)
                if (!buffers_[i].in_use) {
                    best = i;
                    break;
                }
            if (best == buffers_.size()) buffers_.emplace_back();
            auto& b = buffers_[best];
            b.memory.reset(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t{64})));
            b.bytes = bytes;
        }
        buffers_[best].in_use = true;
        return lease(this, best, buffers_[best].memory.get(), buffers_[best].bytes);
    }

    /// Bytes held (in use or idle).
    [[nodiscard]] std::size_t capacity() const {
        std::lock_guard lock(m_);
        std::size_t total = 0;
        for (const auto& b : buffers_) total += b.bytes;
        return total;
    }

private:
    struct aligned_delete {
        void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{64}); }
    };
    struct buffer {
        std::unique_ptr<std::byte[], aligned_delete> memory;
        std::size_t bytes = 0;
        bool in_use = false;
    };
    void release(std::size_t i) noexcept {
        std::lock_guard lock(m_);
        buffers_[i].in_use = false;
    }
    mutable std::mutex m_;
    std::vector<buffer> buffers_;
};

/// What the calls on one communicator share: scratch memory, the cost constants `automatic` uses, and state that
/// schedules cache per communicator (e.g. hierarchical's sub-communicators), keyed by name.
template <communicator C>
struct shared_state {
    scratch_arena arena;
    mutable std::mutex m;
    std::optional<cost_constants> constants;
    std::map<std::string, std::shared_ptr<void>, std::less<>> cache;
    /// The staged path's pipes (null unless the communicator's ranks share a node and it could map them).
    std::shared_ptr<detail::pipes> pipes;

    /// The cached object under `key`, made by `make()` on first use (make() may run collectives: every rank
    /// reaches the same first use in the same call).
    template <class T, class Make>
    std::shared_ptr<T> cached(std::string_view key, Make&& make) {
        {
            std::lock_guard lock(m);
            if (auto it = cache.find(key); it != cache.end()) return std::static_pointer_cast<T>(it->second);
        }
        std::shared_ptr<T> made = make();
        std::lock_guard lock(m);
        cache.emplace(std::string(key), made);
        return made;
    }
};

/// Collective over `comm`: gives `state` the pipes of the transport's staged path when `comm` can map memory that
/// all its ranks share (comm::mpi with every rank on one node), and leaves it without otherwise.
template <communicator C>
void attach_pipes(C& comm, shared_state<C>& state) {
    if constexpr (requires(C& c, std::size_t b) {
                      { c.map_node_memory(b) } -> std::convertible_to<std::shared_ptr<comm::node_memory>>;
                  }) {
        const detail::pipes::layout shape = detail::pipes::layout_for(comm.size());
        if (comm.size() > 1 && shape.slots >= 2)
            if (auto memory = comm.map_node_memory(detail::pipes::part_bytes(comm.size(), shape)))
                state.pipes = std::make_shared<detail::pipes>(std::move(memory), comm.rank(), comm.size(), shape);
    }
}

namespace detail {

/// Shared between a direct send and the receive that reads it: the sender may reuse its buffer once consumed.
struct direct_lease {
    enum : int { open = 0, reading = 1, consumed = 2, revoked = 3 };
    std::atomic<int> state{open};
};

/// What a direct send puts on the wire instead of the data.
struct direct_descriptor {
    std::uint64_t holder = 0;  // std::shared_ptr<direct_lease>* the receiver takes ownership of
    std::uint64_t address = 0;
    std::uint64_t bytes = 0;
    std::uint64_t type = 0;  // the element dtype; writable_flag set when the receiver may write the result back
};
inline constexpr std::uint64_t writable_flag = std::uint64_t{1} << 32;

/// Busy-polls `ready()` for up to `budget` before the caller falls back to a wait that yields the core. When every
/// rank has a core of its own the peer is running and answers within microseconds; yielding then would hand the
/// core to another process for a whole time slice.
template <class Ready>
[[nodiscard]] bool spin_for(std::chrono::nanoseconds budget, Ready&& ready) {
    if (budget.count() <= 0) return false;
    const auto end = std::chrono::steady_clock::now() + budget;
    for (int i = 0;; ++i) {
        if (ready()) return true;
        if ((i & 63) == 63 && std::chrono::steady_clock::now() >= end) return false;
    }
}

/// Cores the process may run on, read once (std::thread::hardware_concurrency() reads /sys on every call).
[[nodiscard]] inline int cores() noexcept {
    static const int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return n;
}

[[nodiscard]] inline bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) noexcept {
    if (a_bytes == 0 || b_bytes == 0) return false;
    const auto x = reinterpret_cast<std::uintptr_t>(a);
    const auto y = reinterpret_cast<std::uintptr_t>(b);
    return x < y + b_bytes && y < x + a_bytes;
}

}  // namespace detail

/// One collective call's view of the communicator (see the file comment). Not thread-safe; one per call.
template <communicator C>
class transport {
public:
    using request_type = typename C::request;

    /// A send in flight.
    class outgoing {
    public:
        outgoing() = default;
        outgoing(const outgoing&) = delete;
        outgoing& operator=(const outgoing&) = delete;
        outgoing& operator=(outgoing&& o) noexcept {
            if (this != &o) {
                abandon();
                request_ = std::move(o.request_);
                lease_ = std::move(o.lease_);
                pipe_ = std::exchange(o.pipe_, nullptr);
                engine_ = o.engine_;
                peer_ = o.peer_;
                channel_ = o.channel_;
                spin_ = o.spin_;
            }
            return *this;
        }
        outgoing(outgoing&& o) noexcept
            : request_(std::move(o.request_)),
              lease_(std::move(o.lease_)),
              pipe_(std::exchange(o.pipe_, nullptr)),
              engine_(o.engine_),
              peer_(o.peer_),
              channel_(o.channel_),
              spin_(o.spin_) {}
        ~outgoing() { abandon(); }

        /// True once the buffer may be reused (message sent, staged, or the peer consumed it in place).
        bool test() {
            if (pipe_ != nullptr) {
                if (!pipe_->done) engine_->progress();
                return pipe_->done;
            }
            if (request_ && !request_->test()) return false;
            if (lease_) return lease_->state.load(std::memory_order_acquire) == detail::direct_lease::consumed;
            return true;
        }
        void wait(const deadline& limit) {
            if (detail::spin_for(spin_, [&] { return test(); })) return;
            if (pipe_ != nullptr) {
                if (poll_until(limit, [&] { return test(); })) return;
                throw timeout_error("hitch::allreduce staged send",
                                    hitch::detail::concat("to rank ", peer_, " on channel ", channel_, ": ", pipe_->staged,
                                                          " of ", pipe_->pieces,
                                                          " pieces staged, the peer's pipe stayed full (it did not receive)"),
                                    limit.waited());
            }
            if (request_) request_->wait(limit);
            if (!lease_) return;
            if (poll_until(limit, [&] { return lease_->state.load(std::memory_order_acquire) == detail::direct_lease::consumed; }))
                return;
            throw timeout_error("hitch::allreduce direct send",
                                hitch::detail::concat("to rank ", peer_, " on channel ", channel_,
                                                      ": the peer did not read the data"),
                                limit.waited());
        }
        [[nodiscard]] bool active() const noexcept { return request_.has_value() || lease_ != nullptr || pipe_ != nullptr; }

    private:
        friend class transport;
        /// A direct send given up before the peer read it: revoke it, or let a read in progress finish, so the
        /// buffer is never read after the caller moves on.
        void abandon() noexcept {
            if (pipe_ != nullptr) engine_->abandon(std::exchange(pipe_, nullptr));
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
        detail::pipes::send_op* pipe_ = nullptr;
        detail::pipes* engine_ = nullptr;
        int peer_ = 0;
        int channel_ = 0;
        std::chrono::nanoseconds spin_{0};
    };

    /// A receive in flight: once ready(), data() points at the peer's `size()` elements (in scratch, or in the
    /// peer's own memory on the direct path) until release().
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
                spec_ = o.spec_;
                request_ = std::move(o.request_);
                descriptor_ = std::move(o.descriptor_);
                lease_ = std::move(o.lease_);
                data_ = o.data_;
                into_ = o.into_;
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

        /// True once the data can be read (and, for receive_into, once it has been copied).
        bool test() {
            if (state_ != waiting) return true;
            if (pipe_ != nullptr) {
                if (!pipe_->done) engine_->progress();
                if (!pipe_->done) return false;
                arrive_staged();
                return true;
            }
            if (request_ && !request_->test()) return false;
            arrive();
            return true;
        }
        void wait(const deadline& limit) {
            if (state_ != waiting) return;
            if (pipe_ != nullptr) {
                if (detail::spin_for(spin_, [&] { return test(); }) || poll_until(limit, [&] { return test(); })) return;
                throw timeout_error("hitch::allreduce staged receive",
                                    hitch::detail::concat("from rank ", peer_, " on channel ", channel_, ": ",
                                                          detail::pipes::progress_of(*pipe_)),
                                    limit.waited());
            }
            if (request_ && !detail::spin_for(spin_, [&] { return request_->test(); })) request_->wait(limit);
            arrive();
        }
        [[nodiscard]] const T* data() const noexcept { return data_; }
        [[nodiscard]] std::size_t size() const noexcept { return count_; }
        /// True when the sender used send_writable() on the direct path: write_back() may store into its buffer.
        [[nodiscard]] bool writable() const noexcept { return writable_; }
        /// Stores `result` (size() elements) into the sender's buffer, where its data came from. Direct path,
        /// writable sends only; call before release().
        void write_back(const T* result) {
            if (!writable_ || state_ != ready)
                throw config_error("hitch::allreduce::transport::incoming::write_back: the sender's buffer is not "
                                   "writable here (a direct send_writable() that has arrived and is not released)");
            if (count_ != 0 && result != data_) std::memcpy(const_cast<T*>(data_), result, count_ * sizeof(T));
        }
        /// Done reading: a direct sender may now reuse its buffer.
        void release() noexcept {
            if (pipe_ != nullptr) engine_->release(std::exchange(pipe_, nullptr));
            if (lease_) {
                lease_->state.store(detail::direct_lease::consumed, std::memory_order_release);
                lease_.reset();
            }
            state_ = released;
        }

    private:
        friend class transport;
        enum state_t { waiting, ready, released };

        void arrive() {
            if (descriptor_) {
                const detail::direct_descriptor d = *descriptor_;
                auto* holder = reinterpret_cast<std::shared_ptr<detail::direct_lease>*>(d.holder);
                lease_ = std::move(*holder);
                delete holder;
                descriptor_.reset();
                int expected = detail::direct_lease::open;
                if (!lease_->state.compare_exchange_strong(expected, detail::direct_lease::reading)) {
                    lease_.reset();
                    state_ = released;
                    throw comm_error(hitch::detail::concat("hitch::allreduce: rank ", peer_,
                                                           " withdrew a message before rank ", rank_,
                                                           " could read it (it failed or timed out)"));
                }
                const std::uint64_t type = d.type & (detail::writable_flag - 1);
                writable_ = (d.type & detail::writable_flag) != 0 && into_ == nullptr;
                if (d.bytes != count_ * sizeof(T) || type != static_cast<std::uint64_t>(dtype_of<T>())) {
                    release();
                    throw comm_error(detail::message_mismatch(rank_, peer_, count_ * sizeof(T), dtype_of<T>(), d.bytes,
                                                              static_cast<dtype>(type)));
                }
                data_ = reinterpret_cast<const T*>(d.address);
                if (into_ != nullptr) {
                    if (count_ != 0) std::memcpy(into_, data_, count_ * sizeof(T));
                    data_ = into_;
                    release();
                    return;
                }
            }
            state_ = ready;
            if constexpr (floating_element<T>) {
                if (combine_dst_ != nullptr) {
                    transport::combine_into(combine_dst_, data_, combine_dst_, count_, spec_);
                    data_ = combine_dst_;
                    release();
                }
            }
        }
        void arrive_staged() {
            if (!pipe_->error.empty()) {
                std::string why = pipe_->error;
                release();
                state_ = released;
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
            if (descriptor_ && request_) {
                // The descriptor may have arrived without being looked at: take the lease so the sender can go on.
                bool arrived = false;
                try {
                    arrived = request_->test();
                } catch (...) {
                }
                if (arrived) {
                    auto* holder = reinterpret_cast<std::shared_ptr<detail::direct_lease>*>(descriptor_->holder);
                    if (holder != nullptr) {
                        (*holder)->state.store(detail::direct_lease::consumed, std::memory_order_release);
                        delete holder;
                    }
                }
            }
            release();
        }

        std::optional<request_type> request_;
        detail::pipes::recv_op* pipe_ = nullptr;
        detail::pipes* engine_ = nullptr;
        int channel_ = 0;
        T* combine_dst_ = nullptr;  // receive_combine(): the buffer the message is combined into
        combine_spec spec_{};
        std::unique_ptr<detail::direct_descriptor> descriptor_;
        std::shared_ptr<detail::direct_lease> lease_;
        const T* data_ = nullptr;
        T* into_ = nullptr;
        bool writable_ = false;
        std::chrono::nanoseconds spin_{0};
        std::size_t count_ = 0;
        int peer_ = 0;
        int rank_ = 0;
        state_t state_ = waiting;
    };

    /// `direct` asks for the direct path; it is taken only when C shares an address space.
    transport(C& comm, std::uint64_t sequence, const deadline& limit, bool direct, shared_state<C>& state)
        : comm_(comm),
          limit_(limit),
          state_(state),
          sequence_(sequence),
          tag_base_(call_tag_base(comm, sequence)),
          rank_(comm.rank()),
          size_(comm.size()),
          shared_memory_(direct),
          direct_(direct && shares_address_space_v<C>),
          pipes_(direct && !direct_ ? state.pipes.get() : nullptr),
          spin_((shares_address_space_v<C> || pipes_ != nullptr) && size_ <= detail::cores()
                    ? std::chrono::microseconds(50)
                    : std::chrono::microseconds(0)) {
        if (pipes_ != nullptr) pipes_->begin_call(sequence);
    }
    ~transport() {
        if (pipes_ != nullptr) pipes_->end_call();
    }
    transport(const transport&) = delete;
    transport& operator=(const transport&) = delete;

    [[nodiscard]] C& comm() noexcept { return comm_; }
    [[nodiscard]] int rank() const noexcept { return rank_; }
    [[nodiscard]] int size() const noexcept { return size_; }
    [[nodiscard]] const deadline& limit() const noexcept { return limit_; }
    [[nodiscard]] std::uint64_t sequence() const noexcept { return sequence_; }
    [[nodiscard]] bool direct() const noexcept { return direct_; }
    /// True when the call asked for shared memory (call_options::shared_memory), whichever path that gave.
    [[nodiscard]] bool shared_memory() const noexcept { return shared_memory_; }
    /// True on the staged path (shared-memory pipes between processes on one node).
    [[nodiscard]] bool staged() const noexcept { return pipes_ != nullptr; }
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
        return post_send(peer, channel, data, false);
    }
    /// As send(), and on the direct path the receiver may also store a result into `data` (write_back) before it
    /// releases it; the send completes after that. On the message path it is a plain send.
    template <element_type T>
    [[nodiscard]] outgoing send_writable(int peer, int channel, std::span<T> data) {
        return post_send(peer, channel, std::span<const T>(data), true);
    }

private:
    template <element_type T>
    [[nodiscard]] outgoing post_send(int peer, int channel, std::span<const T> data, bool writable) {
        outgoing op;
        op.peer_ = peer;
        op.channel_ = channel;
        op.spin_ = spin_;
        const int tag = tag_of(channel);
        if (pipes_ != nullptr) {
            check_peer(peer);
            op.engine_ = pipes_;
            op.pipe_ = pipes_->post_send(peer, channel, reinterpret_cast<const std::byte*>(data.data()), data.size_bytes(),
                                         dtype_of<T>());
            return op;
        }
        if (!direct_) {
            op.request_.emplace(comm_.isend(data, peer, tag));
            return op;
        }
        op.lease_ = std::make_shared<detail::direct_lease>();
        auto holder = std::make_unique<std::shared_ptr<detail::direct_lease>>(op.lease_);
        detail::direct_descriptor d;
        d.holder = reinterpret_cast<std::uint64_t>(holder.get());
        d.address = reinterpret_cast<std::uint64_t>(data.data());
        d.bytes = data.size_bytes();
        d.type = static_cast<std::uint64_t>(dtype_of<T>()) | (writable ? detail::writable_flag : 0);
        op.request_.emplace(comm_.isend(std::as_bytes(std::span<const detail::direct_descriptor>(&d, 1)), peer, tag));
        holder.release();  // the receiver owns it now (leaked only if the message is never received)
        return op;
    }

public:

    /// Receives `count` elements from `peer` on `channel`. On the message path they land in `slot` (at least
    /// `count` elements); on the direct path data() points into the sender's buffer and `slot` is not used (it may
    /// be empty: see needs_slots()).
    template <floating_element T>
    [[nodiscard]] incoming<T> receive(int peer, int channel, std::size_t count, std::span<T> slot) {
        if (direct_) return post_receive<T>(peer, channel, count, nullptr, false);
        if (slot.size() < count)
            throw config_error(hitch::detail::concat("hitch::allreduce::transport::receive: a slot of ", slot.size(),
                                                     " elements for ", count));
        return post_receive<T>(peer, channel, count, slot.data(), false);
    }
    /// Receives `dst.size()` elements from `peer` on `channel` and combines them into `dst` per `spec` (dst =
    /// op(theirs, dst), or op(dst, theirs)); the receive completes once they are combined and holds nothing then.
    /// On the staged path each piece is combined as it arrives, straight from the sender's slot, and `slot` is not
    /// used; otherwise the message lands in `slot` (message path) or is read in place (direct path) and is
    /// combined on arrival. Like a receive_into, `dst` belongs to the receive until it completes.
    template <floating_element T>
    [[nodiscard]] incoming<T> receive_combine(int peer, int channel, std::span<T> dst, const combine_spec& spec,
                                              std::span<T> slot) {
        incoming<T> op = pipes_ != nullptr
                              ? post_receive<T>(peer, channel, dst.size(), dst.data(), false, &combine_piece<T>, spec)
                              : receive<T>(peer, channel, dst.size(), slot);
        op.combine_dst_ = dst.data();
        op.spec_ = spec;
        return op;
    }
    /// False on the direct path, where receive() reads the sender's memory and needs no scratch slot.
    [[nodiscard]] bool needs_slots() const noexcept { return !direct_; }
    /// Receives `dst.size()` elements from `peer` on `channel` into `dst`.
    template <element_type T>
    [[nodiscard]] incoming<T> receive_into(int peer, int channel, std::span<T> dst) {
        return post_receive<T>(peer, channel, dst.size(), dst.data(), true);
    }

    /// Sends `out` to `to` while receiving `in.size()` elements from `from` into `in` (either side may be -1: no
    /// such side), both cut into segments of `segment` elements. `out` and `in` must not overlap.
    template <element_type T>
    void exchange_copy(int to, std::span<const T> out, int from, std::span<T> in, std::size_t segment, int channel) {
        segment = std::max<std::size_t>(segment, 1);
        if (to >= 0 && from >= 0 && detail::overlaps(out.data(), out.size_bytes(), in.data(), in.size_bytes()))
            throw config_error("hitch::allreduce::transport::exchange_copy: the buffers overlap");
        std::vector<incoming<T>> recvs;
        if (from >= 0) {
            recvs.reserve(segments(in.size(), segment));
            for (std::size_t off = 0; off < in.size(); off += segment)
                recvs.push_back(receive_into<T>(from, channel, in.subspan(off, std::min(segment, in.size() - off))));
        }
        std::vector<outgoing> sends = post_sends(to, out, segment, channel);
        for (auto& r : recvs) r.wait(limit_);
        for (auto& s : sends) s.wait(limit_);
    }

    /// Sends `out` to `to` while receiving `in.size()` elements from `from` and combining them into `in` per `spec`,
    /// in segments of `segment` elements with up to `depth` receives in flight (either side may be -1). `out` may
    /// overlap `in` (a recursive-doubling step): each segment is then combined aside and written back once the
    /// peer has taken our original.
    template <floating_element T>
    void exchange_reduce(int to, std::span<const T> out, int from, std::span<T> in, const combine_spec& spec,
                         std::size_t segment, int depth, int channel) {
        segment = std::max<std::size_t>(segment, 1);
        depth = std::max(depth, 1);
        const std::size_t count = from >= 0 ? segments(in.size(), segment) : 0;
        const bool alias = to >= 0 && detail::overlaps(out.data(), out.size_bytes(), in.data(), in.size_bytes());
        std::vector<outgoing> sends = post_sends(to, out, segment, channel);
        const auto piece = [&](std::size_t j) { return in.subspan(j * segment, std::min(segment, in.size() - j * segment)); };
        // Message path: `depth` scratch slots in rotation. Direct path: the peer's memory is read in place; one
        // slot is needed only when aliased. Staged path: pieces are combined straight from the pipe unless aliased.
        const bool in_place = direct_ || (pipes_ != nullptr && !alias);
        const std::size_t slots = in_place ? (alias ? 1 : 0) : std::min<std::size_t>(static_cast<std::size_t>(depth), count);
        const std::size_t width = std::min(segment, in.size());
        std::span<T> space;
        if (count > 0 && slots > 0) space = scratch<T>(slots * width);
        const auto slot = [&](std::size_t j) { return space.subspan((j % slots) * width, piece(j).size()); };
        const std::size_t window = in_place ? count : slots;
        std::vector<incoming<T>> recvs(std::max<std::size_t>(window, 1));
        const auto post = [&](std::size_t j) {
            if (!alias) recvs[j % recvs.size()] = receive_combine<T>(from, channel, piece(j), spec, slots > 0 ? slot(j) : std::span<T>());
            else if (direct_) recvs[j % recvs.size()] = receive<T>(from, channel, piece(j).size(), std::span<T>());
            else recvs[j % recvs.size()] = receive<T>(from, channel, piece(j).size(), slot(j));
        };
        for (std::size_t j = 0; j < std::min(window, count); ++j) post(j);
        for (std::size_t j = 0; j < count; ++j) {
            incoming<T>& r = recvs[j % recvs.size()];
            r.wait(limit_);
            const std::span<T> dst = piece(j);
            if (alias && direct_) {
                // The peer reads our original in place and we read its: combine aside, let it go on, and write
                // back once it has taken ours (waiting before reading would deadlock the two).
                T* aside = slot(j).data();
                combine_into(aside, r.data(), dst.data(), dst.size(), spec);
                r.release();
                if (j < sends.size()) sends[j].wait(limit_);
                std::memcpy(dst.data(), aside, dst.size_bytes());
            } else if (alias) {
                // Messages: once our segment has left, it can be overwritten in place.
                if (j < sends.size()) sends[j].wait(limit_);
                combine_into(dst.data(), r.data(), dst.data(), dst.size(), spec);
                r.release();
            } else {
                r.release();  // combined on arrival
            }
            if (j + window < count) post(j + window);
        }
        for (auto& s : sends) s.wait(limit_);
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

    /// The staged path's combination of one piece into its place in the receiver's buffer.
    template <floating_element T>
    static void combine_piece(std::byte* dst, const std::byte* piece, std::size_t bytes, const combine_spec& spec) noexcept {
        combine_into(reinterpret_cast<T*>(dst), reinterpret_cast<const T*>(piece), reinterpret_cast<T*>(dst),
                     bytes / sizeof(T), spec);
    }

    /// dst = op(theirs, mine) or op(mine, theirs) per `spec` (dst may alias either).
    template <floating_element T>
    static void combine_into(T* dst, const T* theirs, const T* mine, std::size_t n, const combine_spec& spec) noexcept {
        if (spec.incoming_left) combine(dst, theirs, mine, n, spec.op, spec.divisor);
        else combine(dst, mine, theirs, n, spec.op, spec.divisor);
    }

    /// The tag a channel uses in this call.
    [[nodiscard]] int tag_of(int channel) const {
        if (channel < 0 || channel >= channels_per_call)
            throw config_error(hitch::detail::concat("hitch::allreduce::transport: channel ", channel,
                                                     " is outside the allowed range [0, ", channels_per_call, ")"));
        return tag_base_ + channel;
    }

private:
    template <element_type T>
    incoming<T> post_receive(int peer, int channel, std::size_t count, T* buffer, bool into,
                             detail::piece_combiner combiner = nullptr, const combine_spec& spec = {}) {
        incoming<T> op;
        op.count_ = count;
        op.peer_ = peer;
        op.rank_ = rank_;
        op.spin_ = spin_;
        const int tag = tag_of(channel);
        if (pipes_ != nullptr) {
            check_peer(peer);
            op.engine_ = pipes_;
            op.channel_ = channel;
            op.data_ = buffer;
            if (into) op.into_ = buffer;
            op.pipe_ = pipes_->post_recv(peer, channel, reinterpret_cast<std::byte*>(buffer), count * sizeof(T),
                                         dtype_of<T>(), !into && combiner == nullptr, combiner, spec);
            return op;
        }
        if (!direct_) {
            op.data_ = buffer;
            op.request_.emplace(comm_.irecv(std::span<T>(buffer, count), peer, tag));
            return op;
        }
        if (into) op.into_ = buffer;
        op.descriptor_ = std::make_unique<detail::direct_descriptor>();
        op.request_.emplace(
            comm_.irecv(std::as_writable_bytes(std::span<detail::direct_descriptor>(op.descriptor_.get(), 1)), peer, tag));
        return op;
    }

    void check_peer(int peer) const {
        if (peer < 0 || peer >= size_ || peer == rank_)
            throw config_error(hitch::detail::concat("hitch::allreduce::transport: peer ", peer, " is not another rank of [0, ",
                                                     size_, ") (this is rank ", rank_, ")"));
    }

    C& comm_;
    deadline limit_;
    shared_state<C>& state_;
    std::uint64_t sequence_;
    int tag_base_;
    int rank_;
    int size_;
    bool shared_memory_;
    bool direct_;
    detail::pipes* pipes_;
    std::chrono::nanoseconds spin_;  // threads of one process, each with a core: poll before yielding
    bool agreed_ = false;
    std::vector<scratch_arena::lease> leases_;
};

}  // namespace hitch::allreduce
