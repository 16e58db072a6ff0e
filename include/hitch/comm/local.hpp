#pragma once
// hitch::comm::local: ranks are threads of one process. A local_world of N ranks shares one mailbox per rank;
// messages are matched like MPI's (by context, source and tag, in order). Small messages are copied eagerly so
// their send completes at once; large ones are copied exactly once, straight from the sender's buffer into the
// receiver's, when both sides have arrived.
//
//   hitch::comm::run_local(4, [](hitch::comm::local& comm) { ... });   // runs on 4 threads, rethrows the first error
//
// Past 500 lines on purpose: the mailboxes, the matching and the communicator share one lock discipline, and
// splitting them would put the halves of each critical section in different files.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/comm/detail/barrier.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/core/options.hpp"

namespace hitch::comm {

struct local_options {
    /// Deadline of every blocking call, in seconds (default: HITCH_TIMEOUT_S, else 300).
    double timeout_s = timeout_from_environment().count();
    /// Messages up to this size are copied at send time, so the send completes without a matching receive.
    std::size_t eager_limit_bytes = 64 * 1024;

    void validate() const {
        option_validator("hitch::comm::local_options")
            .open_closed("timeout_s", timeout_s, 0.0, 1e9)
            .closed("eager_limit_bytes", eager_limit_bytes, std::size_t{0}, std::size_t{1} << 30);
    }
};

class local;
class local_world;

namespace detail {

enum class local_op_kind : std::uint8_t { send, recv };
enum local_op_status : int { op_pending = 0, op_matched = 1, op_done = 2, op_failed = 3, op_cancelled = 4 };

/// One side of a message in flight, shared by the request and the mailbox it waits in.
struct local_op {
    local_op_kind kind{};
    std::uint64_t context = 0;
    int source = 0;  // sender's rank in the group (a receive may ask for any_source)
    int peer = 0;    // the other side as the caller named it (for messages)
    int tag = 0;
    int owner_rank = 0;      // the rank that posted this op, in the group
    dtype type = dtype::u8;  // element type (u8 for raw bytes)
    bool eager = false;
    const std::byte* send_data = nullptr;
    std::vector<std::byte> eager_copy;
    std::byte* recv_data = nullptr;
    std::size_t bytes = 0;  // send: message size; recv: buffer size
    message_info info;
    std::string error_text;
    std::shared_ptr<void> attachment;  // a send's (isend_attached), handed to the receive that gets the message

    std::atomic<int> status{op_pending};
    std::mutex m;
    std::condition_variable cv;

    void complete(int s) {
        {
            std::lock_guard lock(m);
            status.store(s, std::memory_order_release);
        }
        cv.notify_all();
    }
};

struct local_mailbox {
    std::mutex m;
    std::condition_variable arrived;                   // notified when a send is queued unmatched (for probe)
    std::deque<std::shared_ptr<local_op>> unexpected;  // unmatched sends, in arrival order
    std::deque<std::shared_ptr<local_op>> posted;      // unmatched receives, in post order
};

[[nodiscard]] inline bool matches(const local_op& send, const local_op& recv) noexcept {
    return send.context == recv.context && send.tag == recv.tag &&
           (recv.source == any_source || recv.source == send.source);
}

/// Thrown on ranks released because another rank failed; run_local reports the original error instead.
class local_aborted : public comm_error {
public:
    using comm_error::comm_error;
};

struct local_world_state {
    explicit local_world_state(int n, const local_options& o)
        : size(n), options(o), boxes(static_cast<std::size_t>(n)) {
        for (auto& b : boxes) b = std::make_unique<local_mailbox>();
    }

    int size;
    local_options options;
    std::vector<std::unique_ptr<local_mailbox>> boxes;  // by global rank

    std::atomic<bool> aborted{false};
    std::mutex abort_m;
    std::string abort_reason;

    std::mutex registry_m;
    std::map<std::tuple<std::uint64_t, std::uint64_t, int>, std::uint64_t> split_contexts;
    std::uint64_t next_context = 2;  // context 0 (user) and 1 (internal) belong to the world communicator

