#pragma once
// The engine under comm::simulated: a conservative discrete-event simulation whose processes are threads. Exactly
// one rank runs at a time, always the one with the earliest virtual time (ties to the lower rank), so every
// message is posted, and reserves its links, in virtual-time order: contention, matching and every virtual time
// come out the same on every run, whatever the machine's load. A rank gives up its turn when it blocks (its wake
// time is when what it waits for completes, or its deadline) or when its clock moves past another rank's.
// When every rank waits on a message nobody will send, the earliest deadline wins: a hang becomes a timeout in
// virtual time within milliseconds of wall time.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hitch/comm/detail/simulated_network.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/clock.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/options.hpp"

namespace hitch::comm {

/// A simulated rank reached the virtual time at which simulated_faults says it dies.
class rank_died_error : public comm_error {
public:
    using comm_error::comm_error;
};

/// A span of one rank's virtual time, for a timeline (simulated_options::record_timeline).
struct simulated_event {
    const char* name = "";  // compute, wait, poll, probe or idle
    double begin_s = 0;
    double end_s = 0;
    int peer = -1;  // the rank waited for, where one is
};

struct simulated_options {
    /// Deadline of every blocking call, in virtual seconds (default: HITCH_TIMEOUT_S, else 300).
    double timeout_s = timeout_from_environment().count();
    simulated_faults faults{};
    /// Keep every compute and wait span of every rank (simulation_report, write_chrome_trace).
    bool record_timeline = false;

    void validate(int ranks) const {
        option_validator("hitch::comm::simulated_options").open_closed("timeout_s", timeout_s, 0.0, 1e9);
        faults.validate(ranks);
    }
};

namespace detail {

enum class sim_kind : std::uint8_t { send, recv };
enum class sim_state : std::uint8_t { pending, done, failed, cancelled };

/// One side of a message. A send carries a copy of its bytes until a receive takes them.
struct sim_op {
    sim_kind kind{};
    sim_state state = sim_state::pending;
    bool queued = false;    // in a mailbox, unmatched
    bool observed = false;  // its owner has seen it complete
    dtype type = dtype::u8;
    std::uint64_t context = 0;
    int source = 0;  // sender's group rank (a receive: the one it asks for, or any_source)
    int peer = 0;    // the other side as the caller named it
    int tag = 0;
    int owner = 0;  // world rank that posted it
    int owner_rank = 0;
    std::size_t bytes = 0;
    std::vector<std::byte> payload;           // an unmatched send's bytes, once its sender may reuse its buffer
    const std::byte* borrowed = nullptr;      // an unmatched send's bytes, still in the sender's buffer
    std::optional<std::size_t> corrupt_byte;  // simulated_faults::corrupted
    std::byte* into = nullptr;
    vtime done_at = vtime_never;  // when it completes, once known
    vtime arrival = 0;            // a send: when its last byte reaches the receiver
    message_info info;
    std::string error_text;
};

struct sim_mailbox {
    std::deque<std::shared_ptr<sim_op>> unexpected;  // sends nobody has received, in the order they were sent
    std::deque<std::shared_ptr<sim_op>> posted;      // receives still waiting for a send, in post order
};

[[nodiscard]] inline bool sim_matches(const sim_op& send, const sim_op& recv) noexcept {
    return send.context == recv.context && send.tag == recv.tag &&
           (recv.source == any_source || recv.source == send.source);
}

/// A rank's virtual time as a clock_source, so deadline_for(comm, t) measures virtual time.
class virtual_clock final : public clock_source {
public:
    [[nodiscard]] time_point now() const noexcept override {
        return time_point(std::chrono::nanoseconds(ps.load(std::memory_order_relaxed) / 1000));
    }
    std::atomic<vtime> ps{0};
};

/// What a blocked rank waits for: the virtual time at which it holds (vtime_never while unknown).
struct sim_waiter {
    virtual ~sim_waiter() = default;
    [[nodiscard]] virtual vtime ready_at() const = 0;
};

struct sim_rank {
    enum status_t : std::uint8_t { ready, running, blocked, finished };
    virtual_clock clock;
    std::binary_semaphore go{0};
    status_t status = ready;
    const sim_waiter* waiting = nullptr;
    vtime wait_deadline = vtime_never;
    vtime dies_at = vtime_never;
    double slow = 1.0;
    int failed_polls = 0;
    std::vector<std::shared_ptr<sim_op>> live;  // ops this rank posted that may not have completed
    vtime busy = 0, idle = 0;
    std::uint64_t bytes_sent = 0, messages_sent = 0, bytes_received = 0, messages_received = 0;
    std::exception_ptr error;
    std::string error_text;
    vtime error_at = 0;
    bool died = false;
    std::uint64_t compute_calls = 0;
    std::vector<simulated_event> timeline;

