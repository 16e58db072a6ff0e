#pragma once
// The engine under comm::simulated: a conservative discrete-event simulation whose processes are the simulated
// threads of the ranks (each rank has one, plus those it starts with simulated::start_thread), every one with its
// own virtual clock and running on a fiber (simulated_fiber.hpp) of the thread that called simulate(). Exactly one
// runs at a time, always the one with the earliest virtual time (ties to the lower rank, then to the thread started
// first), so every message is posted, and reserves its links, in virtual-time order: contention, matching and every
// virtual time come out the same on every run, whatever the machine's load. A thread gives up its turn when it
// blocks (its wake time is when what it waits for completes, or its deadline) or when its clock moves past another
// thread's. When every thread waits on a message nobody will send, the earliest deadline wins: a hang becomes a
// timeout in virtual time within milliseconds of wall time.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hitch/comm/detail/simulated_fiber.hpp"
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
    const char* name =
        "";  // compute, combine, host (simulated_options::host_time_scale), wait, poll, probe, idle or join
    double begin_s = 0;
    double end_s = 0;
    int peer = -1;   // the rank waited for, where one is
    int thread = 0;  // the rank's thread: 0 its own, then those it started, in order
};

struct simulated_options {
    /// Deadline of every blocking call, in virtual seconds (default: HITCH_TIMEOUT_S, else 300).
    double timeout_s = timeout_from_environment().count();
    simulated_faults faults{};
    /// Keep every compute and wait span of every rank (simulation_report, write_chrome_trace).
    bool record_timeline = false;
    /// Memory whose contents do not matter: one buffer that every rank works in, in a timing study too large for
    /// a copy per rank. A message sent from it carries its size and times but no bytes (a receive leaves its
    /// buffer as it was); messages from anywhere else (agreement rounds, splits, a codec's encoded messages) keep
    /// theirs. The results computed in it are meaningless; the virtual times are those of real data, wherever
    /// message sizes do not depend on the values.
    std::vector<std::span<const std::byte>> timing_only_memory;
    /// Charges each simulated thread, as compute, the wall time it spends between its calls into the simulation,
    /// times this factor: the work a schedule does itself (combining what it received, packing, encoding) measured
    /// on this machine, where the network model alone charges none of it. 0 (the default): not charged, and virtual
    /// times repeat exactly; > 0: they depend on this machine and its load (a calibration against real runs).
    double host_time_scale = 0.0;
    /// gamma of the alpha-beta-gamma model: seconds each byte of received data costs to combine into a rank's own
    /// (a schedule's reduction), charged as compute where the schedule combines (simulated::charge_combine).
    /// 0 (the default): combining is free, as in the alpha-beta formulas. Deterministic, unlike host_time_scale.
    double combine_s_per_byte = 0.0;
    /// Stack of each simulated thread (reserved address space; memory is used only as deep as a thread goes).
    std::size_t stack_bytes = std::size_t{4} << 20;

