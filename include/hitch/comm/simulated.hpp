#pragma once
// hitch::comm::simulated: a cluster simulated in one process. Ranks are fibers, each with a virtual clock; a message
// of n bytes from rank a to rank b arrives at max(sent, route free) + alpha + n beta of the links on its route
// (simulated_network: a single switch, a two-level fat tree, or machines of g ranks with a fast fabric and one nic),
// links are full duplex and messages that share one serialize on it. A receive completes at max(receiver's clock,
// arrival); compute(seconds) advances the clock. Data is real, so results equal comm::local's bit for bit, while
// times come from the model alone: the same virtual times on every run, on a loaded machine or a quiet one.
// Deadlines are in virtual time (has_clock), and faults (simulated_faults) end in the errors a real cluster gives.
//
//   auto net = hitch::comm::simulated_network::single_switch({5e-6, 12.5e9});
//   hitch::comm::run_simulated(64, net, [](hitch::comm::simulated& comm) { comm.compute(hitch::seconds_f(0.1)); });
//
// Ranks run one at a time, each on a fiber (detail/simulated_engine.hpp, simulated_fiber.hpp), so a simulation of
// 1,024 ranks needs no more system threads than one of two. A rank that overlaps its computation with its
// communication (data_parallel's exchange worker, a co-located parameter server) starts its extra threads with
// start_thread(): each has its own virtual clock, and they wait for each other on simulated::condition_variable.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/comm/detail/barrier.hpp"
#include "hitch/comm/detail/simulated_engine.hpp"
#include "hitch/comm/detail/simulated_network.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/core/options.hpp"

