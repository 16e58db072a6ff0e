#pragma once
// hitch::allreduce::group<C>: the state hitch's collectives keep per communicator.
//
//   hitch::comm::mpi comm;
//   hitch::allreduce::group g(comm);                 // collective: every rank constructs it
//   hitch::allreduce::allreduce(g, hitch::view(grads), hitch::allreduce::reduce_op::average);
//   auto h = hitch::allreduce::allreduce_async(g, hitch::view(more));   // overlaps with the caller's work
//   h.wait();
//
// A group owns a private duplicate of the communicator (from split), so its traffic never meets the user's or
// another group's; a sequence number per call, from which the call's tags are derived (call n's transport takes
// 3n, and 3n+1 and 3n+2 are automatic's, for calibration inside that call); the calibrated cost
// constants `automatic` uses; reusable scratch memory; and, once a non-blocking call is made, a progress thread
// that runs queued calls in the order they were issued (as Horovod's background thread does). Blocking calls run
// on the caller's thread when nothing is queued, else in turn behind the queued ones. Every rank must issue the
// same calls in the same order; each call checks that (see call_options::check).
//
// Given an observer with a stall callback, a group also runs a stall inspector (Horovod's): a call that has waited
// stall_options::warning_s on a reporting rank is reported with the ranks that have not entered it yet
// (allreduce/detail/stall_inspector.hpp). And it counts how long its calls waited for the other ranks to enter them
// (waited(): the agreement round that opens each checked call ends only once every rank has entered it).

#include <atomic>
#include <chrono>
#include <condition_variable>
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
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "hitch/allreduce/automatic/calibration.hpp"
#include "hitch/allreduce/automatic/decisions.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/detail/stall_inspector.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/comm/agree.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/observer.hpp"
#include "hitch/core/options.hpp"

namespace hitch::allreduce {

/// Per-call options shared by every collective.
struct call_options {
    /// Check that every rank makes the same call (operation, element count and type, reduce op, root, schedule,
    /// sequence number, fingerprint) before moving data; a disagreement throws mismatch_error on every rank.
    /// Turning it off saves one round of small messages per call; ranks must then agree on their own.
    bool check = true;
    /// Use shared memory where the communicator offers it: the direct path when its ranks share an address space,
    /// the staged path (pipes in a shared mapping) when they are processes on one node.
    bool shared_memory = true;
    /// Deadline of the whole call in seconds; 0 uses the communicator's timeout.
    double timeout_s = 0.0;
    /// An extra value checked across ranks with the rest, e.g. a hash of the tensor layout packed in a bucket.
    std::uint64_t fingerprint = 0;

    void validate() const {
        option_validator("hitch::allreduce::call_options").closed("timeout_s", timeout_s, 0.0, 1e9);
    }
};

/// The collective operations, as named in agreement messages.
enum class operation : std::uint8_t {
    allreduce = 1,
    reduce_scatter = 2,
    allgather = 3,
    allgather_bytes = 4,
    broadcast = 5,
    reduce = 6,
    /// A small agreement among the ranks run as a call of the group (data_parallel's step agreement), so the stall
    /// inspector sees it and its wait is counted.
    agreement = 7,
};

[[nodiscard]] constexpr std::string_view name(operation o) noexcept {
    switch (o) {
        case operation::allreduce:
            return "allreduce";
        case operation::reduce_scatter:
            return "reduce_scatter";
        case operation::allgather:
            return "allgather";
        case operation::allgather_bytes:
            return "allgather_bytes";
        case operation::broadcast:
            return "broadcast";
        case operation::reduce:
            return "reduce";
        case operation::agreement:
            return "agreement";
    }
    return "invalid-operation";
}

/// What every rank must agree on for one call.
struct call_descriptor {
    std::uint64_t sequence = 0;
    std::uint64_t count = 0;
    std::uint64_t fingerprint = 0;
    std::int32_t root = -1;
    std::uint8_t operation = 0;
    std::uint8_t type = 0;
    std::uint8_t op = 0;
    std::uint8_t reserved = 0;
    char schedule[24] = {};

