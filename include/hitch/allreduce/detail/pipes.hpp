#pragma once
// hitch::allreduce::detail::pipes: the transport's staged path between processes on one node.
//
// Ranks of comm::mpi on one node map a shared region (comm::mpi::map_node_memory). In it every ordered pair of
// ranks (s -> d) has a pipe of K slots of Z bytes, in s's part: s copies a message into free slots, piece by piece,
// and d reads each piece straight from s's memory (combining it into its own buffer, copying it out, or, for a
// one-piece message, lending it in place as the receive's view) and hands the slot back. The slots are few and
// reused, so pieces pass through the shared cache: a byte sent costs one read of the sender's buffer and one
// write of the receiver's, where an MPI message through the node's shared memory costs two copies and a pass
// over scratch.
//
// Matching follows MPI's rules without MPI: every piece carries the call's sequence number, its channel, the
// message's index among the pair's messages on that channel in this call, its dtype and sizes. A receive takes
// the index-th message of its (peer, channel); a message of the wrong size or type fails the receive with
// comm_error and leaves the receiver's buffer untouched. Pieces of an earlier call (abandoned by an error) are
// dropped; pieces of a later call wait.
//
// Progress is made by whichever rank waits (every wait of the transport calls progress()): a sender stages the
// pieces of its pending sends into slots the receiver has handed back; a receiver consumes pieces that match
// posted receives. Staging is a rendezvous, as MPI's is for large messages: a piece takes a slot once its receive
// is posted (the receiver publishes, per channel, how many receives it has posted in the call), or eagerly while
// at most a quarter of the pipe is in use, so a small message leaves before its receive is posted. Pieces nobody
// has asked for therefore hold at most a quarter of a pipe, views lent in place at most half (beyond that a
// receive is copied), and the rest always drains: messages on one channel cannot hold up another's, and no order
// of posts and waits that is safe over MPI can deadlock here. A send completes once its last piece is staged.
//
// One pipes object per group: the group's calls run one at a time, so nothing here is locked.

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "hitch/allreduce/detail/slot_copier.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport/mismatch.hpp"
#include "hitch/comm/detail/node_memory.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"

namespace hitch::allreduce::detail {

/// Type-erased combination of an incoming piece into its place in the receiver's buffer, per the spec.
using piece_combiner = void (*)(std::byte* dst, const std::byte* piece, std::size_t bytes, const combine_spec& spec);

class pipes {
public:
    /// Bytes per slot and slots per pipe for `ranks` ranks; the same on every rank.
    struct layout {
        std::size_t slot_bytes = std::size_t{64} << 10;
        int slots = 16;
    };
    [[nodiscard]] static layout layout_for(int ranks) {
        layout l;
        const std::size_t budget = std::size_t{16} << 20;  // per rank, all its outgoing pipes together
        const std::size_t per_pipe = budget / static_cast<std::size_t>(std::max(ranks - 1, 1));
        l.slots = static_cast<int>(std::min<std::size_t>(16, per_pipe / l.slot_bytes));  // 0: no pipes
        return l;
    }
    /// Bytes of one rank's part of the shared region (its outgoing pipes).
    [[nodiscard]] static std::size_t part_bytes(int ranks, const layout& l) {
        return static_cast<std::size_t>(std::max(ranks - 1, 0)) * pipe_bytes(l);
    }

    pipes(std::shared_ptr<comm::node_memory> memory, int rank, int size, const layout& l)
        : memory_(std::move(memory)),
          layout_(l),
          rank_(rank),
          size_(size),
          out_(static_cast<std::size_t>(size)),
          in_(static_cast<std::size_t>(size)),
          sent_(static_cast<std::size_t>(size) * channels),
          posted_(static_cast<std::size_t>(size) * channels) {
        for (int q = 0; q < size_; ++q) {
            if (q == rank_) continue;
            auto& o = out_[static_cast<std::size_t>(q)];
            o.pipe = pipe_at(rank_, q);
            o.busy.assign(static_cast<std::size_t>(layout_.slots), 0);
            auto& i = in_[static_cast<std::size_t>(q)];
            i.pipe = pipe_at(q, rank_);
            i.seen.assign(static_cast<std::size_t>(layout_.slots), 0);
            i.held.assign(static_cast<std::size_t>(layout_.slots), 0);
        }
    }
    pipes(const pipes&) = delete;
    pipes& operator=(const pipes&) = delete;