    void abort(const std::string& reason) {
        {
            std::lock_guard lock(abort_m);
            if (aborted.load()) return;
            abort_reason = reason;
            aborted.store(true);
        }
        for (auto& b : boxes) {
            std::lock_guard lock(b->m);
            b->arrived.notify_all();
        }
    }
    [[nodiscard]] std::string why_aborted() {
        std::lock_guard lock(abort_m);
        return abort_reason;
    }

    /// The same (parent context, split number, color) gives the same new context on every member.
    std::uint64_t context_for(std::uint64_t parent, std::uint64_t sequence, int color) {
        std::lock_guard lock(registry_m);
        auto [it, inserted] = split_contexts.try_emplace({parent, sequence, color}, next_context);
        if (inserted) next_context += 2;
        return it->second;
    }
};

/// Copies a matched send into its receive and completes both. Called without any mailbox lock held.
inline void deliver(local_op& send, local_op& recv) {
    const bool raw = send.type == dtype::u8 || recv.type == dtype::u8;
    if (send.bytes != recv.bytes || (!raw && send.type != recv.type)) {
        const auto describe = [](const local_op& op) {
            const std::size_t es = size_of(op.type);
            return concat(op.bytes, " bytes (", es != 0 ? op.bytes / es : op.bytes, " x ", name(op.type), ")");
        };
        recv.error_text =
            concat("hitch::comm::local: message mismatch on rank ", recv.owner_rank, ": recv from rank ", send.source,
                   " with tag ", send.tag, " expected ", describe(recv), " but the message has ", describe(send));
        recv.info = {send.source, send.tag, send.bytes};
        recv.complete(op_failed);
    } else {
        if (send.bytes != 0) std::memcpy(recv.recv_data, send.send_data, send.bytes);
        recv.info = {send.source, send.tag, send.bytes};
        recv.attachment = std::move(send.attachment);
        recv.complete(op_done);
    }
    if (!send.eager) send.complete(op_done);
}

}  // namespace detail

/// Communicator whose ranks are threads of one process. Move-only; obtained from local_world or run_local.
class local {
public:
    /// Request for a non-blocking send or receive on comm::local.
    class request {
    public:
        request() = default;
        request(const request&) = delete;
        request& operator=(const request&) = delete;
        request(request&&) noexcept = default;
        request& operator=(request&& other) noexcept {
            if (this != &other) {
                cancel_if_pending();
                op_ = std::move(other.op_);
                world_ = std::move(other.world_);
                box_ = other.box_;
                timeout_ = other.timeout_;
                rank_ = other.rank_;
            }
            return *this;
        }
        ~request() { cancel_if_pending(); }

        /// True once the operation completed; throws comm_error if it failed (size mismatch, aborted world).
        bool test() {
            if (!op_) return true;
            const int s = op_->status.load(std::memory_order_acquire);
            if (s == detail::op_done) return true;
            if (s == detail::op_failed) throw comm_error(op_->error_text);
            if (world_->aborted.load(std::memory_order_relaxed)) fail_aborted();
            return false;
        }
        /// Waits up to the communicator's timeout.
        void wait() { wait(deadline(timeout_)); }
        /// Waits until `limit`; throws timeout_error naming the operation, peer and tag when it passes.
        void wait(const deadline& limit) {
            if (!op_) return;
            // Spin, then yield, for at most a millisecond: on a busy machine each yield may give up a whole time
            // slice, and thousands of them would hold a wait (a roll call's, after its deadline) for seconds.
            const auto spin_until = deadline::clock::now() + std::chrono::milliseconds(1);
            for (int spin = 0; spin < 4000; ++spin) {
                if (op_->status.load(std::memory_order_acquire) >= detail::op_done) return finish();
                if (spin >= 256) {
                    if (deadline::clock::now() >= spin_until) break;
                    std::this_thread::yield();
                }
            }
            {
                std::unique_lock lock(op_->m);
                while (op_->status.load(std::memory_order_acquire) < detail::op_done) {
                    if (world_->aborted.load()) {
                        lock.unlock();
                        fail_aborted();
                    }
                    const auto now = deadline::clock::now();
                    if (now >= limit.when()) {
                        lock.unlock();
                        if (cancel()) throw timeout_error(operation(), where(), limit.waited());
                        return finish();  // completed while we gave up
                    }
                    op_->cv.wait_until(lock, std::min(limit.when(), now + std::chrono::milliseconds(20)));
                }
            }
            finish();
        }
        /// Source, tag and byte count of a completed receive (of a send: its destination, tag and size).
        [[nodiscard]] message_info status() const {
            if (!op_) return {};
            if (op_->kind == detail::local_op_kind::send) return {op_->peer, op_->tag, op_->bytes};
            return op_->info;
        }
        [[nodiscard]] std::string describe() const { return op_ ? operation() + " (" + where() + ")" : "no operation"; }
        /// A completed receive's share of what the sender attached to the message (isend_attached); empty for
        /// other messages, and once taken.
        [[nodiscard]] std::shared_ptr<void> take_attachment() noexcept {
            if (!op_ || op_->status.load(std::memory_order_acquire) != detail::op_done) return nullptr;
            return std::exchange(op_->attachment, nullptr);
        }