    void validate(int ranks) const {
        option_validator("hitch::comm::simulated_options")
            .open_closed("timeout_s", timeout_s, 0.0, 1e9)
            .closed("host_time_scale", host_time_scale, 0.0, 1e6)
            .closed("combine_s_per_byte", combine_s_per_byte, 0.0, 1e-3)
            .closed("stack_bytes", stack_bytes, std::size_t{64} << 10, std::size_t{1} << 30);
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
    bool contentless = false;                 // sent from simulated_options::timing_only_memory
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

/// A rank's virtual time as a clock_source, so deadline_for(comm, t) measures virtual time: the time of the rank's
/// thread that runs (or ran last).
class virtual_clock final : public clock_source {
public:
    [[nodiscard]] time_point now() const noexcept override {
        return time_point(std::chrono::nanoseconds(ps.load(std::memory_order_relaxed) / 1000));
    }
    std::atomic<vtime> ps{0};
};

/// What a blocked thread waits for: the virtual time at which it holds (vtime_never while unknown).
struct sim_waiter {
    virtual ~sim_waiter() = default;
    [[nodiscard]] virtual vtime ready_at() const = 0;
    /// Whether the rank's death ends the wait (a message); waits between a rank's own threads go on, so a dying
    /// rank's threads can wind down.
    [[nodiscard]] virtual bool ends_at_death() const { return true; }
};

struct sim_world;

/// One simulated thread: a rank's own, or one it started. Runs on a fiber of the driving system thread.
struct sim_process {
    enum status_t : std::uint8_t { ready, running, blocked, finished };
    sim_world* world = nullptr;
    int id = 0;      // the turn order's tie-break: ranks' own threads are 0 .. p-1, started ones follow in order
    int rank = 0;    // world rank
    int thread = 0;  // 0: the rank's own; then the threads it started, in order
    vtime now = 0;
    status_t status = ready;
    const sim_waiter* waiting = nullptr;
    vtime wait_deadline = vtime_never;
    bool stuck = false;               // woken with nothing to wait for: every thread waits without a deadline
    vtime notified_at = vtime_never;  // a condition variable's notify reached it (simulated::condition_variable)
    int failed_polls = 0;
    vtime finished_at = vtime_never;
    std::function<void()> body;
    std::exception_ptr error;                         // a started thread's escaped exception, for join()
    std::chrono::steady_clock::time_point resumed{};  // when it last got the turn or left the simulation (host time)
    std::unique_ptr<fiber> context;
};

/// The simulated thread running on this system thread (null outside a simulation, and on other system threads).
[[nodiscard]] inline sim_process*& running_process() noexcept {
    thread_local sim_process* running = nullptr;
    return running;
}

struct sim_rank {
    virtual_clock clock;
    vtime dies_at = vtime_never;
    double slow = 1.0;
    std::vector<sim_process*> threads;          // the rank's own first
    std::vector<std::shared_ptr<sim_op>> live;  // ops this rank posted that may not have completed
    vtime busy = 0, idle = 0;
    std::uint64_t bytes_sent = 0, messages_sent = 0, bytes_received = 0, messages_received = 0;
    std::exception_ptr error;
    std::string error_text;
    vtime error_at = 0;
    vtime finished_at = 0;
    bool died = false;
    std::uint64_t compute_calls = 0;
    std::vector<simulated_event> timeline;
};

/// Everything the ranks of one simulated world share. Only the thread whose turn it is runs, so nothing here is
/// locked: a system thread the simulation did not start is refused at the door (sim_world::caller).
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
    }

    int size;
    simulated_options options;
    simulated_network net;
    simulated_links links;
    std::vector<std::unique_ptr<sim_rank>> ranks;       // by world rank
    std::vector<std::unique_ptr<sim_mailbox>> boxes;    // by world rank
    std::vector<std::unique_ptr<sim_process>> threads;  // by id
    std::map<std::pair<int, int>, int> pair_messages;   // (from, to) -> messages so far, for the faults
    std::map<std::tuple<std::uint64_t, std::uint64_t, int>, std::uint64_t> split_contexts;
    std::uint64_t next_context = 2;  // 0 and 1 belong to the world communicator
    // The turn order: (key, id) of every thread that waits for its turn. A key changes only when something reaches
    // the thread (a message for a receive it waits on, one in its mailbox, a notify) or its own state changes, so
    // those threads are marked dirty and re-keyed before the next pick instead of scanning every thread each turn.
    std::set<std::pair<vtime, int>> queue;
    std::vector<vtime> queued_key;  // the key a thread is queued under, -1 when not queued
    std::vector<char> is_dirty;
    std::vector<int> dirty;
    fiber driver;  // the system thread's own context, which run() returns to when every thread has finished

    sim_rank& rank(int w) { return *ranks[static_cast<std::size_t>(w)]; }

    std::uint64_t context_for(std::uint64_t parent, std::uint64_t sequence, int color) {
        auto [it, inserted] = split_contexts.try_emplace({parent, sequence, color}, next_context);
        if (inserted) next_context += 2;
        return it->second;
    }

    // ---- threads ----