    /// What sends and receives have in common: the message's place among the pair's messages, and its shape.
    struct message {
        int peer = 0;
        int channel = 0;
        std::uint64_t index = 0;  // among this call's messages of the pair on this channel
        std::size_t bytes = 0;
        std::uint32_t type = 0;
        std::size_t pieces = 1;
        bool done = false;
    };
    /// A send in flight: done once every piece is staged.
    struct send_op : message {
        const std::byte* data = nullptr;
        std::size_t staged = 0;   // pieces
        std::uint64_t order = 0;  // post order among this call's sends
    };
    /// A receive in flight. `dst` receives copies (or combinations, when `combiner` is set); a one-piece message
    /// may instead be lent in place (`view`, when `lend` is set).
    struct recv_op : message {
        std::byte* dst = nullptr;
        bool lend = false;
        piece_combiner combiner = nullptr;
        combine_spec spec{};
        const std::byte* view = nullptr;
        int held_slot = -1;
        std::size_t arrived = 0;
        std::string error;
    };

    /// Starts call `sequence`: drops what an earlier call left behind.
    void begin_call(std::uint64_t sequence) {
        call_ = sequence;
        forget();
        orders_ = 0;
        std::fill(sent_.begin(), sent_.end(), 0);
        std::fill(posted_.begin(), posted_.end(), 0);
        for (std::size_t q = 0; q < in_.size(); ++q)
            if (static_cast<int>(q) != rank_) in_[q].dirty = true;
    }
    /// Ends the call: views still lent are handed back, pending sends forgotten.
    void end_call() noexcept {
        for (auto& r : recvs_)
            if (r.held_slot >= 0) hand_back(r.peer, r.held_slot);
        forget();
    }

    [[nodiscard]] send_op* post_send(int peer, int channel, const std::byte* data, std::size_t bytes, dtype type) {
        send_op& s = sends_.emplace_back();
        describe(s, peer, channel, sent_, bytes, type);
        s.data = data;
        s.order = orders_++;
        auto& o = out_[static_cast<std::size_t>(peer)];
        o.queues[static_cast<std::size_t>(channel)].push_back(&s);
        o.active |= std::uint64_t{1} << channel;
        stage(peer);
        return &s;
    }

    [[nodiscard]] recv_op* post_recv(int peer, int channel, std::byte* dst, std::size_t bytes, dtype type, bool lend,
                                     piece_combiner combiner = nullptr, const combine_spec& spec = {}) {
        recv_op& r = recvs_.emplace_back();
        describe(r, peer, channel, posted_, bytes, type);
        r.dst = dst;
        r.lend = lend;
        r.combiner = combiner;
        r.spec = spec;
        waiting_.emplace(key(peer, channel, r.index), &r);
        auto& in = in_[static_cast<std::size_t>(peer)];
        in.dirty = true;
        // Tell the sender this receive is posted: its pieces may now take slots (see stage()).
        in.pipe.posted[channel].value.store(((call_ & 0xffffffffULL) << 32) | (r.index + 1), std::memory_order_release);
        return &r;
    }

    /// Stages what can be staged and consumes what has arrived.
    void progress() {
        for (int q = 0; q < size_; ++q) {
            if (q == rank_) continue;
            if (out_[static_cast<std::size_t>(q)].active != 0) stage(q);
            consume(q);
        }
    }

    /// The receive is done with (or gives up on) its data: a lent slot goes back to the sender, and a receive
    /// still incomplete matches nothing any more: its message's pieces are dropped as they come, never written.
    void release(recv_op* r) noexcept {
        if (r == nullptr) return;
        if (!r->done) {
            const std::uint64_t k = key(r->peer, r->channel, r->index);
            waiting_.erase(k);
            dropped_.insert(k);  // its pieces are handed back unread when they come
            r->done = true;
        }
        if (r->held_slot >= 0) hand_back(r->peer, r->held_slot);
        r->held_slot = -1;
        r->view = nullptr;
    }
    void abandon(recv_op* r) noexcept { release(r); }
    /// A send given up before all its pieces were staged: the rest never leaves.
    void abandon(send_op* s) noexcept {
        if (s == nullptr || s->done) return;
        auto& o = out_[static_cast<std::size_t>(s->peer)];
        auto& queue = o.queues[static_cast<std::size_t>(s->channel)];
        std::erase(queue, s);
        if (queue.empty()) o.active &= ~(std::uint64_t{1} << s->channel);
        s->done = true;
    }