namespace hitch::comm {

namespace detail {
struct simulated_access;
}

/// Communicator whose ranks are simulated machines. Move-only; obtained from run_simulated or simulate.
class simulated {
public:
    /// Failed test() calls in a row, at one virtual time, after which the rank waits for its next event: a loop
    /// that polls would otherwise never let virtual time move.
    static constexpr int polls_before_waiting = 16;

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
                timeout_ = other.timeout_;
            }
            return *this;
        }
        ~request() { cancel_if_pending(); }

        /// True once complete at the rank's virtual time; throws comm_error if the receive failed (size mismatch).
        bool test() {
            if (!op_) return true;
            const int me = op_->owner;
            detail::sim_process& t = world_->caller(me);
            world_->check_alive(t);
            if (!complete(t)) {
                if (++t.failed_polls < polls_before_waiting) return false;
                t.failed_polls = 0;
                const detail::poll_waiter w(t, world_->rank(me), *world_->boxes[static_cast<std::size_t>(me)]);
                world_->block(t, w, t.now + to_vtime(timeout_.count()), "poll", op_->peer);
                world_->check_alive(t);
                if (!complete(t)) return false;
            }
            // Only news counts as progress: a test that sees a completion again is no reason to keep polling.
            if (!op_->observed) t.failed_polls = 0;
            op_->observed = true;
            return finish();
        }
        /// Waits up to the communicator's timeout, in virtual time.
        void wait() {
            if (!op_) return;
            wait(deadline(timeout_, world_->rank(op_->owner).clock));
        }
        /// Waits until `limit` (virtual when made with deadline_for(comm, t); a steady-clock deadline counts the same
        /// time from now in virtual time). Throws timeout_error naming the operation, peer and tag when it passes.
        void wait(const deadline& limit) {
            if (!op_) return;
            const int me = op_->owner;
            detail::sim_process& t = world_->caller(me);
            const detail::sim_rank& r = world_->rank(me);
            world_->check_alive(t);
            t.failed_polls = 0;
            if (complete(t)) {
                finish();
                return;
            }
            const vtime start = t.now;
            const detail::op_waiter w(*op_);
            world_->block(t, w, detail::virtual_deadline(limit, r, t.now), "wait", op_->peer);
            if (complete(t)) {
                finish();
                return;
            }
            world_->check_alive(t);
            world_->cancel(op_);
            const seconds_f waited = limit.source() == &r.clock ? limit.waited() : seconds_f(to_seconds(t.now - start));
            throw timeout_error(operation(), where(), waited);
        }
        /// Source, tag and byte count of a completed receive (of a send: its destination, tag and size).
        [[nodiscard]] message_info status() const {
            if (!op_) return {};
            if (op_->kind == detail::sim_kind::send) return {op_->peer, op_->tag, op_->bytes};
            return op_->info;
        }
        [[nodiscard]] std::string describe() const { return op_ ? operation() + " (" + where() + ")" : "no operation"; }

    private:
        friend class simulated;
        request(std::shared_ptr<detail::sim_op> op, std::shared_ptr<detail::sim_world> world, seconds_f timeout)
            : op_(std::move(op)), world_(std::move(world)), timeout_(timeout) {}

        [[nodiscard]] bool complete(const detail::sim_process& t) const {
            return op_->state != detail::sim_state::pending && op_->state != detail::sim_state::cancelled &&
                   op_->done_at <= t.now;
        }
        bool finish() {
            world_->detach(*op_);
            if (op_->state == detail::sim_state::failed) throw comm_error(op_->error_text);
            return true;
        }
        [[nodiscard]] std::string operation() const {
            return op_->kind == detail::sim_kind::send ? "comm::simulated send" : "comm::simulated recv";
        }
        [[nodiscard]] std::string where() const {
            const bool send = op_->kind == detail::sim_kind::send;
            std::string peer = op_->peer == any_source ? std::string("any rank") : detail::concat("rank ", op_->peer);
            return detail::concat(send ? "to " : "from ", peer, ", tag ", op_->tag, ", ", op_->bytes,
                                  " bytes, on rank ", op_->owner_rank);
        }
        void cancel_if_pending() noexcept {
            if (!op_ || !world_) return;
            // Only a thread of the simulation touches its state (the world has no lock: one thread runs at a time).
            const detail::sim_process* t = detail::running_process();
            if (t == nullptr || t->world != world_.get()) return;
            world_->detach(*op_);
            world_->cancel(op_);
        }

        std::shared_ptr<detail::sim_op> op_;
        std::shared_ptr<detail::sim_world> world_;
        seconds_f timeout_{};
    };

    simulated(const simulated&) = delete;
    simulated& operator=(const simulated&) = delete;
    simulated(simulated&&) noexcept = default;
    simulated& operator=(simulated&&) noexcept = default;
    ~simulated() = default;

    [[nodiscard]] int rank() const noexcept { return rank_; }
    [[nodiscard]] int size() const noexcept { return static_cast<int>(members_->size()); }
    [[nodiscard]] int max_tag() const noexcept { return std::numeric_limits<int>::max(); }
    static constexpr std::string_view name = "comm::simulated";
    [[nodiscard]] seconds_f timeout() const noexcept { return timeout_; }
    void set_timeout(seconds_f t) {
        option_validator("hitch::comm::simulated::set_timeout").open_closed("timeout_s", t.count(), 0.0, 1e9);
        timeout_ = t;
    }
    /// The ranks simulate separate machines: a pointer is meaningful only on the rank that made it.
    static constexpr bool shares_address_space = false;
    /// The machines of the network model (each rank its own, or ranks_per_node to a machine).
    [[nodiscard]] hitch::node_layout node_layout() const { return world_->links.layout_of(*members_); }
    /// This rank's virtual time, as a clock_source (deadline_for(comm, t) measures virtual time): the time of the
    /// rank's thread that calls.
    [[nodiscard]] const clock_source& clock() const noexcept { return me().clock; }
    /// This rank's virtual time (of the calling thread of the rank).
    [[nodiscard]] seconds_f virtual_time() const noexcept {
        return seconds_f(to_seconds(me().clock.ps.load(std::memory_order_relaxed)));
    }
    /// This rank's index in the world the communicator was split from.
    [[nodiscard]] int world_rank() const noexcept { return (*members_)[static_cast<std::size_t>(rank_)]; }

    /// Spends `t` of computation: the clock moves by t (times the rank's slow factor, plus any injected stall).
    void compute(seconds_f t) {
        option_validator("hitch::comm::simulated::compute").closed("seconds", t.count(), 0.0, 1e9);
        spend(t.count(), true, "compute");
    }

    /// Charges the combining of `bytes` of received data into this rank's own (the schedules call it after each
    /// combine): simulated_options::combine_s_per_byte (gamma) times bytes, as computation slowed by the rank's
    /// slow factor but drawing no injected stall. Nothing at all while gamma is 0.
    void charge_combine(std::size_t bytes) {
        const double gamma = world_->options.combine_s_per_byte;
        if (gamma > 0.0 && bytes > 0) spend(gamma * static_cast<double>(bytes), false, "combine");
    }

    /// Runs f() and spends its wall time times `scale` as compute: a step measured on this machine and scaled to
    /// the simulated one (a faster accelerator: scale < 1). Unlike compute(), the result depends on this machine.
    template <class F>
    void compute_measured(F&& f, double scale = 1.0) {
        option_validator("hitch::comm::simulated::compute_measured").closed("scale", scale, 0.0, 1e6);
        detail::sim_process& me = world_->caller(world_rank());  // host time so far (host_time_scale) charged here
        const auto start = std::chrono::steady_clock::now();
        std::forward<F>(f)();
        const auto end = std::chrono::steady_clock::now();
        me.resumed = end;  // f is charged once, at `scale`, not again as host time
        compute(seconds_f(std::chrono::duration<double>(end - start).count() * scale));
    }

    /// Idles until virtual time `t` (nothing when it has passed): a start all ranks agree on, or a wait for an event
    /// outside the model. Not compute: a slow rank is not slower at it.
    void advance_to(seconds_f t) {
        option_validator("hitch::comm::simulated::advance_to").closed("seconds", t.count(), 0.0, 1e9);
        detail::sim_process& me = world_->caller(world_rank());
        world_->check_alive(me);
        const vtime at = to_vtime(t.count());
        if (at <= me.now) return;
        const detail::fixed_time_waiter waiter(at);
        world_->block(me, waiter, at, "idle");
        world_->check_alive(me);
    }

    class thread;
    class condition_variable;
    /// Starts `f` as another thread of this rank, from this thread's virtual time on: its computation overlaps the
    /// rank's other threads' in virtual time (a trainer's exchange worker, a co-located server). The threads of a
    /// rank share its network port and its faults; they wait for each other on simulated::condition_variable. A
    /// system thread (std::thread) cannot act for a simulated rank: the simulation runs its threads itself.
    [[nodiscard]] thread start_thread(std::function<void()> f);

    template <element_type T>
    [[nodiscard]] request isend(std::span<const T> data, int peer, int tag) {
        return post_send(std::as_bytes(data), dtype_of<T>(), peer, tag, context_);
    }
    template <element_type T>
    [[nodiscard]] request isend(std::span<T> data, int peer, int tag) {
        return isend(std::span<const T>(data), peer, tag);
    }
    template <element_type T>
    [[nodiscard]] request irecv(std::span<T> data, int peer, int tag) {
        static_assert(!std::is_const_v<T>, "hitch::comm::simulated::irecv needs a writable span");
        return post_recv(std::as_writable_bytes(data), dtype_of<T>(), peer, tag, context_);
    }
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

    /// Blocks until a message from `peer` (or any_source) with `tag` has arrived, in virtual time; gives the one
    /// that arrived first.
    [[nodiscard]] message_info probe(int peer, int tag) {
        check_peer(peer, true, "probe");
        check_tag(tag, "probe");
        const int w = world_rank();
        detail::sim_process& me = world_->caller(w);
        world_->check_alive(me);
        const deadline limit(timeout_, world_->rank(w).clock);
        struct arrival_waiter final : detail::sim_waiter {
            const simulated& c;
            int peer, tag;
            arrival_waiter(const simulated& comm, int p, int t) : c(comm), peer(p), tag(t) {}
            [[nodiscard]] vtime ready_at() const override {
                const detail::sim_op* s = c.first_arrival(peer, tag);
                return s != nullptr ? s->arrival : vtime_never;
            }
        } waiter(*this, peer, tag);
        world_->block(me, waiter, detail::virtual_deadline(limit, world_->rank(w), me.now), "probe", peer);
        if (const detail::sim_op* s = first_arrival(peer, tag); s != nullptr && s->arrival <= me.now)
            return {s->source, s->tag, s->bytes};
        world_->check_alive(me);
        throw timeout_error(
            "comm::simulated probe",
            detail::concat("from ", peer == any_source ? std::string("any rank") : detail::concat("rank ", peer),
                           ", tag ", tag, ", on rank ", rank_),
            limit.waited());
    }
    /// Non-blocking probe: a matching message that has arrived by now.
    [[nodiscard]] std::optional<message_info> iprobe(int peer, int tag) {
        check_peer(peer, true, "iprobe");
        check_tag(tag, "iprobe");
        const int w = world_rank();
        detail::sim_process& me = world_->caller(w);
        world_->check_alive(me);
        const auto found = [&]() -> std::optional<message_info> {
            const detail::sim_op* s = first_arrival(peer, tag);
            if (s != nullptr && s->arrival <= me.now) return message_info{s->source, s->tag, s->bytes};
            return std::nullopt;
        };
        if (auto m = found()) return m;
        if (++me.failed_polls < polls_before_waiting) return std::nullopt;
        me.failed_polls = 0;
        const detail::poll_waiter waiter(me, world_->rank(w), *world_->boxes[static_cast<std::size_t>(w)]);
        world_->block(me, waiter, me.now + to_vtime(timeout_.count()), "poll", peer);
        world_->check_alive(me);
        return found();
    }

    /// Every rank of this communicator arrives, or timeout_error names the rank this one was waiting for.
    void barrier() {
        detail::dissemination_barrier(
            rank_, size(), barriers_++, deadline(timeout_, me().clock), name,
            [&](int to, int round) { return post_send({}, dtype::u8, to, round, context_ + 1); },
            [&](int from, int round) { return post_recv({}, dtype::u8, from, round, context_ + 1); });
    }

    /// Splits into sub-communicators: ranks with the same color (>= 0) form one, ordered by (key, rank). The
    /// (color, key) pairs travel as an allgather of ceil(lg p) rounds (Bruck et al. 1997), as on a real cluster.
    [[nodiscard]] simulated split(int color, int key) {
        option_validator("hitch::comm::simulated::split").at_least("color", color, 0);
        const int p = size();
        const std::uint64_t sequence = splits_++;
        std::vector<int> held{color, key};  // pair j: rank (rank_ + j) % p
        held.reserve(2 * static_cast<std::size_t>(p));
        const deadline limit(timeout_, me().clock);
        try {
            for (int have = 1; have < p; have *= 2) {
                const int count = std::min(have, p - have);
                std::vector<int> in(2 * static_cast<std::size_t>(count));
                auto r = post_recv(std::as_writable_bytes(std::span<int>(in)), dtype::i32, (rank_ + have) % p,
                                   split_tag, context_ + 1);
                auto s = post_send(std::as_bytes(std::span<const int>(held.data(), 2 * std::size_t(count))), dtype::i32,
                                   (rank_ - have + p) % p, split_tag, context_ + 1);
                r.wait(limit);
                s.wait(limit);
                held.insert(held.end(), in.begin(), in.end());
            }
        } catch (const timeout_error& e) {
            throw timeout_error("comm::simulated split",
                                detail::concat("split #", sequence, " on rank ", rank_, ": ", e.what()),
                                limit.waited());
        }
        std::vector<int> pairs(2 * static_cast<std::size_t>(p));
        for (int j = 0; j < p; ++j) {
            const auto at = 2 * static_cast<std::size_t>((rank_ + j) % p);
            pairs[at] = held[2 * static_cast<std::size_t>(j)];
            pairs[at + 1] = held[2 * static_cast<std::size_t>(j) + 1];
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
        return simulated(world_, std::move(members), ctx, new_rank, timeout_);
    }

private:
    /// Moves the calling thread's clock by `seconds` times the rank's slow factor (plus an injected stall for a
    /// compute step), as busy time, recorded under `what`.
    void spend(double seconds, bool may_stall, const char* what) {
        const int w = world_rank();
        detail::sim_process& me = world_->caller(w);
        detail::sim_rank& r = world_->rank(w);
        world_->check_alive(me);
        me.failed_polls = 0;
        const vtime from = me.now;
        const vtime dt = to_vtime(seconds * r.slow) + (may_stall ? world_->stall_after_compute(w) : vtime{0});
        const vtime to = std::min(from + dt, r.dies_at);
        r.busy += to - from;
        world_->set_now(me, to);
        if (world_->options.record_timeline && to > from)
            r.timeline.push_back({what, to_seconds(from), to_seconds(to), -1, me.thread});
        world_->check_alive(me);
        world_->yield(me);
    }
    friend struct detail::simulated_access;
    static constexpr int split_tag = 1 << 20;

    simulated(std::shared_ptr<detail::sim_world> world, std::shared_ptr<const std::vector<int>> members,
              std::uint64_t context, int rank, seconds_f timeout)
        : world_(std::move(world)), members_(std::move(members)), context_(context), rank_(rank), timeout_(timeout) {}

    [[nodiscard]] detail::sim_rank& me() const { return world_->rank(world_rank()); }
    [[nodiscard]] int world_of(int group_rank) const { return (*members_)[static_cast<std::size_t>(group_rank)]; }

    /// The matching message in this rank's mailbox that arrives first (mutex held).
    [[nodiscard]] const detail::sim_op* first_arrival(int peer, int tag) const {
        const detail::sim_op* best = nullptr;
        for (const auto& s : world_->boxes[static_cast<std::size_t>(world_rank())]->unexpected)
            if (s->context == context_ && s->tag == tag && (peer == any_source || s->source == peer) &&
                (best == nullptr || s->arrival < best->arrival))
                best = s.get();
        return best;
    }

    void check_peer(int peer, bool any_ok, const char* op) const {
        if (any_ok && peer == any_source) return;
        if (peer < 0 || peer >= size())
            throw config_error(detail::concat("hitch::comm::simulated::", op, ": peer ", peer,
                                              " is outside the allowed range [0, ", size(), ")",
                                              any_ok ? " (or hitch::any_source)" : ""));
    }
    void check_tag(int tag, const char* op) const {
        if (tag < 0)
            throw config_error(detail::concat("hitch::comm::simulated::", op, ": tag ", tag,
                                              " is outside the allowed range [0, ", max_tag(), "]"));
    }

    [[nodiscard]] std::shared_ptr<detail::sim_op> make_op(detail::sim_kind kind, dtype type, int peer, int tag,
                                                          std::uint64_t context, std::size_t bytes) const {
        auto op = std::make_shared<detail::sim_op>();
        op->kind = kind;
        op->type = type;
        op->context = context;
        op->source = kind == detail::sim_kind::send ? rank_ : peer;
        op->peer = peer;
        op->tag = tag;
        op->owner = world_rank();
        op->owner_rank = rank_;
        op->bytes = bytes;
        return op;
    }

    request post_send(std::span<const std::byte> data, dtype type, int peer, int tag, std::uint64_t context) {
        check_peer(peer, false, "isend");
        check_tag(tag, "isend");
        auto op = make_op(detail::sim_kind::send, type, peer, tag, context, data.size());
        detail::sim_process& me = world_->caller(world_rank());
        world_->check_alive(me);
        me.failed_polls = 0;
        world_->post_send(me, world_of(peer), op, data);
        return request(std::move(op), world_, timeout_);
    }
    request post_recv(std::span<std::byte> data, dtype type, int peer, int tag, std::uint64_t context) {
        check_peer(peer, true, "irecv");
        check_tag(tag, "irecv");
        auto op = make_op(detail::sim_kind::recv, type, peer, tag, context, data.size());
        op->into = data.data();
        detail::sim_process& me = world_->caller(world_rank());
        world_->check_alive(me);
        me.failed_polls = 0;
        world_->post_recv(me, op);
        return request(std::move(op), world_, timeout_);
    }

    std::shared_ptr<detail::sim_world> world_;
    std::shared_ptr<const std::vector<int>> members_;  // group rank -> world rank
    std::uint64_t context_ = 0;                        // user traffic; context_ + 1 carries hitch's own
    int rank_ = 0;
    seconds_f timeout_{};
    std::uint64_t splits_ = 0;
    std::uint64_t barriers_ = 0;
};