    /// A new simulated thread of world rank `w` that runs `body` from virtual time `at`.
    sim_process& add_thread(int w, vtime at, std::function<void()> body) {
        auto t = std::make_unique<sim_process>();
        t->world = this;
        t->id = static_cast<int>(threads.size());
        t->rank = w;
        t->thread = static_cast<int>(rank(w).threads.size());
        t->now = at;
        t->body = std::move(body);
        t->context = std::make_unique<fiber>(options.stack_bytes, &sim_world::enter, t.get());
        sim_process& made = *t;
        threads.push_back(std::move(t));
        rank(w).threads.push_back(&made);
        queued_key.push_back(-1);
        is_dirty.push_back(0);
        touch(made);
        return made;
    }

    /// The simulated thread calling in for world rank `w`; comm_error when the caller is none of the simulation's
    /// threads (a system thread started by the rank's code) or a thread of another rank.
    sim_process& caller(int w) {
        sim_process* t = running_process();
        if (t == nullptr || t->world != this)
            throw comm_error(hitch::detail::concat(
                "hitch::comm::simulated: rank ", w,
                "'s communicator was used from a system thread the simulation did not start; a simulated rank's "
                "extra threads must be started with its communicator's start_thread()"));
        if (t->rank != w)
            throw comm_error(hitch::detail::concat("hitch::comm::simulated: rank ", w,
                                                   "'s communicator was used by a thread of rank ", t->rank));
        if (options.host_time_scale > 0.0) charge_host_time(*t);
        return *t;
    }

    /// simulated_options::host_time_scale: the wall time since the thread last left the simulation, as compute.
    void charge_host_time(sim_process& t) {
        const auto wall = std::chrono::steady_clock::now();
        const double spent = std::chrono::duration<double>(wall - t.resumed).count();
        t.resumed = wall;
        const vtime dt = to_vtime(spent * options.host_time_scale);
        if (dt <= 0) return;
        sim_rank& r = rank(t.rank);
        const vtime from = t.now;
        set_now(t, std::min(t.now + dt, std::max(r.dies_at, t.now)));
        r.busy += t.now - from;
        if (options.record_timeline) r.timeline.push_back({"host", to_seconds(from), to_seconds(t.now), -1, t.thread});
        yield(t);  // others may now be earlier: they go first, as after compute()
    }

    /// Runs every thread, from the calling system thread, until all have finished.
    void run() {
        sim_process* outer = running_process();  // a simulation inside a simulated thread
        sim_process* first = pick();
        if (first != nullptr) {
            activate(*first);
            fiber::switch_to(driver, *first->context);
        }
        running_process() = outer;
    }

    // ---- the scheduler ----

