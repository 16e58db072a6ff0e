#pragma once
// hitch::allreduce::automatic: picks a schedule per call from the world size and the byte count with the
// alpha-beta-gamma cost model (hitch/allreduce/cost.hpp), each candidate's prediction corrected by its measured
// time on this communicator: the candidate with the smallest predicted time wins. Candidates: recursive_doubling,
// ring, rabenseifner, binary_tree, double_binary_tree, parameter_server (one shard per rank, which on a shared
// address space reads and writes each element once), hierarchical by node where the group's node layout has two
// levels (more than one node, more than one rank on some node), and the communicator's own all-reduce (native)
// where it has one and hitch/allreduce/native.hpp is included. On two levels the model weighs each message at its
// level's constants (cost_on, allreduce/cost.hpp): calibration measures alpha and beta inside a node and between
// nodes, and the pick is flat or two-level per size.
//
// The module (allreduce/automatic/):
//   candidates.hpp     the candidates, which run on a layout, their modelled cost there, running one
//   constants.hpp      measures alpha, beta, gamma (and native's, and between nodes) once per group
//   profile.hpp        the candidates' times at probe sizes 4 KiB-64 MiB, and the prediction they correct
//   calibration.hpp    where calibration runs (its own call number and deadline) and its time budget
//   agreement.hpp      how ranks come to the same measurements and the same decisions
//   decisions.hpp      the choices a group remembers
//   rerank.hpp         each call size's online ranking: estimates from automatic's own calls, exploration
//   record.hpp         what an automatic and its copies decided, shared between them
//   state.hpp          the decisions as a versioned, checksummed blob (save_state / load_state)
// Tuned constants (probe sizes, best-of-N, budget, deadline, re-ranking) are in hitch/allreduce/tuning.hpp.
//
// Calibration runs in the first call that needs it (the first automatic call of a group, and the first call
// larger than 16 MiB, which adds a 64 MiB probe), in a transport of its own (a call number the group reserves
// inside each call) under its own deadline (options_type::calibration_timeout_s) and within a time budget
// (options_type::calibration_budget_s): probes that would not fit are left out, or take fewer runs, and the model is
// held beyond the last measured one. That call then runs its all-reduce with the caller's whole deadline,
// starting after calibration. Every measurement is agreed (the
// maximum over ranks) and every stop is decided by all ranks together, so all ranks take the same decisions at
// the same call numbers. group::set_constants() or options_type::constants replace the measurements with the user's
// constants and the pure model (the same on every rank). save_state() and load_state() carry the decisions
// across a checkpoint: after load_state(), the same calls pick the same schedules without measuring.
//
// The model's pick is where each call size starts: with options_type::rerank (the default) the candidates are then
// re-ranked online from the measured times of automatic's own calls, every rank running the same candidate in every
// call because each follows from agreed window summaries and the call's index among the calls of its size
// (rerank.hpp says how). The online estimates describe the host's speed at the time and are not in save_state():
// set rerank = false where a resume must repeat its schedules, and so its sums, bit for bit.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hitch/allreduce/automatic/agreement.hpp"
#include "hitch/allreduce/automatic/calibration.hpp"
#include "hitch/allreduce/automatic/candidates.hpp"
#include "hitch/allreduce/automatic/constants.hpp"
#include "hitch/allreduce/automatic/decisions.hpp"
#include "hitch/allreduce/automatic/native_candidate.hpp"
#include "hitch/allreduce/automatic/profile.hpp"
#include "hitch/allreduce/automatic/record.hpp"
#include "hitch/allreduce/automatic/rerank.hpp"
#include "hitch/allreduce/automatic/state.hpp"
#include "hitch/allreduce/binary_tree.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/double_binary_tree.hpp"
#include "hitch/allreduce/parameter_server.hpp"
#include "hitch/allreduce/rabenseifner.hpp"
#include "hitch/allreduce/recursive_doubling.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/ring.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/allreduce/tuning.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/concepts/allreduce_schedule.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/core/options.hpp"