    [[nodiscard]] vtime now() const noexcept { return clock.ps.load(std::memory_order_relaxed); }
    void set_now(vtime t) noexcept { clock.ps.store(t, std::memory_order_relaxed); }
};

/// Everything the ranks of one simulated world share, guarded by one mutex; only the rank whose turn it is runs.
struct sim_world {
    sim_world(int n, const simulated_network& network, const simulated_options& o)
        : size(n), options(o), net(network), links(network, n, o.faults) {
        for (int r = 0; r < n; ++r) {
            ranks.push_back(std::make_unique<sim_rank>());
            boxes.push_back(std::make_unique<sim_mailbox>());
        }
        for (const auto& d : o.faults.deaths)
            ranks[static_cast<std::size_t>(d.rank)]->dies_at =
                std::min(ranks[static_cast<std::size_t>(d.rank)]->dies_at, to_vtime(d.at_s));
        for (const auto& s : o.faults.slow) ranks[static_cast<std::size_t>(s.rank)]->slow *= s.factor;
        queued_key.assign(static_cast<std::size_t>(n), -1);
        is_dirty.assign(static_cast<std::size_t>(n), 0);
        for (int r = 0; r < n; ++r) touch(r);
    }

    std::mutex m;
    int size;
    simulated_options options;
    simulated_network net;
    simulated_links links;
    std::vector<std::unique_ptr<sim_rank>> ranks;      // by world rank
    std::vector<std::unique_ptr<sim_mailbox>> boxes;   // by world rank
    std::map<std::pair<int, int>, int> pair_messages;  // (from, to) -> messages so far, for the faults
    std::map<std::tuple<std::uint64_t, std::uint64_t, int>, std::uint64_t> split_contexts;
    std::uint64_t next_context = 2;  // 0 and 1 belong to the world communicator
    // The turn order: (key, rank) of every rank that waits for its turn. A key changes only when something reaches
    // the rank (a message for a receive it waits on, one in its mailbox) or its own state changes, so those ranks
    // are marked dirty and re-keyed before the next pick instead of scanning every rank at every turn.
    std::set<std::pair<vtime, int>> queue;
    std::vector<vtime> queued_key;  // the key a rank is queued under, -1 when not queued
    std::vector<char> is_dirty;
    std::vector<int> dirty;

    sim_rank& rank(int w) { return *ranks[static_cast<std::size_t>(w)]; }

    std::uint64_t context_for(std::uint64_t parent, std::uint64_t sequence, int color) {
        auto [it, inserted] = split_contexts.try_emplace({parent, sequence, color}, next_context);
        if (inserted) next_context += 2;
        return it->second;
    }

    // ---- the scheduler (mutex held) ----

    /// When rank w would next run: now if ready, else when its wait ends (what it waits for, its deadline, or its
    /// death, whichever is first).
    [[nodiscard]] vtime key_of(const sim_rank& r) const {
        if (r.status != sim_rank::blocked) return r.now();
        vtime k = std::min({r.waiting->ready_at(), r.wait_deadline, r.dies_at});
        return std::max(k, r.now());
    }
    /// Rank w's key may have changed.
    void touch(int w) {
        if (is_dirty[static_cast<std::size_t>(w)] != 0) return;
        is_dirty[static_cast<std::size_t>(w)] = 1;
        dirty.push_back(w);
    }
    void unqueue(int w) {
        vtime& k = queued_key[static_cast<std::size_t>(w)];
        if (k >= 0) queue.erase({k, w});
        k = -1;
    }
    /// The rank whose turn is next: the earliest key, ties to the lower rank; -1 when every rank has finished.
    [[nodiscard]] int pick() {
        for (int w : dirty) {
            is_dirty[static_cast<std::size_t>(w)] = 0;
            unqueue(w);
            const sim_rank& r = rank(w);
            if (r.status == sim_rank::ready || r.status == sim_rank::blocked) {
                const vtime k = key_of(r);
                queue.insert({k, w});
                queued_key[static_cast<std::size_t>(w)] = k;
            }
        }
        dirty.clear();
        return queue.empty() ? -1 : queue.begin()->second;
    }
    void activate(int w) {
        unqueue(w);
        sim_rank& r = rank(w);
        const vtime k = key_of(r);
        if (r.status == sim_rank::blocked) r.idle += k - r.now();
        r.set_now(k);
        r.status = sim_rank::running;
    }
    /// Rank `me` (ready or blocked) lets the earliest rank run, and returns when it is its turn again.
    void switch_from(int me, std::unique_lock<std::mutex>& lock) {
        const int next = pick();
        activate(next);
        if (next == me) return;
        rank(next).go.release();
        lock.unlock();
        rank(me).go.acquire();
        lock.lock();
    }
    /// After its clock moved: lets any rank that is now earlier go first.
    void yield(int me, std::unique_lock<std::mutex>& lock) {
        rank(me).status = sim_rank::ready;
        touch(me);
        switch_from(me, lock);
    }
    /// Blocks until `w` holds, the deadline passes or the rank dies; returns with the clock at that time.
    void block(int me, const sim_waiter& w, vtime until, std::unique_lock<std::mutex>& lock, const char* what = "wait",
               int peer = -1) {
        sim_rank& r = rank(me);
        require_turn(me);
        const vtime from = r.now();
        r.status = sim_rank::blocked;
        r.waiting = &w;
        r.wait_deadline = until;
        touch(me);
        switch_from(me, lock);
        r.waiting = nullptr;
        r.wait_deadline = vtime_never;
        if (options.record_timeline && r.now() > from)
            r.timeline.push_back({what, to_seconds(from), to_seconds(r.now()), peer});
    }
    /// The stall simulated_faults::delays adds after this compute() call of rank w.
    [[nodiscard]] vtime stall_after_compute(int w) {
        sim_rank& r = rank(w);
        const std::uint64_t call = r.compute_calls++;
        vtime stall = 0;
        for (const auto& d : options.faults.delays) {
            if (d.rank >= 0 && d.rank != w) continue;
            if (uniform_draw(d.seed, w, call, 0) >= d.probability) continue;
            const double u = uniform_draw(d.seed, w, call, 1);
            stall += to_vtime(std::min(d.scale_s * std::pow(1.0 - u, -1.0 / d.shape), 1e6));
        }
        return stall;
    }
    void start() {
        std::lock_guard lock(m);
        const int first = pick();
        if (first < 0) return;
        activate(first);
        rank(first).go.release();
    }
    void finish(int me) {
        std::lock_guard lock(m);
        rank(me).status = sim_rank::finished;
        touch(me);
        const int next = pick();
        if (next < 0) return;
        activate(next);
        rank(next).go.release();
    }