    /// For timeout messages: how far a receive got.
    [[nodiscard]] static std::string progress_of(const recv_op& r) {
        return hitch::detail::concat(r.arrived, " of ", r.pieces, " pieces of ", r.bytes, " bytes arrived");
    }

    /// Channels per call (transport's channelsper_call); each has its own matching and its own posted count.
    static constexpr std::size_t channels = 64;

private:
    static constexpr std::size_t line = 64;

    /// Drops the call's operations (not the pipes' contents).
    void forget() noexcept {
        sends_.clear();
        recvs_.clear();
        if (!waiting_.empty()) waiting_.clear();  // clear() costs the bucket count even when empty
        if (!dropped_.empty()) dropped_.clear();
        for (auto& o : out_) o.clear();
    }

    /// What a piece says of itself.
    struct header_copy {
        std::uint64_t call;
        std::uint32_t channel;
        std::uint32_t type;
        std::uint64_t index;
        std::uint64_t message_bytes;
        std::uint64_t offset;
        std::uint64_t bytes;
    };
    /// Written by the sender.
    struct alignas(line) slot_header {
        std::atomic<std::uint64_t> stamp;  // times the slot was filled; the piece is new while stamp != ack
        header_copy piece;
    };
    /// Written by the receiver.
    struct alignas(line) slot_ack {
        std::atomic<std::uint64_t> stamp;
    };
    struct alignas(line) counter {
        std::atomic<std::uint64_t> value;
    };
    static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "hitch's pipes need lock-free 64-bit atomics");

    /// One pipe in shared memory: [filled][handed back][posted x 64 channels][K headers][K acks][K x Z data].
    struct pipe_view {
        counter* filled = nullptr;       // pieces staged so far (sender)
        counter* handed_back = nullptr;  // slots handed back so far (receiver)
        counter* posted = nullptr;       // per channel: (call << 32) | receives posted in that call (receiver)
        slot_header* headers = nullptr;
        slot_ack* acks = nullptr;
        std::byte* data = nullptr;
    };
    struct outgoing_pipe {
        pipe_view pipe;
        std::vector<std::uint64_t> busy;  // stamp of a slot not yet handed back, 0 when free
        std::uint64_t handed_back_seen = 0;
        std::size_t in_use = 0;                             // busy slots
        std::array<std::deque<send_op*>, channels> queues;  // pending sends per channel, in post order
        std::uint64_t active = 0;                           // channels with pending sends
        int cursor = 0;
        slot_copier copier;  // through the cache or streamed
        void clear() {
            for (std::uint64_t bits = active; bits != 0; bits &= bits - 1)
                queues[static_cast<std::size_t>(std::countr_zero(bits))].clear();
            active = 0;
        }
    };
    struct incoming_pipe {
        pipe_view pipe;
        std::vector<std::uint64_t> seen;  // the stamp this rank has dealt with (consumed, lent or set aside)
        std::vector<char> held;           // lent as a view
        std::uint64_t filled_seen = 0;
        int lent = 0;
        bool dirty = true;
    };

    [[nodiscard]] static std::size_t pipe_bytes(const layout& l) {
        const auto k = static_cast<std::size_t>(l.slots);
        return (2 + channels) * line + k * (sizeof(slot_header) + sizeof(slot_ack)) + k * l.slot_bytes;
    }
    [[nodiscard]] pipe_view pipe_at(int from, int to) const {
        const int index = to < from ? to : to - 1;
        std::byte* base = memory_->part(from) + static_cast<std::size_t>(index) * pipe_bytes(layout_);
        const auto k = static_cast<std::size_t>(layout_.slots);
        pipe_view v;
        v.filled = reinterpret_cast<counter*>(base);
        v.handed_back = reinterpret_cast<counter*>(base + line);
        v.posted = reinterpret_cast<counter*>(base + 2 * line);
        base += (2 + channels) * line;
        v.headers = reinterpret_cast<slot_header*>(base);
        v.acks = reinterpret_cast<slot_ack*>(base + k * sizeof(slot_header));
        v.data = base + k * (sizeof(slot_header) + sizeof(slot_ack));
        return v;
    }
    /// Numbers a new message of this call on (peer, channel) with `counts` (sends' or receives') and sizes it.
    void describe(message& m, int peer, int channel, std::vector<std::uint64_t>& counts, std::size_t bytes,
                  dtype type) {
        m.peer = peer;
        m.channel = channel;
        m.index = counts[key_slot(peer, channel)]++;
        m.bytes = bytes;
        m.type = static_cast<std::uint32_t>(type);
        m.pieces = pieces_of(bytes);
    }
    [[nodiscard]] std::size_t pieces_of(std::size_t bytes) const noexcept {
        return bytes == 0 ? 1 : (bytes + layout_.slot_bytes - 1) / layout_.slot_bytes;
    }
    [[nodiscard]] static std::size_t key_slot(int peer, int channel) noexcept {
        return static_cast<std::size_t>(peer) * channels + static_cast<std::size_t>(channel);
    }
    [[nodiscard]] static std::uint64_t key(int peer, int channel, std::uint64_t index) noexcept {
        return (static_cast<std::uint64_t>(key_slot(peer, channel)) << 32) ^ index;
    }