namespace hitch::allreduce {

class automatic {
public:
    struct options_type {
        /// Use these constants instead of measuring (the same on every rank).
        std::optional<cost_constants> constants;
        /// Time budget of one calibration in seconds: probes that would not fit are left out (0: the constants
        /// only, and the pure model). Every rank must pass the same value.
        double calibration_budget_s = tuning::calibration_budget_s;
        /// Deadline of one calibration in seconds, apart from the caller's (which starts after calibration).
        double calibration_timeout_s = tuning::calibration_timeout_s;
        ::hitch::allreduce::ring::options_type ring{};
        ::hitch::allreduce::recursive_doubling::options_type recursive_doubling{};
        ::hitch::allreduce::rabenseifner::options_type rabenseifner{};
        ::hitch::allreduce::binary_tree::options_type binary_tree{};
        ::hitch::allreduce::double_binary_tree::options_type double_binary_tree{};
        /// The parameter-server candidate is sharded over every rank (servers is capped at the world size).
        ::hitch::allreduce::parameter_server::options_type parameter_server{.servers = 1 << 20};
        /// The two-level candidate, weighed on layouts of two levels; it groups by node (ranks_per_group 0).
        automatic_hierarchical::options_type hierarchical{};
        /// Re-rank the candidates online from the measured times of automatic's own calls (see the file comment);
        /// false: the model and the profile pick once per size, and every later call of that size takes the same
        /// schedule. Every rank must pass the same value, as for every field below.
        bool rerank = true;
        /// Share of the calls' time spent running runners-up, in [0, 1]: each call earns this share of the current
        /// pick's estimated time, and a runner-up runs once the credit covers how much slower it is estimated to
        /// be (at least half a call). 0: runners-up run only in the first calls of a size, or when the current
        /// pick's measured time drifts above their estimates.
        double explore_fraction = tuning::rerank_explore_fraction;
        /// A runner-up replaces the current pick when its estimate is below (1 - switch_margin) x the current's,
        /// in [0, 1).
        double switch_margin = tuning::rerank_switch_margin;
        /// The most calls of a size between two reviews (each one all-gather of 64 bytes), in [1, 2^20]; fewer
        /// where the calls are long enough that a review costs under 0.5% of their time.
        int max_review_calls = tuning::rerank_max_review_calls;

        void validate() const {
            if (constants) constants->validate();
            option_validator("hitch::allreduce::automatic")
                .closed("calibration_budget_s", calibration_budget_s, 0.0, 1e9)
                .open_closed("calibration_timeout_s", calibration_timeout_s, 0.0, 1e9)
                .closed("explore_fraction", explore_fraction, 0.0, 1.0)
                .half_open("switch_margin", switch_margin, 0.0, 1.0)
                .closed("max_review_calls", max_review_calls, 1, 1 << 20);
            ring.validate();
            recursive_doubling.validate();
            rabenseifner.validate();
            binary_tree.validate();
            double_binary_tree.validate();
            parameter_server.validate();
            hierarchical.validate();
            option_validator("hitch::allreduce::automatic")
                .closed("hierarchical.ranks_per_group", hierarchical.ranks_per_group, 0, 0);
        }

        friend bool operator==(const options_type&, const options_type&) = default;
    };

    static constexpr std::string_view name = "automatic";

    /// Copies share what they decided (collectives copy the schedule they are given), so save_state() on the
    /// object a trainer keeps sees the decisions of every call made with it.
    automatic() = default;
    explicit automatic(const options_type& o) : options_(o), candidates_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    /// The cost of the schedule the model picks for p ranks on one node.
    [[nodiscard]] cost_estimate cost(int p, std::size_t n_bytes, const cost_constants& k) const {
        return cost(level_shape::one_node(p), n_bytes, k);
    }
    /// The same on ranks of a node layout (two levels where it has them).
    [[nodiscard]] cost_estimate cost(const node_layout& layout, std::size_t n_bytes, const cost_constants& k) const {
        return cost(level_shape::of(layout), n_bytes, k);
    }
    [[nodiscard]] cost_estimate cost(const level_shape& shape, std::size_t n_bytes, const cost_constants& k) const {
        cost_estimate best;
        double best_s = -1;
        candidates_.visit(shape, k, [&](int, const auto& s) {
            const cost_estimate c = cost_on(s, shape, n_bytes, k);
            if (best_s < 0 || c.seconds(k) < best_s) {
                best = c;
                best_s = c.seconds(k);
            }
        });
        return best;
    }