    /// A rank is one machine: its communicator is used by one thread at a time. A second thread calling in while
    /// the first waits would take the first's turn; it is refused instead.
    void require_turn(int me) {
        if (rank(me).status == sim_rank::running) return;
        throw comm_error(hitch::detail::concat("hitch::comm::simulated: rank ", me,
                                               " was used by a second thread while its first waited; a simulated "
                                               "rank's communicator is used by one thread at a time"));
    }

    /// Throws rank_died_error once the rank's death time has come.
    void check_alive(int me) {
        sim_rank& r = rank(me);
        if (r.now() < r.dies_at) return;
        r.set_now(r.dies_at);
        r.died = true;
        throw rank_died_error(hitch::detail::concat("hitch::comm::simulated: rank ", me, " died at virtual time ",
                                                    to_seconds(r.dies_at), " s (simulated_faults::deaths)"));
    }

    // ---- messages (mutex held) ----

    /// Copies a matched send into its receive; both complete in virtual time as the model says.
    void deliver(sim_op& send, sim_op& recv) {
        const bool raw = send.type == dtype::u8 || recv.type == dtype::u8;
        recv.info = {send.source, send.tag, send.bytes};
        recv.done_at = send.arrival;
        touch(recv.owner);
        if (send.bytes != recv.bytes || (!raw && send.type != recv.type)) {
            const auto describe = [](const sim_op& op) {
                const std::size_t es = size_of(op.type);
                return hitch::detail::concat(op.bytes, " bytes (", es != 0 ? op.bytes / es : op.bytes, " x ",
                                             name(op.type), ")");
            };
            recv.error_text = hitch::detail::concat(
                "hitch::comm::simulated: message mismatch on rank ", recv.owner_rank, ": recv from rank ", send.source,
                " with tag ", send.tag, " expected ", describe(recv), " but the message has ", describe(send));
            recv.state = sim_state::failed;
        } else {
            if (send.bytes != 0) {
                std::memcpy(recv.into, send.borrowed != nullptr ? send.borrowed : send.payload.data(), send.bytes);
                if (send.corrupt_byte) recv.into[*send.corrupt_byte % send.bytes] ^= std::byte{0x5a};
            }
            recv.state = sim_state::done;
            sim_rank& r = rank(recv.owner);
            r.bytes_received += send.bytes;
            ++r.messages_received;
        }
        send.borrowed = nullptr;
        send.payload.clear();
        send.payload.shrink_to_fit();
    }

    /// The sender may touch its buffer from now on: an unmatched send takes a copy of its bytes.
    static void detach(sim_op& send) {
        if (send.kind != sim_kind::send || !send.queued || send.borrowed == nullptr) return;
        send.payload.assign(send.borrowed, send.borrowed + send.bytes);
        send.borrowed = nullptr;
    }