    private:
        friend class local;
        request(std::shared_ptr<detail::local_op> op, std::shared_ptr<detail::local_world_state> world,
                detail::local_mailbox* box, seconds_f timeout, int rank)
            : op_(std::move(op)), world_(std::move(world)), box_(box), timeout_(timeout), rank_(rank) {}

        void finish() {
            const int s = op_->status.load(std::memory_order_acquire);
            if (s == detail::op_failed) throw comm_error(op_->error_text);
        }
        [[noreturn]] void fail_aborted() {
            cancel();
            throw detail::local_aborted(
                detail::concat("hitch::comm::local: ", operation(), " on rank ", rank_,
                               " was released because the world was aborted: ", world_->why_aborted()));
        }
        [[nodiscard]] std::string operation() const {
            return op_->kind == detail::local_op_kind::send ? "comm::local send" : "comm::local recv";
        }
        [[nodiscard]] std::string where() const {
            const bool send = op_->kind == detail::local_op_kind::send;
            std::string peer = op_->peer == any_source ? std::string("any rank") : detail::concat("rank ", op_->peer);
            return detail::concat(send ? "to " : "from ", peer, ", tag ", op_->tag, ", ", op_->bytes,
                                  " bytes, on rank ", rank_);
        }
        /// Withdraws a pending op from its mailbox. Returns false when it had already been matched (and then waits
        /// for the copy to finish, so the caller's buffer is no longer touched).
        bool cancel() {
            if (!op_) return false;
            {
                std::lock_guard lock(box_->m);
                if (op_->status.load() == detail::op_pending) {
                    auto& queue = op_->kind == detail::local_op_kind::send ? box_->unexpected : box_->posted;
                    auto it = std::find(queue.begin(), queue.end(), op_);
                    if (it != queue.end()) {
                        queue.erase(it);
                        op_->status.store(detail::op_cancelled);
                        return true;
                    }
                }
            }
            while (op_->status.load(std::memory_order_acquire) == detail::op_matched) std::this_thread::yield();
            return op_->status.load() == detail::op_cancelled;
        }
        void cancel_if_pending() noexcept {
            if (op_ && op_->status.load() < detail::op_done) cancel();
        }

        std::shared_ptr<detail::local_op> op_;
        std::shared_ptr<detail::local_world_state> world_;
        detail::local_mailbox* box_ = nullptr;
        seconds_f timeout_{};
        int rank_ = 0;
    };

    local(const local&) = delete;
    local& operator=(const local&) = delete;
    local(local&& other) noexcept
        : world_(std::move(other.world_)),
          members_(std::move(other.members_)),
          context_(other.context_),
          rank_(other.rank_),
          timeout_(other.timeout_),
          splits_(other.splits_.load()),
          barriers_(other.barriers_.load()) {}
    local& operator=(local&& other) noexcept {
        world_ = std::move(other.world_);
        members_ = std::move(other.members_);
        context_ = other.context_;
        rank_ = other.rank_;
        timeout_ = other.timeout_;
        splits_ = other.splits_.load();
        barriers_ = other.barriers_.load();
        return *this;
    }
    ~local() = default;