    /// The name of the schedule the model picks for p ranks (on one node) and n bytes (the first of equally cheap
    /// ones, in the order of candidate_names); with a profile, each model is first scaled by its measured ratio.
    [[nodiscard]] std::string_view choose(int p, std::size_t n_bytes, const cost_constants& k,
                                          const automatic_profile* profile = nullptr) const {
        return choose(level_shape::one_node(p), n_bytes, k, profile);
    }
    /// The same on ranks of a node layout: what a group on a communicator with this layout picks.
    [[nodiscard]] std::string_view choose(const node_layout& layout, std::size_t n_bytes, const cost_constants& k,
                                          const automatic_profile* profile = nullptr) const {
        return choose(level_shape::of(layout), n_bytes, k, profile);
    }
    [[nodiscard]] std::string_view choose(const level_shape& shape, std::size_t n_bytes, const cost_constants& k,
                                          const automatic_profile* profile = nullptr) const {
        return candidate_names[static_cast<std::size_t>(choose_index(shape, n_bytes, k, profile))];
    }

    /// The candidates in the order choose() weighs them (hierarchical only on two levels, native last).
    static constexpr std::array<std::string_view, automatic_profile::candidates> candidate_names =
        detail::candidate_set::names;

    template <communicator C, floating_element T>
    void run(transport<C>& t, std::span<T> data, reduce_op op) const {
        if (t.size() <= 1) return;
        pick_plan plan = look_up(t.state(), &t.comm(), t.size(), data.size_bytes(), true);
        if (plan.pick < 0) return calibrate_and_run(t, data, op);
        if (plan.online == nullptr) return candidates_.run(plan.pick, t, data, op);
        run_reranked(t, data, op, plan);
    }

    /// The profile measured on a communicator (group::state()), or null before the first automatic call or
    /// after group::set_constants().
    template <communicator C>
    [[nodiscard]] static std::shared_ptr<automatic_profile> measured_profile(shared_state<C>& state) {
        std::lock_guard lock(state.m);
        return state.slots.find(detail::automatic_profile_slot);
    }

    /// Writes what this automatic (and its copies) decided, or what load_state() gave it, as a versioned,
    /// checksummed blob (allreduce/automatic/state.hpp); empty decisions before the first call.
    void save_state(std::vector<std::byte>& out) const {
        detail::automatic_state s;
        {
            std::lock_guard lock(record_->m);
            s.constants = record_->constants;
            if (record_->profile) s.profile = *record_->profile;
        }
        detail::encode_automatic_state(s, out);
    }
    /// Reads a blob of save_state(); the next call installs its decisions in its group instead of measuring, so
    /// the same calls pick the same schedules. Throws corrupt_message_error (and changes nothing) when the blob is
    /// truncated, damaged, foreign or from a newer format. Every rank must load the same blob.
    void load_state(std::span<const std::byte> blob) {
        detail::automatic_state s = detail::decode_automatic_state(blob);
        if (s.constants) s.constants->validate();
        std::lock_guard lock(record_->m);
        record_->constants = s.constants;
        record_->profile = s.profile ? std::make_shared<const automatic_profile>(*s.profile) : nullptr;
        record_->known.store(false, std::memory_order_relaxed);
        record_->pending.store(true, std::memory_order_release);
    }

    /// The schedule the last call of n_bytes on t took, asked after such a call (so nothing is measured); empty
    /// when no such call was made yet. For reports of what carried the data. With rerank, calls of one size may
    /// take different schedules over time (the same on every rank in each call).
    template <communicator C>
    [[nodiscard]] std::string_view chosen(transport<C>& t, std::size_t n_bytes) const {
        const int pick = look_up(t.state(), static_cast<C*>(nullptr), t.size(), n_bytes, false).pick;
        return pick < 0 ? std::string_view{} : candidate_names[static_cast<std::size_t>(pick)];
    }

    /// The online ranking of calls of n_bytes on t as it stands (the agreed estimates, the current pick), or
    /// nothing before the first re-ranked call of that size. For reports and tests.
    template <communicator C>
    [[nodiscard]] std::optional<detail::online_ranking::standing> ranking(transport<C>& t, std::size_t n_bytes) const {
        return ranking(t.state(), t.size(), n_bytes);
    }
    /// The same, asked of a group's state (group::state()) and size, outside any call.
    template <communicator C>
    [[nodiscard]] std::optional<detail::online_ranking::standing> ranking(shared_state<C>& state, int p,
                                                                          std::size_t n_bytes) const {
        return look_up(state, static_cast<C*>(nullptr), p, n_bytes, false).standing;
    }

private:
    using memo_type = detail::decision_memo<options_type>;