    /// Posts a send from world rank `me` to world rank `to` at the sender's virtual time.
    void post_send(int me, int to, const std::shared_ptr<sim_op>& op, std::span<const std::byte> data) {
        sim_rank& r = rank(me);
        const int nth = pair_messages[{me, to}]++;
        const transfer_times t = links.reserve(me, to, data.size(), r.now());
        op->done_at = t.sent;
        op->arrival = t.arrival;
        op->state = sim_state::done;  // a send has nothing left to fail; done_at says when
        r.bytes_sent += data.size();
        ++r.messages_sent;
        remember(r, op);
        for (const auto& l : options.faults.lost)
            if (l.from == me && l.to == to && (l.nth == nth || l.nth < 0)) return;
        // The bytes stay in the sender's buffer until a receive takes them or the sender may reuse it (detach).
        op->borrowed = data.data();
        for (const auto& c : options.faults.corrupted)
            if (c.from == me && c.to == to && (c.nth == nth || c.nth < 0)) op->corrupt_byte = c.byte;
        sim_mailbox& box = *boxes[static_cast<std::size_t>(to)];
        auto it =
            std::find_if(box.posted.begin(), box.posted.end(), [&](const auto& q) { return sim_matches(*op, *q); });
        if (it != box.posted.end()) {
            auto recv = std::move(*it);
            box.posted.erase(it);
            recv->queued = false;
            deliver(*op, *recv);
        } else {
            op->queued = true;
            box.unexpected.push_back(op);
            touch(to);  // a probe or a poll there may wait for it
        }
    }

    void post_recv(int me, const std::shared_ptr<sim_op>& op) {
        remember(rank(me), op);
        sim_mailbox& box = *boxes[static_cast<std::size_t>(me)];
        auto it = std::find_if(box.unexpected.begin(), box.unexpected.end(),
                               [&](const auto& s) { return sim_matches(*s, *op); });
        if (it != box.unexpected.end()) {
            auto send = std::move(*it);
            box.unexpected.erase(it);
            send->queued = false;
            deliver(*send, *op);
        } else {
            op->queued = true;
            box.posted.push_back(op);
        }
    }

    /// Withdraws an unmatched receive (a timed-out or abandoned one). Sends are on the wire once posted.
    void cancel(const std::shared_ptr<sim_op>& op) {
        if (op->kind != sim_kind::recv || !op->queued) return;
        auto& q = boxes[static_cast<std::size_t>(op->owner)]->posted;
        q.erase(std::remove(q.begin(), q.end(), op), q.end());
        op->queued = false;
        op->state = sim_state::cancelled;
    }

    static void remember(sim_rank& r, const std::shared_ptr<sim_op>& op) {
        if (r.live.size() >= 64) {
            const vtime now = r.now();
            std::erase_if(r.live, [&](const auto& o) {
                return o->state == sim_state::cancelled || (o->done_at <= now && o->state != sim_state::pending);
            });
        }
        r.live.push_back(op);
    }
};

/// Converts a deadline to virtual time: one on the rank's own clock directly, one on the steady clock as the same
/// time from now.
[[nodiscard]] inline vtime virtual_deadline(const deadline& limit, const sim_rank& r) {
    const vtime now = r.now();
    vtime at;
    if (limit.source() == &r.clock) {
        at = static_cast<vtime>(
                 std::chrono::duration_cast<std::chrono::nanoseconds>(limit.when().time_since_epoch()).count()) *
             1000;
    } else {
        const auto left = std::chrono::duration<double>(limit.when() - std::chrono::steady_clock::now()).count();
        at = now + to_vtime(std::max(left, 0.0));
    }
    return std::clamp(at, now, vtime_never);
}

/// Waits on one op.
struct op_waiter final : sim_waiter {
    explicit op_waiter(const sim_op& o) : op(o) {}
    [[nodiscard]] vtime ready_at() const override { return op.done_at; }
    const sim_op& op;
};

/// A given virtual time.
struct fixed_time_waiter final : sim_waiter {
    explicit fixed_time_waiter(vtime t) : at(t) {}
    [[nodiscard]] vtime ready_at() const override { return at; }
    vtime at;
};

/// A rank that polls without result: wakes when any op it posted completes or a message reaches its mailbox.
struct poll_waiter final : sim_waiter {
    poll_waiter(const sim_rank& r, const sim_mailbox& b) : rank(r), box(b) {}
    [[nodiscard]] vtime ready_at() const override {
        const vtime now = rank.now();
        vtime next = vtime_never;
        for (const auto& o : rank.live)
            if (o->state != sim_state::cancelled && o->done_at > now) next = std::min(next, o->done_at);
        for (const auto& s : box.unexpected)
            if (s->arrival > now) next = std::min(next, s->arrival);
        return next;
    }
    const sim_rank& rank;
    const sim_mailbox& box;
};

}  // namespace detail
}  // namespace hitch::comm