/// A thread of a simulated rank (simulated::start_thread). join() waits in virtual time; destroying a joinable
/// thread joins it (a rank cannot leave a thread of its own running behind it), and forgets what escaped it.
class simulated::thread {
public:
    thread() = default;
    thread(const thread&) = delete;
    thread& operator=(const thread&) = delete;
    thread(thread&& o) noexcept : world_(std::move(o.world_)), target_(std::exchange(o.target_, nullptr)) {}
    thread& operator=(thread&& o) noexcept {
        if (this != &o) {
            join_quietly();
            world_ = std::move(o.world_);
            target_ = std::exchange(o.target_, nullptr);
        }
        return *this;
    }
    ~thread() { join_quietly(); }

    [[nodiscard]] bool joinable() const noexcept { return target_ != nullptr; }
    /// Waits until the thread has ended, in virtual time, and rethrows what escaped it. A wait that nothing can end
    /// (every thread of the simulation waits without a deadline) is comm_error.
    void join() {
        if (target_ == nullptr) throw config_error("hitch::comm::simulated::thread::join: the thread is not joinable");
        detail::sim_process& target = *std::exchange(target_, nullptr);
        if (target.status != detail::sim_process::finished) {
            detail::sim_process& me = world_->caller(target.rank);
            if (&me == &target) throw config_error("hitch::comm::simulated::thread::join: a thread joins itself");
            const detail::join_waiter w(target);
            while (target.status != detail::sim_process::finished) {
                world_->block(me, w, vtime_never, "join");
                if (target.status != detail::sim_process::finished && me.stuck)
                    throw comm_error(detail::concat("hitch::comm::simulated: rank ", me.rank, "'s thread ", me.thread,
                                                    " joins its thread ", target.thread,
                                                    ", which never ends: every thread of the simulation waits and "
                                                    "none has a deadline"));
            }
        }
        if (target.error) std::rethrow_exception(target.error);
    }

private:
    friend class simulated;
    void join_quietly() noexcept {
        if (target_ == nullptr) return;
        try {
            join();
        } catch (...) {  // a destructor does not throw; join() is where a thread's error is seen
        }
    }
    std::shared_ptr<detail::sim_world> world_;
    detail::sim_process* target_ = nullptr;
};