    /// What a call runs: the candidate (-1: measure first) and, when the size is re-ranked, its ranking and this
    /// call's step in it. `memo` keeps the ranking alive through the call where this thread's view of the group's
    /// slots (hot_view) may not.
    struct pick_plan {
        int pick = -1;
        detail::online_ranking* online = nullptr;
        detail::online_ranking::step step{};
        std::shared_ptr<detail::decision_memo_slot> memo;  // null where this thread's view of the slots holds it
        std::optional<detail::online_ranking::standing> standing;  // when asked without planning
    };

    [[nodiscard]] detail::rerank_settings rerank_settings() const noexcept {
        return {options_.explore_fraction, options_.switch_margin, options_.max_review_calls};
    }

    /// A call re-ranked online (rerank.hpp): its ranking planned the candidate; this rank times the run when the
    /// step says so, and a call that ends a window agrees the window's times with every rank and updates the
    /// ranking. The time is read on the communicator's clock, as calibration's.
    template <communicator C, floating_element T>
    void run_reranked(transport<C>& t, std::span<T> data, reduce_op op, const pick_plan& plan) const {
        const auto seconds_since = [&t](clock_source::time_point a) {
            return std::chrono::duration<double>(now_on(t.comm()) - a).count();
        };
        if (plan.step.timed) {
            const auto start = now_on(t.comm());
            candidates_.run(plan.pick, t, data, op);
            plan.online->note(plan.pick, seconds_since(start));
        } else {
            candidates_.run(plan.pick, t, data, op);
        }
        if (!plan.step.review) return;
        const detail::review_summary mine = plan.online->summary();
        const auto agreement_start = now_on(t.comm());
        const detail::review_summary agreed = detail::agree_review_on_call(t, candidates_.small_schedule(), mine);
        const double agreement_s = seconds_since(agreement_start);
        std::lock_guard lock(t.state().m);
        plan.online->review(agreed, rerank_settings(), agreement_s);
    }

    /// The model's time of each candidate on ranks of `shape` and n bytes, each scaled by its measured ratio when
    /// there is a profile; -1 for a candidate that cannot run here (native without a native all-reduce,
    /// hierarchical on one level).
    template <communicator C>
    [[nodiscard]] detail::online_ranking::times predicted_times(const level_shape& shape, std::size_t n_bytes,
                                                                const cost_constants& k,
                                                                const automatic_profile* profile) const {
        detail::online_ranking::times out;
        out.fill(-1.0);
        candidates_.visit(shape, k, [&](int index, const auto& s) {
            out[static_cast<std::size_t>(index)] =
                std::max(detail::modelled_seconds(index, s, shape, n_bytes, k, profile), 0.0);
        });
        if constexpr (!has_native_allreduce<C>::value) out.back() = -1.0;
        return out;
    }

    /// What a remembered choice gives a call (`planning`: the call about to run, which takes its step in the
    /// size's ranking) or a question about the last call (chosen(), ranking()). Called with the state's mutex held.
    [[nodiscard]] pick_plan settle(detail::decision<options_type>& d, std::shared_ptr<detail::decision_memo_slot> memo,
                                   bool planning) const {
        pick_plan out;
        out.pick = d.pick;
        if (!options_.rerank || !d.online) return out;
        if (!planning) {
            out.pick = d.online->last();
            out.standing = d.online->view();
            return out;
        }
        out.step = d.online->plan(rerank_settings());
        out.pick = out.step.pick;
        out.online = d.online.get();
        out.memo = std::move(memo);
        return out;
    }