    void set_schedule(std::string_view s) noexcept {
        std::memset(schedule, 0, sizeof(schedule));
        std::memcpy(schedule, s.data(), std::min(s.size(), sizeof(schedule) - 1));
    }
    [[nodiscard]] std::string_view schedule_name() const noexcept {
        return {schedule, ::strnlen(schedule, sizeof(schedule))};
    }
    friend bool operator==(const call_descriptor& a, const call_descriptor& b) noexcept {
        return a.sequence == b.sequence && a.count == b.count && a.fingerprint == b.fingerprint && a.root == b.root &&
               a.operation == b.operation && a.type == b.type && a.op == b.op && a.schedule_name() == b.schedule_name();
    }
};
static_assert(sizeof(call_descriptor) == 56 && std::is_trivially_copyable_v<call_descriptor>);

namespace detail {

/// "allreduce #17: rank 0 has 1000 x float, rank 1 has 1001 x float": the count and type always, the other
/// fields only where ranks differ.
[[nodiscard]] inline std::string describe_disagreement(const call_descriptor& mine,
                                                       const std::vector<call_descriptor>& all) {
    const auto differs = [&](auto field) {
        for (const auto& d : all)
            if (!(field(d) == field(all.front()))) return true;
        return false;
    };
    const bool op_kind = differs([](const call_descriptor& d) { return d.operation; });
    const bool seq = differs([](const call_descriptor& d) { return d.sequence; });
    const bool red = differs([](const call_descriptor& d) { return d.op; });
    const bool sched = differs([](const call_descriptor& d) { return d.schedule_name(); });
    const bool root = differs([](const call_descriptor& d) { return d.root; });
    const bool print = differs([](const call_descriptor& d) { return d.fingerprint; });
    std::ostringstream s;
    s << name(static_cast<operation>(mine.operation)) << " #" << mine.sequence << ": ";
    for (std::size_t r = 0; r < all.size(); ++r) {
        const call_descriptor& d = all[r];
        if (r != 0) s << ", ";
        s << "rank " << r << " has ";
        if (op_kind) s << name(static_cast<operation>(d.operation)) << " of ";
        s << d.count << " x " << name(static_cast<dtype>(d.type));
        if (red) s << ' ' << name(static_cast<reduce_op>(d.op));
        if (sched) s << " (" << d.schedule_name() << ')';
        if (root) s << " root " << d.root;
        if (seq) s << " as call #" << d.sequence;
        if (print) s << " fingerprint " << d.fingerprint;
    }
    return s.str();
}

/// Queued work of a group: one call, run once, its outcome kept for the handle.
struct job {
    std::function<void(std::uint64_t)> body;
    std::uint64_t sequence = 0;
    std::uint8_t operation = 0;
    std::string label;
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;

    void finish(std::exception_ptr e) {
        {
            std::lock_guard lock(m);
            error = std::move(e);
            done = true;
        }
        cv.notify_all();
    }
    bool wait_until(std::chrono::steady_clock::time_point when) {
        std::unique_lock lock(m);
        return cv.wait_until(lock, when, [&] { return done; });
    }
};

}  // namespace detail

/// A non-blocking collective in flight. wait() rethrows the call's error. Destroying a handle whose call is still
/// running waits for it (the call writes into the caller's buffer until it ends).
class handle {
public:
    handle() = default;
    handle(const handle&) = delete;
    handle& operator=(const handle&) = delete;
    handle(handle&&) noexcept = default;
    handle& operator=(handle&& o) noexcept {
        if (this != &o) {
            settle();
            job_ = std::move(o.job_);
            timeout_ = o.timeout_;
        }
        return *this;
    }
    ~handle() { settle(); }