    /// Copies pending pieces to `peer` into free slots. A piece takes a slot when its receive is posted (the
    /// receiver publishes, per channel, how many it has posted in this call), or eagerly while at most a quarter of
    /// the pipe is in use: so pieces nobody has asked for never crowd out those a receiver waits for (messages on
    /// one channel cannot hold up another's, as MPI's rendezvous would not let them), and a small message still
    /// leaves before its receive is posted. Among candidates, the oldest send goes first.
    void stage(int peer) {
        auto& o = out_[static_cast<std::size_t>(peer)];
        const auto k = static_cast<std::size_t>(layout_.slots);
        const std::uint64_t back = o.pipe.handed_back->value.load(std::memory_order_acquire);
        if (back != o.handed_back_seen) {
            o.handed_back_seen = back;
            for (std::size_t s = 0; s < k; ++s)
                if (o.busy[s] != 0 && o.pipe.acks[s].stamp.load(std::memory_order_acquire) == o.busy[s]) {
                    o.busy[s] = 0;
                    --o.in_use;
                }
        }
        const std::uint64_t this_call = call_ & 0xffffffffULL;
        while (o.active != 0 && o.in_use < k) {
            const bool eager = o.in_use < std::max<std::size_t>(k / 4, 1);
            send_op* pick = nullptr;
            for (std::uint64_t bits = o.active; bits != 0; bits &= bits - 1) {
                const int c = std::countr_zero(bits);
                send_op* head = o.queues[static_cast<std::size_t>(c)].front();
                if (pick != nullptr && head->order > pick->order) continue;
                bool ready = eager;
                if (!ready) {
                    const std::uint64_t v = o.pipe.posted[c].value.load(std::memory_order_acquire);
                    ready = (v >> 32) == this_call && head->index < (v & 0xffffffffULL);
                }
                if (ready) pick = head;
            }
            if (pick == nullptr) return;
            std::size_t free_slot = 0;
            for (std::size_t i = 0; i < k; ++i) {
                free_slot = (static_cast<std::size_t>(o.cursor) + i) % k;
                if (o.busy[free_slot] == 0) break;
            }
            o.cursor = static_cast<int>((free_slot + 1) % k);
            send_op& m = *pick;
            const std::size_t offset = m.staged * layout_.slot_bytes;
            const std::size_t bytes = std::min(layout_.slot_bytes, m.bytes - std::min(offset, m.bytes));
            slot_header& h = o.pipe.headers[free_slot];
            if (bytes != 0)
                o.copier.copy(o.pipe.data + free_slot * layout_.slot_bytes, m.data + offset, bytes,
                              bytes == layout_.slot_bytes);
            h.piece =
                header_copy{call_, static_cast<std::uint32_t>(m.channel), m.type, m.index, m.bytes, offset, bytes};
            const std::uint64_t stamp = h.stamp.load(std::memory_order_relaxed) + 1;
            h.stamp.store(stamp, std::memory_order_release);
            o.busy[free_slot] = stamp;
            ++o.in_use;
            o.pipe.filled->value.fetch_add(1, std::memory_order_release);
            if (++m.staged == m.pieces) {
                m.done = true;
                auto& queue = o.queues[static_cast<std::size_t>(m.channel)];
                queue.pop_front();
                if (queue.empty()) o.active &= ~(std::uint64_t{1} << m.channel);
            }
        }
    }