    [[nodiscard]] int rank() const noexcept { return rank_; }
    [[nodiscard]] int size() const noexcept { return static_cast<int>(members_->size()); }
    [[nodiscard]] int max_tag() const noexcept { return std::numeric_limits<int>::max(); }
    static constexpr std::string_view name = "comm::local";
    [[nodiscard]] seconds_f timeout() const noexcept { return timeout_; }
    void set_timeout(seconds_f t) {
        option_validator("hitch::comm::local::set_timeout").open_closed("timeout_s", t.count(), 0.0, 1e9);
        timeout_ = t;
    }
    /// Ranks of this communicator share one address space (a pointer sent to a peer is valid there).
    static constexpr bool shares_address_space = true;
    /// Every rank is a thread of this process: one node.
    [[nodiscard]] hitch::node_layout node_layout() const {
        return hitch::node_layout{std::vector<int>(static_cast<std::size_t>(size()), 0), 1};
    }
    /// This rank's index in the world the communicator was split from.
    [[nodiscard]] int world_rank() const noexcept { return (*members_)[static_cast<std::size_t>(rank_)]; }

    template <element_type T>
    [[nodiscard]] request isend(std::span<const T> data, int peer, int tag) {
        return post_send(std::as_bytes(data), dtype_of<T>(), peer, tag, context_);
    }
    template <element_type T>
    [[nodiscard]] request isend(std::span<T> data, int peer, int tag) {
        return isend(std::span<const T>(data), peer, tag);
    }
    /// isend with an object that travels with the message: the receive that gets it holds it
    /// (request::take_attachment()), and a message never received releases it with its mailbox. The all-reduce
    /// transport's in-place sends hand over the lease on the sender's buffer this way.
    template <element_type T>
    [[nodiscard]] request isend_attached(std::span<const T> data, int peer, int tag, std::shared_ptr<void> attachment) {
        return post_send(std::as_bytes(data), dtype_of<T>(), peer, tag, context_, std::move(attachment));
    }
    template <element_type T>
    [[nodiscard]] request irecv(std::span<T> data, int peer, int tag) {
        static_assert(!std::is_const_v<T>, "hitch::comm::local::irecv needs a writable span");
        return post_recv(std::as_writable_bytes(data), dtype_of<T>(), peer, tag, context_);
    }
    /// Blocking forms.
    template <element_type T>
    void send(std::span<const T> data, int peer, int tag) {
        isend(data, peer, tag).wait();
    }
    template <element_type T>
    void send(std::span<T> data, int peer, int tag) {
        isend(std::span<const T>(data), peer, tag).wait();
    }
    template <element_type T>
    message_info recv(std::span<T> data, int peer, int tag) {
        auto r = irecv(data, peer, tag);
        r.wait();
        return r.status();
    }

    /// Blocks until a message from `peer` (or any_source) with `tag` is pending; returns its source and size.
    [[nodiscard]] message_info probe(int peer, int tag) {
        check_peer(peer, true, "probe");
        check_tag(tag, "probe");
        const deadline limit(timeout_);
        auto& box = mailbox();
        std::unique_lock lock(box.m);
        for (;;) {
            if (auto found = find_unexpected(box, peer, tag)) return *found;
            if (world_->aborted.load())
                throw detail::local_aborted(
                    detail::concat("hitch::comm::local: probe on rank ", rank_,
                                   " was released because the world was aborted: ", world_->why_aborted()));
            const auto now = deadline::clock::now();
            if (now >= limit.when())
                throw timeout_error(
                    "comm::local probe",
                    detail::concat("from ",
                                   peer == any_source ? std::string("any rank") : detail::concat("rank ", peer),
                                   ", tag ", tag, ", on rank ", rank_),
                    limit.waited());
            box.arrived.wait_until(lock, std::min(limit.when(), now + std::chrono::milliseconds(20)));
        }
    }
    /// Non-blocking probe.
    [[nodiscard]] std::optional<message_info> iprobe(int peer, int tag) {
        check_peer(peer, true, "iprobe");
        check_tag(tag, "iprobe");
        auto& box = mailbox();
        std::lock_guard lock(box.m);
        return find_unexpected(box, peer, tag);
    }