    /// When thread t would next run: now if ready, else when its wait ends (what it waits for, its deadline, or its
    /// rank's death, whichever is first).
    [[nodiscard]] vtime key_of(const sim_process& t) const {
        if (t.status != sim_process::blocked) return t.now;
        const vtime death = t.waiting->ends_at_death() ? ranks[static_cast<std::size_t>(t.rank)]->dies_at : vtime_never;
        const vtime k = std::min({t.waiting->ready_at(), t.wait_deadline, death});
        return std::max(k, t.now);
    }
    /// Thread t's key may have changed.
    void touch(const sim_process& t) {
        const auto i = static_cast<std::size_t>(t.id);
        if (is_dirty[i] != 0) return;
        is_dirty[i] = 1;
        dirty.push_back(t.id);
    }
    /// Every thread of rank w: a message reached it, or one of its threads ended.
    void touch_rank(int w) {
        for (const sim_process* t : rank(w).threads) touch(*t);
    }
    void unqueue(int id) {
        vtime& k = queued_key[static_cast<std::size_t>(id)];
        if (k >= 0) queue.erase({k, id});
        k = -1;
    }
    /// The thread whose turn is next: the earliest key, ties to the lower id; null when every thread has finished.
    [[nodiscard]] sim_process* pick() {
        for (int id : dirty) {
            is_dirty[static_cast<std::size_t>(id)] = 0;
            unqueue(id);
            const sim_process& t = *threads[static_cast<std::size_t>(id)];
            if (t.status == sim_process::ready || t.status == sim_process::blocked) {
                const vtime k = key_of(t);
                queue.insert({k, id});
                queued_key[static_cast<std::size_t>(id)] = k;
            }
        }
        dirty.clear();
        if (queue.empty()) return nullptr;
        // Every thread waits for what will never come: the newest goes first with the news (usually a started
        // thread that its starter joins, so its error reaches the starter instead of its stack unwinding under it).
        const auto& next = queue.begin()->first >= vtime_never ? *queue.rbegin() : *queue.begin();
        return threads[static_cast<std::size_t>(next.second)].get();
    }
    void set_now(sim_process& t, vtime at) {
        t.now = at;
        rank(t.rank).clock.ps.store(at, std::memory_order_relaxed);
    }
    void activate(sim_process& t) {
        unqueue(t.id);
        sim_rank& r = rank(t.rank);
        const vtime k = key_of(t);
        if (t.status == sim_process::blocked && k >= vtime_never) {
            t.stuck = true;  // nothing will ever wake it: it runs on at its own time, and its wait reports that
        } else {
            if (t.status == sim_process::blocked && t.thread == 0) r.idle += k - t.now;
            t.now = k;
        }
        t.status = sim_process::running;
        r.clock.ps.store(t.now, std::memory_order_relaxed);
        running_process() = &t;
        if (options.host_time_scale > 0.0) t.resumed = std::chrono::steady_clock::now();
    }
    /// Thread `me` (ready or blocked) lets the earliest thread run, and returns when it is its turn again.
    void switch_from(sim_process& me) {
        sim_process* next = pick();
        activate(*next);
        if (next == &me) return;
        fiber::switch_to(*me.context, *next->context);
    }
    /// After its clock moved: lets any thread that is now earlier go first.
    void yield(sim_process& me) {
        me.status = sim_process::ready;
        touch(me);
        switch_from(me);
    }
    /// Blocks until `w` holds, the deadline passes or the rank dies; returns with the clock at that time.
    void block(sim_process& me, const sim_waiter& w, vtime until, const char* what = "wait", int peer = -1) {
        const vtime from = me.now;
        me.status = sim_process::blocked;
        me.waiting = &w;
        me.wait_deadline = until;
        me.stuck = false;
        touch(me);
        switch_from(me);
        me.waiting = nullptr;
        me.wait_deadline = vtime_never;
        if (options.record_timeline && me.now > from)
            rank(me.rank).timeline.push_back({what, to_seconds(from), to_seconds(me.now), peer, me.thread});
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

    /// Throws rank_died_error once the rank's death time has come.
    void check_alive(sim_process& me) {
        sim_rank& r = rank(me.rank);
        if (me.now < r.dies_at) return;
        set_now(me, r.dies_at);
        r.died = true;
        throw rank_died_error(hitch::detail::concat("hitch::comm::simulated: rank ", me.rank, " died at virtual time ",
                                                    to_seconds(r.dies_at), " s (simulated_faults::deaths)"));
    }

    // ---- messages ----

    /// Copies a matched send into its receive; both complete in virtual time as the model says.
    void deliver(sim_op& send, sim_op& recv) {
        const bool raw = send.type == dtype::u8 || recv.type == dtype::u8;
        recv.info = {send.source, send.tag, send.bytes};
        recv.done_at = send.arrival;
        touch_rank(recv.owner);
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
            if (send.bytes != 0 && !send.contentless) {
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
    void detach(sim_op& send) const {
        if (send.kind != sim_kind::send || !send.queued || send.borrowed == nullptr) return;
        if (!send.contentless) send.payload.assign(send.borrowed, send.borrowed + send.bytes);
        send.borrowed = nullptr;
    }

    /// Posts a send from thread `me` to world rank `to` at the thread's virtual time.
    void post_send(sim_process& me, int to, const std::shared_ptr<sim_op>& op, std::span<const std::byte> data) {
        sim_rank& r = rank(me.rank);
        const bool faulty = !options.faults.lost.empty() || !options.faults.corrupted.empty();
        const int nth = faulty ? pair_messages[{me.rank, to}]++ : 0;
        const transfer_times t = links.reserve(me.rank, to, data.size(), me.now);
        op->done_at = t.sent;
        op->arrival = t.arrival;
        op->state = sim_state::done;  // a send has nothing left to fail; done_at says when
        r.bytes_sent += data.size();
        ++r.messages_sent;
        remember(r, me.now, op);
        for (const auto& l : options.faults.lost)
            if (l.from == me.rank && l.to == to && (l.nth == nth || l.nth < 0)) return;
        // The bytes stay in the sender's buffer until a receive takes them or the sender may reuse it (detach).
        op->borrowed = data.data();
        op->contentless = timing_only(data);
        for (const auto& c : options.faults.corrupted)
            if (c.from == me.rank && c.to == to && (c.nth == nth || c.nth < 0)) op->corrupt_byte = c.byte;
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
            touch_rank(to);  // a probe or a poll there may wait for it
        }
    }

    void post_recv(sim_process& me, const std::shared_ptr<sim_op>& op) {
        remember(rank(me.rank), me.now, op);
        sim_mailbox& box = *boxes[static_cast<std::size_t>(me.rank)];
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

    /// Whether `data` lies in simulated_options::timing_only_memory.
    [[nodiscard]] bool timing_only(std::span<const std::byte> data) const {
        const auto at = reinterpret_cast<std::uintptr_t>(data.data());
        for (const auto& m : options.timing_only_memory) {
            const auto from = reinterpret_cast<std::uintptr_t>(m.data());
            if (at >= from && at + data.size() <= from + m.size()) return true;
        }
        return false;
    }

    static void remember(sim_rank& r, vtime now, const std::shared_ptr<sim_op>& op) {
        if (r.live.size() >= 64)
            std::erase_if(r.live, [&](const auto& o) {
                return o->state == sim_state::cancelled || (o->done_at <= now && o->state != sim_state::pending);
            });
        r.live.push_back(op);
    }

private:
    /// A fiber's first function: runs the thread's body, then hands the turn on for good.
    static void enter(void* argument) {
        auto& me = *static_cast<sim_process*>(argument);
        try {
            me.body();
        } catch (...) {
            me.error = std::current_exception();
        }
        me.world->end(me);
    }

    [[noreturn]] void end(sim_process& me) {
        me.status = sim_process::finished;
        me.finished_at = me.now;
        me.body = nullptr;
        touch(me);
        touch_rank(me.rank);  // a join waits for it
        sim_process* next = pick();
        if (next == nullptr) fiber::exit_to(*me.context, driver);
        activate(*next);
        fiber::exit_to(*me.context, *next->context);
    }
};

/// Converts a deadline to virtual time: one on the rank's own clock directly, one on the steady clock as the same
/// time from now.
[[nodiscard]] inline vtime virtual_deadline(const deadline& limit, const sim_rank& r, vtime now) {
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

/// A thread that polls without result: wakes when any op its rank posted completes or a message reaches its
/// mailbox.
struct poll_waiter final : sim_waiter {
    poll_waiter(const sim_process& t, const sim_rank& r, const sim_mailbox& b) : thread(t), rank(r), box(b) {}
    [[nodiscard]] vtime ready_at() const override {
        const vtime now = thread.now;
        vtime next = vtime_never;
        for (const auto& o : rank.live)
            if (o->state != sim_state::cancelled && o->done_at > now) next = std::min(next, o->done_at);
        for (const auto& s : box.unexpected)
            if (s->arrival > now) next = std::min(next, s->arrival);
        return next;
    }
    const sim_process& thread;
    const sim_rank& rank;
    const sim_mailbox& box;
};

/// The end of another thread (simulated::thread::join).
struct join_waiter final : sim_waiter {
    explicit join_waiter(const sim_process& t) : target(t) {}
    [[nodiscard]] vtime ready_at() const override { return target.finished_at; }
    [[nodiscard]] bool ends_at_death() const override { return false; }
    const sim_process& target;
};

/// A notify (simulated::condition_variable).
struct notify_waiter final : sim_waiter {
    explicit notify_waiter(const sim_process& t) : me(t) {}
    [[nodiscard]] vtime ready_at() const override { return me.notified_at; }
    [[nodiscard]] bool ends_at_death() const override { return false; }
    const sim_process& me;
};

}  // namespace detail
}  // namespace hitch::comm