    /// Takes the pieces from `peer` that posted receives are waiting for.
    void consume(int peer) {
        auto& in = in_[static_cast<std::size_t>(peer)];
        const std::uint64_t filled = in.pipe.filled->value.load(std::memory_order_acquire);
        if (filled != in.filled_seen) {
            in.filled_seen = filled;
            in.dirty = true;
        }
        if (!in.dirty) return;
        in.dirty = false;
        const auto k = static_cast<std::size_t>(layout_.slots);
        for (std::size_t s = 0; s < k; ++s) {
            const slot_header& h = in.pipe.headers[s];
            const std::uint64_t stamp = h.stamp.load(std::memory_order_acquire);
            if (stamp == in.seen[s]) continue;
            const header_copy c = h.piece;
            if (c.call < call_) {  // left by an abandoned call
                in.seen[s] = stamp;
                hand_back(peer, static_cast<int>(s));
                continue;
            }
            if (c.call == call_) {
                if (auto it = waiting_.find(key(peer, static_cast<int>(c.channel), c.index)); it != waiting_.end()) {
                    recv_op& r = *it->second;
                    in.seen[s] = stamp;
                    deliver(r, c, in.pipe.data + s * layout_.slot_bytes, static_cast<int>(s));
                    continue;
                }
                if (!dropped_.empty() && dropped_.count(key(peer, static_cast<int>(c.channel), c.index)) != 0) {
                    in.seen[s] = stamp;
                    hand_back(peer, static_cast<int>(s));
                    continue;
                }
            }
            // Otherwise the piece waits for its receive (at most a quarter of the pipe is staged unasked).
        }
    }

    /// Hands piece `h` (in slot `slot`) to receive `r`; the slot goes back unless it is lent as the receive's view.
    void deliver(recv_op& r, const header_copy& h, const std::byte* piece, int slot) {
        if (h.message_bytes != r.bytes || h.type != r.type || h.offset + h.bytes > r.bytes) {
            r.error = message_mismatch(rank_, r.peer, r.bytes, static_cast<dtype>(r.type), h.message_bytes,
                                       static_cast<dtype>(h.type));
            hand_back(r.peer, slot);
            finish(r);
            dropped_.insert(key(r.peer, r.channel, r.index));  // the rest of the message is dropped as it comes
            return;
        }
        auto& in = in_[static_cast<std::size_t>(r.peer)];
        if (r.lend && r.pieces == 1 && r.combiner == nullptr && in.lent < std::max(layout_.slots / 2, 1)) {
            r.view = piece;
            r.held_slot = slot;
            in.held[static_cast<std::size_t>(slot)] = 1;
            ++in.lent;
            ++r.arrived;
            finish(r);
            return;
        }
        if (h.bytes != 0) {
            if (r.combiner != nullptr)
                r.combiner(r.dst + h.offset, piece, h.bytes, r.spec);
            else
                std::memcpy(r.dst + h.offset, piece, h.bytes);
        }
        hand_back(r.peer, slot);
        if (++r.arrived == r.pieces) finish(r);
    }
    void finish(recv_op& r) {
        r.done = true;
        waiting_.erase(key(r.peer, r.channel, r.index));
    }

    void hand_back(int peer, int slot) noexcept {
        auto& in = in_[static_cast<std::size_t>(peer)];
        const auto s = static_cast<std::size_t>(slot);
        if (in.held[s] != 0) {
            in.held[s] = 0;
            --in.lent;
        }
        in.pipe.acks[s].stamp.store(in.seen[s], std::memory_order_release);
        in.pipe.handed_back->value.fetch_add(1, std::memory_order_release);
    }

    std::shared_ptr<comm::node_memory> memory_;
    layout layout_;
    int rank_;
    int size_;
    std::uint64_t call_ = 0;
    std::vector<outgoing_pipe> out_;
    std::vector<incoming_pipe> in_;
    std::deque<send_op> sends_;
    std::uint64_t orders_ = 0;
    std::deque<recv_op> recvs_;
    std::unordered_map<std::uint64_t, recv_op*> waiting_;
    std::unordered_set<std::uint64_t> dropped_;  // receives given up in this call
    std::vector<std::uint64_t> sent_, posted_;
};

}  // namespace hitch::allreduce::detail