    /// Every rank of this communicator arrives, or timeout_error names the rank this one was waiting for.
    /// Throws (a comm_error) when another rank of the world failed and the world was aborted: for waits that are
    /// not on a request, such as the all-reduce transport's direct sends waiting for the peer to read in place.
    void throw_if_aborted(std::string_view waiting_for) const {
        if (world_->aborted.load(std::memory_order_relaxed))
            throw detail::local_aborted(
                detail::concat("hitch::comm::local: ", waiting_for, " on rank ", rank_,
                               " was released because the world was aborted: ", world_->why_aborted()));
    }

    void barrier() {
        detail::dissemination_barrier(
            rank_, size(), barriers_++, timeout_, name,
            [&](int to, int round) { return post_send({}, dtype::u8, to, round, context_ + 1); },
            [&](int from, int round) { return post_recv({}, dtype::u8, from, round, context_ + 1); });
    }

    /// Splits into sub-communicators: ranks with the same color (>= 0) form one, ordered by (key, rank).
    [[nodiscard]] local split(int color, int key) {
        option_validator("hitch::comm::local::split").at_least("color", color, 0);
        const int p = size();
        const std::uint64_t sequence = splits_++;
        std::vector<int> pairs(2 * static_cast<std::size_t>(p));
        pairs[2 * static_cast<std::size_t>(rank_)] = color;
        pairs[2 * static_cast<std::size_t>(rank_) + 1] = key;
        {
            const deadline limit(timeout_);
            const int mine[2] = {color, key};
            std::vector<request> pending;
            pending.reserve(2 * static_cast<std::size_t>(p));
            for (int r = 0; r < p; ++r) {
                if (r == rank_) continue;
                pending.push_back(
                    post_send(std::as_bytes(std::span<const int>(mine)), dtype::i32, r, split_tag, context_ + 1));
                pending.push_back(post_recv(std::as_writable_bytes(std::span<int>(&pairs[2 * std::size_t(r)], 2)),
                                            dtype::i32, r, split_tag, context_ + 1));
            }
            try {
                for (auto& q : pending) q.wait(limit);
            } catch (const timeout_error& e) {
                throw timeout_error("comm::local split",
                                    detail::concat("split #", sequence, " on rank ", rank_, ": ", e.what()),
                                    limit.waited());
            }
        }
        std::vector<int> group;
        for (int r = 0; r < p; ++r)
            if (pairs[2 * std::size_t(r)] == color) group.push_back(r);
        std::stable_sort(group.begin(), group.end(),
                         [&](int a, int b) { return pairs[2 * std::size_t(a) + 1] < pairs[2 * std::size_t(b) + 1]; });
        auto members = std::make_shared<std::vector<int>>();
        int new_rank = 0;
        for (std::size_t i = 0; i < group.size(); ++i) {
            members->push_back((*members_)[static_cast<std::size_t>(group[i])]);
            if (group[i] == rank_) new_rank = static_cast<int>(i);
        }
        const std::uint64_t ctx = world_->context_for(context_, sequence, color);
        return local(world_, std::move(members), ctx, new_rank, timeout_);
    }

private:
    friend class local_world;
    static constexpr int split_tag = 1 << 20;

    local(std::shared_ptr<detail::local_world_state> world, std::shared_ptr<const std::vector<int>> members,
          std::uint64_t context, int rank, seconds_f timeout)
        : world_(std::move(world)), members_(std::move(members)), context_(context), rank_(rank), timeout_(timeout) {}

    [[nodiscard]] detail::local_mailbox& mailbox(int group_rank) const {
        return *world_->boxes[static_cast<std::size_t>((*members_)[static_cast<std::size_t>(group_rank)])];
    }
    [[nodiscard]] detail::local_mailbox& mailbox() const { return mailbox(rank_); }