/// What the threads of a simulated rank wait for each other on, as std::condition_variable between system threads:
/// a wait ends at the virtual time of the notify that ends it (or at the waiter's own time, if that is later).
/// Only the threads of a simulation may wait; a wait that nothing can end is comm_error.
class simulated::condition_variable {
public:
    condition_variable() = default;
    condition_variable(const condition_variable&) = delete;
    condition_variable& operator=(const condition_variable&) = delete;

    void notify_one() noexcept { notify(1); }
    void notify_all() noexcept { notify(waiting_.size()); }

    void wait(std::unique_lock<std::mutex>& lock) {
        detail::sim_process* me = detail::running_process();
        if (me == nullptr)
            throw comm_error(
                "hitch::comm::simulated::condition_variable::wait: called from a system thread the simulation did "
                "not start");
        me->notified_at = vtime_never;
        waiting_.push_back(me);
        const detail::notify_waiter w(*me);
        lock.unlock();
        me->world->block(*me, w, vtime_never, "idle");
        lock.lock();
        if (me->notified_at != vtime_never) return;
        waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), me), waiting_.end());
        if (me->stuck)
            throw comm_error(detail::concat("hitch::comm::simulated: rank ", me->rank, "'s thread ", me->thread,
                                            " waits on a condition variable nobody will notify: every thread of the "
                                            "simulation waits and none has a deadline"));
    }
    template <class Predicate>
    void wait(std::unique_lock<std::mutex>& lock, Predicate ready) {
        while (!ready()) wait(lock);
    }

private:
    void notify(std::size_t n) noexcept {
        const detail::sim_process* by = detail::running_process();
        for (std::size_t i = 0; i < n && !waiting_.empty(); ++i) {
            detail::sim_process* t = waiting_.front();
            waiting_.pop_front();
            t->notified_at = by != nullptr ? by->now : t->now;
            t->world->touch(*t);
        }
    }
    std::deque<detail::sim_process*> waiting_;
};

inline simulated::thread simulated::start_thread(std::function<void()> f) {
    if (!f) throw config_error("hitch::comm::simulated::start_thread: the function is empty");
    detail::sim_process& me = world_->caller(world_rank());
    world_->check_alive(me);
    thread t;
    t.world_ = world_;
    t.target_ = &world_->add_thread(world_rank(), me.now, std::move(f));
    return t;
}

static_assert(communicator<simulated>, "hitch::comm::simulated must model hitch::communicator");
static_assert(has_clock<simulated> && has_node_layout<simulated> && !shares_address_space<simulated>,
              "hitch::comm::simulated keeps virtual time and simulates separate machines");

}  // namespace hitch::comm

#include "hitch/comm/detail/simulated_run.hpp"