    /// The candidate for this call without measuring: a call of a size seen before costs one lock of the group's
    /// state and a scan of the remembered choices (where its online ranking also plans its step); pick -1 when
    /// this call must measure first (nothing measured yet, or the call is larger than the probes so far).
    /// `comm`: the group's communicator in a call (which reads the node layout on first use), null outside one.
    template <communicator C>
    [[nodiscard]] pick_plan look_up(shared_state<C>& state, C* comm, int p, std::size_t n_bytes, bool planning) const {
        if constexpr (exposes_native_handle<C>)
            static_assert(has_native_allreduce<C>::value,
                          "hitch::allreduce::automatic on a communicator with a native handle (comm::mpi) also weighs "
                          "its native all-reduce: #include \"hitch/allreduce/native.hpp\" (and link hitch::mpi)");
        if (record_->pending.load(std::memory_order_acquire)) install_loaded(state);
        if (planning && record_->known.load(std::memory_order_acquire))
            if (pick_plan fast; recent_choice(state, p, n_bytes, fast)) return fast;
        cost_constants k;
        std::shared_ptr<automatic_profile> profile;
        std::shared_ptr<automatic_profile> measured;  // the group's profile, when these options use one
        {
            std::lock_guard lock(state.m);
            detail::hot_slots& hot = detail::hot_view(state.slots);
            if (options_.constants) {
                k = *options_.constants;
            } else {
                if (!state.constants) return {};
                k = *state.constants;
                if (hot.measured) {
                    if (hot.measured->outgrown_by(n_bytes)) return {};
                    if (!record_->known.load(std::memory_order_acquire)) profile = hot.measured;
                }
            }
            if (hot.memo) {
                auto* const memo = static_cast<memo_type*>(hot.memo.get());
                if (auto* const d = memo->find(options_, p, n_bytes, k, hot.measured.get())) {
                    if (!record_->known.load(std::memory_order_acquire)) record_->note(k, profile);
                    hot.keep_recent({record_.get(), record_->generation, p, n_bytes,
                                     memo->generation.load(std::memory_order_acquire), d});
                    return settle(*d, hot.memo, planning);
                }
            }
            measured = hot.measured;
        }
        if (!options_.constants && !profile) profile = measured_profile(state);
        record_->note(k, profile);
        return remembered_choice(state, comm, p, n_bytes, k, options_.constants ? nullptr : profile.get(), planning);
    }

    /// A call's fast path: the choice this thread found for this automatic and size in the last calls, while
    /// nothing it depends on changed since (the group's slots, and so its constants and profile; the memo; this
    /// automatic's record), planned without the group state's mutex: only the group's calls, one at a time, plan
    /// and review a ranking, and what reports read of it (online_ranking::view) is safe beside plan(). False when
    /// the call must look its choice up.
    template <communicator C>
    [[nodiscard]] bool recent_choice(shared_state<C>& state, int p, std::size_t n_bytes, pick_plan& out) const {
        detail::hot_slots& hot = detail::hot_view(state.slots);
        if (!hot.memo) return false;
        auto* const memo = static_cast<memo_type*>(hot.memo.get());
        void* const found = hot.find_recent(record_.get(), record_->generation, p, n_bytes,
                                            memo->generation.load(std::memory_order_acquire));
        if (found == nullptr) return false;
        // No reference is taken (an atomic increment and decrement per call): this thread's view holds the memo,
        // and nothing in the call refreshes it (its candidates and its review use no automatic).
        out = settle(*static_cast<detail::decision<options_type>*>(found), nullptr, true);
        return true;
    }

    /// The pick of a call whose size is not remembered yet: weighed now, and remembered (with a new online
    /// ranking when automatic re-ranks) when a call is about to run it.
    template <communicator C>
    [[nodiscard]] pick_plan remembered_choice(shared_state<C>& state, C* comm, int p, std::size_t n_bytes,
                                              const cost_constants& k, const automatic_profile* profile,
                                              bool planning) const {
        auto slot = state.slots.get_or_make(
            detail::automatic_decisions_slot,
            []() -> std::shared_ptr<detail::decision_memo_slot> { return std::make_shared<memo_type>(); });
        auto* const memo = static_cast<memo_type*>(slot.get());
        {
            std::lock_guard lock(state.m);
            if (auto* const d = memo->find(options_, p, n_bytes, k, profile)) return settle(*d, slot, planning);
        }
        const level_shape shape = detail::levels_of(state, comm, p)->shape;
        const int pick = choose_index(shape, n_bytes, k, profile);
        if (!planning) {
            pick_plan out;
            out.pick = pick;
            return out;
        }
        std::unique_ptr<detail::online_ranking> online;
        if (options_.rerank)
            online = std::make_unique<detail::online_ranking>(predicted_times<C>(shape, n_bytes, k, profile), pick);
        std::lock_guard lock(state.m);
        detail::decision<options_type>& d = memo->remember({options_, p, n_bytes, k, profile, pick, std::move(online)});
        return settle(d, std::move(slot), planning);
    }