    void check_peer(int peer, bool any_ok, const char* op) const {
        if (any_ok && peer == any_source) return;
        if (peer < 0 || peer >= size())
            throw config_error(detail::concat("hitch::comm::local::", op, ": peer ", peer,
                                              " is outside the allowed range [0, ", size(), ")",
                                              any_ok ? " (or hitch::any_source)" : ""));
    }
    void check_tag(int tag, const char* op) const {
        if (tag < 0)
            throw config_error(detail::concat("hitch::comm::local::", op, ": tag ", tag,
                                              " is outside the allowed range [0, ", max_tag(), "]"));
    }

    std::optional<message_info> find_unexpected(detail::local_mailbox& box, int peer, int tag) const {
        for (const auto& s : box.unexpected)
            if (s->context == context_ && s->tag == tag && (peer == any_source || s->source == peer))
                return message_info{s->source, s->tag, s->bytes};
        return std::nullopt;
    }

    request post_send(std::span<const std::byte> data, dtype type, int peer, int tag, std::uint64_t context,
                      std::shared_ptr<void> attachment = nullptr) {
        check_peer(peer, false, "isend");
        check_tag(tag, "isend");
        if (world_->aborted.load())
            throw detail::local_aborted(
                detail::concat("hitch::comm::local: send on rank ", rank_,
                               " refused because the world was aborted: ", world_->why_aborted()));
        auto op = std::make_shared<detail::local_op>();
        op->kind = detail::local_op_kind::send;
        op->context = context;
        op->source = rank_;
        op->peer = peer;
        op->tag = tag;
        op->owner_rank = rank_;
        op->type = type;
        op->bytes = data.size();
        op->send_data = data.data();
        op->attachment = std::move(attachment);
        auto& box = mailbox(peer);
        std::shared_ptr<detail::local_op> recv;
        {
            std::lock_guard lock(box.m);
            auto it = std::find_if(box.posted.begin(), box.posted.end(),
                                   [&](const auto& r) { return detail::matches(*op, *r); });
            if (it != box.posted.end()) {
                recv = std::move(*it);
                box.posted.erase(it);
                recv->status.store(detail::op_matched);
                op->status.store(detail::op_matched);
            } else {
                if (op->bytes <= world_->options.eager_limit_bytes) {
                    op->eager = true;
                    op->eager_copy.assign(data.begin(), data.end());
                    op->send_data = op->eager_copy.data();
                    op->status.store(detail::op_done);
                }
                box.unexpected.push_back(op);
                box.arrived.notify_all();
            }
        }
        if (recv) detail::deliver(*op, *recv);
        return request(std::move(op), world_, &box, timeout_, rank_);
    }

    request post_recv(std::span<std::byte> data, dtype type, int peer, int tag, std::uint64_t context) {
        check_peer(peer, true, "irecv");
        check_tag(tag, "irecv");
        if (world_->aborted.load())
            throw detail::local_aborted(
                detail::concat("hitch::comm::local: recv on rank ", rank_,
                               " refused because the world was aborted: ", world_->why_aborted()));
        auto op = std::make_shared<detail::local_op>();
        op->kind = detail::local_op_kind::recv;
        op->context = context;
        op->source = peer;
        op->peer = peer;
        op->tag = tag;
        op->owner_rank = rank_;
        op->type = type;
        op->bytes = data.size();
        op->recv_data = data.data();
        auto& box = mailbox();
        std::shared_ptr<detail::local_op> send;
        {
            std::lock_guard lock(box.m);
            auto it = std::find_if(box.unexpected.begin(), box.unexpected.end(),
                                   [&](const auto& s) { return detail::matches(*s, *op); });
            if (it != box.unexpected.end()) {
                send = std::move(*it);
                box.unexpected.erase(it);
                if (!send->eager) send->status.store(detail::op_matched);
                op->status.store(detail::op_matched);
            } else {
                box.posted.push_back(op);
            }
        }
        if (send) detail::deliver(*send, *op);
        return request(std::move(op), world_, &box, timeout_, rank_);
    }