    /// True once the call has finished; throws its error if it failed.
    bool test() {
        if (!job_) return true;
        {
            std::lock_guard lock(job_->m);
            if (!job_->done) return false;
        }
        consume();
        return true;
    }
    /// Waits up to the communicator's timeout.
    void wait() { wait(deadline(timeout_)); }
    /// Waits until `limit`; timeout_error names the call.
    void wait(const deadline& limit) {
        if (!job_) return;
        if (!job_->wait_until(limit.when()))
            throw timeout_error(job_->label, "the call is still queued or running", limit.waited());
        consume();
    }
    [[nodiscard]] bool valid() const noexcept { return job_ != nullptr; }
    /// The call's sequence number in its group.
    [[nodiscard]] std::uint64_t sequence() const noexcept { return job_ ? job_->sequence : 0; }

private:
    template <communicator C>
    friend class group;
    handle(std::shared_ptr<detail::job> j, seconds_f timeout) : job_(std::move(j)), timeout_(timeout) {}
    void consume() {
        auto j = std::move(job_);
        if (j->error) std::rethrow_exception(j->error);
    }
    void settle() noexcept {
        if (!job_) return;
        // The job outlives the lock on its mutex: dropping the last reference inside the lock's scope would free
        // the mutex before the lock releases it.
        const std::shared_ptr<detail::job> j = std::move(job_);
        std::unique_lock lock(j->m);
        j->cv.wait(lock, [&] { return j->done; });
    }
    std::shared_ptr<detail::job> job_;
    seconds_f timeout_{};
};

/// The state of hitch's collectives on one communicator (see the file comment). Construct it on every rank.
template <communicator C>
class group {
public:
    /// Collective over `parent`: splits a private communicator for hitch's traffic. A rank that reports stalls
    /// (`watch.stall` set, stall.warning_s > 0, and rank 0 or stall.every_rank) has each call that waits
    /// stall.warning_s reported to its observer; once any rank reports, every rank runs the inspector's service
    /// thread, which answers the reporters (so ranks may differ in their observers and options). Communicators
    /// with a clock of their own (comm::simulated: virtual time) run no inspector.
    explicit group(C& parent, const observer& watch = {}, const stall_options& stall = {})
        : comm_(parent.split(0, parent.rank())), timeout_s_(parent.timeout().count()) {
        stall.validate();
        attach_pipes(comm_, state_);  // processes on one node: the transport's staged path
        if (!state_.shared_memory_refusal.empty() && watch.notice && first_on_node()) {
            try {
                watch.notice(detail::concat("hitch: shared memory refused (", state_.shared_memory_refusal,
                                            "); this group's calls take messages"));
            } catch (...) {  // the observer's own failure is not the group's
            }
        }
        if constexpr (!has_clock<C>) {
            if (comm_.size() > 1) {
                const bool reports = watch.stall && stall.warning_s > 0.0 && (stall.every_rank || comm_.rank() == 0);
                const std::vector<double> thresholds = comm::allgather_value(comm_, reports ? stall.warning_s : 0.0);
                double shortest = 0.0;
                for (const double t : thresholds)
                    if (t > 0.0 && (shortest == 0.0 || t < shortest)) shortest = t;
                if (shortest > 0.0)
                    inspector_ = std::make_unique<detail::stall_inspector<C>>(
                        comm_.split(0, comm_.rank()), reports ? watch.stall : nullptr, stall.warning_s, shortest,
                        [](std::uint8_t op) { return name(static_cast<operation>(op)); });
            }
        }
    }
    group(const group&) = delete;
    group& operator=(const group&) = delete;
    /// Runs what is still queued, then stops the progress thread.
    ~group() {
        {
            std::lock_guard lock(m_);
            stopping_ = true;
        }
        cv_.notify_all();
        if (worker_.joinable()) worker_.join();
    }

    [[nodiscard]] C& comm() noexcept { return comm_; }
    [[nodiscard]] int rank() const noexcept { return comm_.rank(); }
    [[nodiscard]] int size() const noexcept { return comm_.size(); }
    /// Deadline of each call (default: the parent communicator's timeout when the group was made).
    [[nodiscard]] seconds_f timeout() const noexcept { return seconds_f(timeout_s_.load()); }
    void set_timeout(seconds_f t) {
        option_validator("hitch::allreduce::group::set_timeout").open_closed("timeout_s", t.count(), 0.0, 1e9);
        timeout_s_.store(t.count());
    }
    /// Calls issued so far (the next call's sequence number).
    [[nodiscard]] std::uint64_t calls() const {
        std::lock_guard lock(m_);
        return next_sequence_;
    }