    /// This call measures first (see the file comment): in a transport of its own (a call number the group
    /// reserves inside this call), under its own deadline and budget; then it runs its all-reduce in another,
    /// with the caller's whole deadline starting now.
    template <communicator C, floating_element T>
    void calibrate_and_run(transport<C>& t, std::span<T> data, reduce_op op) const {
        const seconds_f caller = t.limit().waited() + (t.limit().when() - now_on(t.comm()));
        try {
            detail::reserved_call(t, detail::calibration_slot, seconds_f(options_.calibration_timeout_s),
                                  [&](transport<C>& probe) { measure(probe, t.state(), data.size_bytes()); });
        } catch (const timeout_error& e) {
            throw timeout_error(
                "hitch::allreduce::automatic: calibration",
                detail::concat(e.what(), " (calibration_timeout_s = ", options_.calibration_timeout_s, " s)"),
                e.waited());
        }
        const int pick = look_up(t.state(), &t.comm(), t.size(), data.size_bytes(), false).pick;
        if (pick < 0) throw config_error("hitch::allreduce::automatic: calibration left nothing to decide with");
        detail::reserved_call(t, detail::after_calibration_slot, caller,
                              [&](transport<C>& call) { candidates_.run(pick, call, data, op); });
    }

    /// Measures (collective over t's communicator) what a call of n_bytes needs and keeps it in `state`: the
    /// constants and the first probes when nothing is measured yet, else the larger probes up to n_bytes.
    template <communicator C>
    void measure(transport<C>& t, shared_state<C>& state, std::size_t n_bytes) const {
        const auto budget_end = now_on(t.comm()) + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                       seconds_f(options_.calibration_budget_s));
        std::optional<cost_constants> known;
        {
            std::lock_guard lock(state.m);
            known = state.constants;
        }
        const auto levels = detail::levels_of(state, &t.comm(), t.size());
        const level_shape& shape = levels->shape;
        const cost_constants k = known ? *known : detail::measure_constants(t, levels->layout);
        std::shared_ptr<automatic_profile> base = known ? measured_profile(state) : nullptr;
        if (!base) base = std::make_shared<automatic_profile>();
        const int upto = std::max(known ? 0 : automatic_profile::first_probes, base->probes_for(n_bytes));
        const std::vector<int> timed = detail::candidate_set::timed<C>(shape);
        auto prof = std::make_shared<automatic_profile>(detail::time_probes(
            t, *base, upto, timed, budget_end,
            [&](int c, std::span<float> probe) { candidates_.run(c, t, probe, reduce_op::sum); },
            [&](std::size_t bytes) {
                double s = 0;
                candidates_.visit(shape, k, [&](int c, const auto& schedule) {
                    if (std::find(timed.begin(), timed.end(), c) != timed.end())
                        s += cost_on(schedule, shape, bytes, k).seconds(k);
                });
                return s;
            }));
        std::lock_guard lock(state.m);
        if (!state.constants) state.constants = k;
        state.slots.put(detail::automatic_profile_slot, std::move(prof));
    }

    /// Puts a loaded state into the group (once): its constants and profile replace whatever the group held, and
    /// the choices remembered from those are dropped.
    template <communicator C>
    void install_loaded(shared_state<C>& state) const {
        std::optional<cost_constants> k;
        std::shared_ptr<const automatic_profile> p;
        {
            std::lock_guard lock(record_->m);
            if (!record_->pending.load(std::memory_order_relaxed)) return;
            k = record_->constants;
            p = record_->profile;
            record_->pending.store(false, std::memory_order_release);
            record_->known.store(k.has_value(), std::memory_order_release);
        }
        if (!k) return;  // saved before any call: measure as usual
        std::lock_guard lock(state.m);
        state.constants = *k;
        if (p)
            state.slots.put(detail::automatic_profile_slot, std::make_shared<automatic_profile>(*p));
        else
            state.slots.erase(detail::automatic_profile_slot);
        state.slots.erase(detail::automatic_decisions_slot);
    }

    /// Index into candidate_names of the cheapest candidate (the first of equally cheap ones).
    [[nodiscard]] int choose_index(const level_shape& shape, std::size_t n_bytes, const cost_constants& k,
                                   const automatic_profile* profile) const {
        int best = 0;
        double best_s = -1;
        candidates_.visit(shape, k, [&](int index, const auto& s) {
            const double c = detail::modelled_seconds(index, s, shape, n_bytes, k, profile);
            if (best_s < 0 || c < best_s) {
                best = index;
                best_s = c;
            }
        });
        return best;
    }

    options_type options_{};
    detail::candidate_set candidates_{};
    detail::record_handle record_;
};

static_assert(schedule_for<automatic, comm::local>,
              "hitch::allreduce::automatic must model hitch::allreduce_schedule on comm::local");

}  // namespace hitch::allreduce