    std::shared_ptr<detail::local_world_state> world_;
    std::shared_ptr<const std::vector<int>> members_;  // group rank -> world rank
    std::uint64_t context_ = 0;                        // user traffic; context_ + 1 carries hitch's own
    int rank_ = 0;
    seconds_f timeout_{};
    std::atomic<std::uint64_t> splits_{0};
    std::atomic<std::uint64_t> barriers_{0};
};

static_assert(communicator<local>, "hitch::comm::local must model hitch::communicator");
static_assert(shares_address_space<local> && has_node_layout<local>,
              "hitch::comm::local shares its address space and knows its (single-node) layout");

/// N ranks sharing mailboxes. Hand communicator(r) to the thread that plays rank r.
class local_world {
public:
    explicit local_world(int size, const local_options& options = {}) {
        option_validator("hitch::comm::local_world").closed("size", size, 1, 4096);
        options.validate();
        state_ = std::make_shared<detail::local_world_state>(size, options);
    }

    [[nodiscard]] int size() const noexcept { return state_->size; }

    /// The world communicator for rank `rank`.
    [[nodiscard]] local communicator(int rank) const {
        option_validator("hitch::comm::local_world::communicator").half_open("rank", rank, 0, size());
        auto members = std::make_shared<std::vector<int>>(static_cast<std::size_t>(size()));
        for (int i = 0; i < size(); ++i) (*members)[static_cast<std::size_t>(i)] = i;
        return local(state_, std::move(members), 0, rank, seconds_f(state_->options.timeout_s));
    }

    /// Releases every rank blocked in (or later entering) a call on this world with comm_error.
    void abort(const std::string& reason) { state_->abort(reason); }
    [[nodiscard]] bool aborted() const noexcept { return state_->aborted.load(); }

private:
    std::shared_ptr<detail::local_world_state> state_;
};

/// Runs fn(comm) on `ranks` threads, one per rank. If any rank throws, every other rank is released (its blocking
/// calls throw) and the first original exception is rethrown here once all threads have finished.
/// Returns the ranks' results in rank order when fn returns a value.
template <class F>
auto run_local(int ranks, F&& fn, const local_options& options = {}) {
    using result = std::invoke_result_t<F&, local&>;
    local_world world(ranks, options);
    std::mutex m;
    std::exception_ptr first_error;
    std::exception_ptr first_abort;
    constexpr bool returns_value = !std::is_void_v<result>;
    using slot = std::conditional_t<returns_value, std::optional<std::conditional_t<returns_value, result, int>>, int>;
    std::vector<slot> results(static_cast<std::size_t>(ranks));
    {
        std::vector<std::thread> threads;
        threads.reserve(static_cast<std::size_t>(ranks));
        for (int r = 0; r < ranks; ++r) {
            threads.emplace_back([&, r] {
                try {
                    local comm = world.communicator(r);
                    if constexpr (returns_value)
                        results[static_cast<std::size_t>(r)].emplace(fn(comm));
                    else
                        fn(comm);
                } catch (const detail::local_aborted&) {
                    std::lock_guard lock(m);
                    if (!first_abort) first_abort = std::current_exception();
                } catch (const std::exception& e) {
                    {
                        std::lock_guard lock(m);
                        if (!first_error) first_error = std::current_exception();
                    }
                    world.abort(detail::concat("rank ", r, " threw: ", e.what()));
                } catch (...) {
                    {
                        std::lock_guard lock(m);
                        if (!first_error) first_error = std::current_exception();
                    }
                    world.abort(detail::concat("rank ", r, " threw a non-standard exception"));
                }
            });
        }
        for (auto& t : threads) t.join();
    }
    if (first_error) std::rethrow_exception(first_error);
    if (first_abort) std::rethrow_exception(first_abort);
    if constexpr (returns_value) {
        std::vector<result> out;
        out.reserve(results.size());
        for (auto& r : results) out.push_back(std::move(*r));
        return out;
    }
}

}  // namespace hitch::comm