    /// The cost constants `automatic` uses: the user's, else those measured by the first call that needed them.
    [[nodiscard]] std::optional<cost_constants> constants() const {
        std::lock_guard lock(state_.m);
        return state_.constants;
    }
    /// Overrides the measured constants. Every rank must set the same values (a call whose schedule choice then
    /// differs between ranks fails its agreement check).
    void set_constants(const cost_constants& k) {
        k.validate();
        std::lock_guard lock(state_.m);
        state_.constants = k;
        // the user's constants and the pure model, not measurements
        state_.slots.erase(detail::automatic_profile_slot);
        state_.slots.erase(detail::automatic_decisions_slot);
    }

    /// How long this rank's calls have waited, in all, for the other ranks to enter them: the time each call spent
    /// in its agreement round (call_options::check), which ends once every rank has entered the call. Calls with
    /// the check off are not counted.
    [[nodiscard]] seconds_f waited() const noexcept {
        return std::chrono::duration<double, std::nano>(static_cast<double>(waited_ns_.load()));
    }
    /// Why this group's ranks on one node could not map the staged path's pipes ("rank R: <reason>"), the same on
    /// every rank of the node; empty when they could or had none to map. Its calls then take messages.
    [[nodiscard]] const std::string& shared_memory_refusal() const noexcept { return state_.shared_memory_refusal; }
    /// True when this group runs a stall inspector.
    [[nodiscard]] bool inspects_stalls() const noexcept { return inspector_ != nullptr; }

    /// Scratch memory held by the group (for tests and diagnostics).
    [[nodiscard]] std::size_t scratch_bytes() const { return state_.arena.capacity(); }

    // ---- used by the collectives (hitch/allreduce/collectives.hpp) ----

    /// Runs `body(transport&, descriptor)` as the next call, on this thread when nothing is queued (without any
    /// allocation of its own), else in turn behind the queued calls. `describe()` gives the call's descriptor,
    /// checked across ranks first when options.check is set.
    template <class Describe, class Body>
    void run(const call_options& options, Describe&& describe, Body&& body) {
        validate(options);
        std::unique_lock lock(m_);
        const std::uint64_t sequence = next_sequence_++;
        if (queue_.empty() && !busy_) {
            busy_ = true;
            lock.unlock();
            struct idle_again {
                group* g;
                ~idle_again() {
                    {
                        std::lock_guard guard(g->m_);
                        g->busy_ = false;
                    }
                    g->cv_.notify_all();
                }
            } release{this};
            execute(options, describe, body, sequence);
            return;
        }
        auto j = make_job(options, std::forward<Describe>(describe), std::forward<Body>(body));
        j->sequence = sequence;
        j->label = label_of(j->operation, sequence);
        queue_.push_back(j);
        lock.unlock();
        cv_.notify_all();
        std::unique_lock jl(j->m);
        j->cv.wait(jl, [&] { return j->done; });
        if (j->error) std::rethrow_exception(j->error);
    }

    /// Queues the call for the progress thread and returns at once.
    template <class Describe, class Body>
    [[nodiscard]] handle submit(const call_options& options, Describe&& describe, Body&& body) {
        validate(options);
        auto j = make_job(options, std::forward<Describe>(describe), std::forward<Body>(body));
        {
            std::lock_guard lock(m_);
            j->sequence = next_sequence_++;
            j->label = label_of(j->operation, j->sequence);
            queue_.push_back(j);
            if (!worker_.joinable()) worker_ = std::thread([this] { work(); });
        }
        cv_.notify_all();
        return handle(j, timeout());
    }

    /// Shared state of the group's communicator (arena, constants, schedule caches).
    [[nodiscard]] shared_state<C>& state() noexcept { return state_; }

private:
    /// True on the lowest rank of this rank's node (it speaks for the node).
    [[nodiscard]] bool first_on_node() { return node_layout_of(comm_).local_rank(comm_.rank()) == 0; }
    static void validate(const call_options& options) {
        if (!(options.timeout_s >= 0.0 && options.timeout_s <= 1e9)) options.validate();  // throws
    }
    [[nodiscard]] static std::string label_of(std::uint8_t op, std::uint64_t sequence) {
        return detail::concat(name(static_cast<operation>(op)), " #", sequence);
    }

    /// One call: agreement check (when asked), then the body, all within one deadline.
    template <class Describe, class Body>
    void execute(const call_options& options, Describe& describe, Body& body, std::uint64_t sequence) {
        call_descriptor d = describe();
        d.sequence = sequence;
        const seconds_f timeout = options.timeout_s > 0 ? seconds_f(options.timeout_s) : this->timeout();
        const deadline limit = deadline_for(comm_, timeout);
        struct inspected {
            detail::stall_inspector<C>* inspector;
            std::uint64_t sequence;
            ~inspected() {
                if (inspector != nullptr) inspector->left(sequence);
            }
        } watched{inspector_.get(), sequence};
        if (inspector_) inspector_->entered(sequence, d.operation, d.schedule_name(), timeout);
        try {
            const bool checked = options.check && comm_.size() > 1;
            if (checked) {
                const auto start = std::chrono::steady_clock::now();
                check(d, timeout);
                waited_ns_ += static_cast<std::uint64_t>(
                    std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
                        .count());
            }
            comm_.set_timeout(timeout);
            // Two call numbers after each call's own are automatic's (allreduce/automatic/calibration.hpp).
            transport<C> t(comm_, sequence * detail::sequence_stride, limit, options.shared_memory, state_);
            t.set_agreed(checked || comm_.size() == 1);
            body(t, d);
        } catch (const timeout_error& e) {
            // The peer a schedule stalled on may itself be waiting for another: ask who is still here. The ranks
            // of a call time out at about the same moment (they wait on the same missing rank) and answer. (The
            // agreement gather has taken its own roll call when it is what timed out.)
            std::string missing = e.missing();
            if (missing.empty() && comm_.size() > 1) {
                const int tag = collective_tag_base(comm_) + hitch::comm::call_roll_call_tag_offset;
                const std::vector<int> absent = hitch::comm::detail::roll_call(
                    comm_.rank(), comm_.size(), {},
                    hitch::comm::detail::deadline_like(limit, hitch::comm::detail::roll_call_grace(timeout)),
                    [&](int peer) { return comm_.isend(std::span<const std::byte>(), peer, tag); },
                    [&](int peer) { return comm_.irecv(std::span<std::byte>(), peer, tag); });
                if (!absent.empty()) missing = hitch::comm::detail::describe_absent(absent, -1);
            }
            throw timeout_error(
                detail::concat(label_of(d.operation, sequence), " (", d.schedule_name(), ") on rank ", comm_.rank()),
                e.what(), limit.waited(), missing);
        }
    }

    template <class Describe, class Body>
    std::shared_ptr<detail::job> make_job(const call_options& options, Describe&& describe, Body&& body) {
        auto j = std::make_shared<detail::job>();
        j->operation = describe().operation;
        j->body = [this, options, describe = std::forward<Describe>(describe), body = std::forward<Body>(body)](
                      std::uint64_t sequence) mutable { execute(options, describe, body, sequence); };
        return j;
    }

    /// Every rank learns every rank's descriptor; any difference throws on all of them. (Only the call that runs
    /// touches the private communicator, so setting its timeout here races with nothing.)
    void check(const call_descriptor& mine, seconds_f timeout) {
        comm_.set_timeout(timeout);
        const std::vector<call_descriptor> all = comm::allgather_value(comm_, mine);
        for (const auto& d : all)
            if (!(d == all.front())) throw mismatch_error(detail::describe_disagreement(mine, all));
    }

    void work() {
        std::unique_lock lock(m_);
        for (;;) {
            cv_.wait(lock, [&] { return (!queue_.empty() && !busy_) || (stopping_ && queue_.empty() && !busy_); });
            if (queue_.empty()) return;
            auto j = queue_.front();
            queue_.pop_front();
            busy_ = true;
            lock.unlock();
            std::exception_ptr error;
            try {
                j->body(j->sequence);
            } catch (...) {
                error = std::current_exception();
            }
            j->finish(error);
            lock.lock();
            busy_ = false;
            cv_.notify_all();
        }
    }

    C comm_;
    std::atomic<double> timeout_s_;
    shared_state<C> state_;
    mutable std::mutex m_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<detail::job>> queue_;
    std::uint64_t next_sequence_ = 0;
    bool busy_ = false;
    bool stopping_ = false;
    std::atomic<std::uint64_t> waited_ns_{0};
    std::thread worker_;
    std::unique_ptr<detail::stall_inspector<C>> inspector_;  // last: stopped first, before the calls' state goes
};

}  // namespace hitch::allreduce
