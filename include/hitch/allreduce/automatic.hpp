#pragma once
// hitch::allreduce::automatic: picks a schedule per call from the world size and the byte count with the
// alpha-beta-gamma cost model (hitch/allreduce/cost.hpp), each candidate's prediction corrected by its measured
// time on this communicator: the candidate with the smallest predicted time wins. Candidates: recursive_doubling,
// ring, rabenseifner, binary_tree, double_binary_tree, parameter_server (one shard per rank, which on a shared
// address space reads and writes each element once), and the communicator's own all-reduce (native) where it has
// one and hitch/allreduce/native.hpp is included.
//
// The module (allreduce/automatic/):
//   constants.hpp      measures alpha, beta, gamma (and native's) once per group
//   profile.hpp        the candidates' times at probe sizes 4 KiB-64 MiB, and the prediction they correct
//   calibration.hpp    where calibration runs (its own call number and deadline) and its time budget
//   agreement.hpp      how ranks come to the same measurements and the same decisions
//   decisions.hpp      the choices a group remembers
//   record.hpp         what an automatic and its copies decided, shared between them
//   state.hpp          the decisions as a versioned, checksummed blob (save_state / load_state)
// Tuned constants (probe sizes, best-of-N, budget, deadline) are in hitch/allreduce/tuning.hpp.
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
#include "hitch/allreduce/automatic/constants.hpp"
#include "hitch/allreduce/automatic/decisions.hpp"
#include "hitch/allreduce/automatic/native_candidate.hpp"
#include "hitch/allreduce/automatic/profile.hpp"
#include "hitch/allreduce/automatic/record.hpp"
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

        void validate() const {
            if (constants) constants->validate();
            option_validator("hitch::allreduce::automatic")
                .closed("calibration_budget_s", calibration_budget_s, 0.0, 1e9)
                .open_closed("calibration_timeout_s", calibration_timeout_s, 0.0, 1e9);
            ring.validate();
            recursive_doubling.validate();
            rabenseifner.validate();
            binary_tree.validate();
            double_binary_tree.validate();
            parameter_server.validate();
        }

        friend bool operator==(const options_type&, const options_type&) = default;
    };

    static constexpr std::string_view name = "automatic";

    /// Copies share what they decided (collectives copy the schedule they are given), so save_state() on the
    /// object a trainer keeps sees the decisions of every call made with it.
    automatic() = default;
    explicit automatic(const options_type& o)
        : options_(o),
          ring_(o.ring),
          recursive_doubling_(o.recursive_doubling),
          rabenseifner_(o.rabenseifner),
          binary_tree_(o.binary_tree),
          double_binary_tree_(o.double_binary_tree),
          parameter_server_(o.parameter_server) {
        options_.validate();
    }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    /// The cost of the schedule the model picks.
    [[nodiscard]] cost_estimate cost(int p, std::size_t n_bytes, const cost_constants& k) const {
        cost_estimate best;
        double best_s = -1;
        visit_candidates(k, [&](std::string_view, const auto& s) {
            const cost_estimate c = s.cost(p, n_bytes, k);
            if (best_s < 0 || c.seconds(k) < best_s) {
                best = c;
                best_s = c.seconds(k);
            }
        });
        return best;
    }

    /// The name of the schedule the model picks for p ranks and n bytes (the first of equally cheap ones, in the
    /// order of candidate_names); with a profile, each model is first scaled by its measured ratio.
    [[nodiscard]] std::string_view choose(int p, std::size_t n_bytes, const cost_constants& k,
                                          const automatic_profile* profile = nullptr) const {
        return candidate_names[static_cast<std::size_t>(choose_index(p, n_bytes, k, profile))];
    }

    /// The candidates in the order choose() weighs them (native last).
    static constexpr std::array<std::string_view, automatic_profile::candidates> candidate_names{
        recursive_doubling::name,  ring::name,
        rabenseifner::name,        binary_tree::name,
        double_binary_tree::name,  parameter_server::name,
        std::string_view("native")};

    template <communicator C, floating_element T>
    void run(transport<C>& t, std::span<T> data, reduce_op op) const {
        if (t.size() <= 1) return;
        const int pick = remembered_pick(t, data.size_bytes());
        if (pick >= 0) return run_candidate(pick, t, data, op);
        calibrate_and_run(t, data, op);
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

    /// The schedule a call of n_bytes on t takes, asked after such a call (so nothing is measured); empty when no
    /// such call was made yet. For reports of what carried the data.
    template <communicator C>
    [[nodiscard]] std::string_view chosen(transport<C>& t, std::size_t n_bytes) const {
        const int pick = remembered_pick(t, n_bytes);
        return pick < 0 ? std::string_view{} : candidate_names[static_cast<std::size_t>(pick)];
    }

private:
    using memo_type = detail::decision_memo<options_type>;

    /// The candidate for this call without measuring: a call of a size seen before costs one lock of the group's
    /// state and a scan of the remembered choices; -1 when this call must measure first (nothing measured yet, or
    /// the call is larger than the probes so far).
    template <communicator C>
    [[nodiscard]] int remembered_pick(transport<C>& t, std::size_t n_bytes) const {
        if constexpr (exposes_native_handle<C>)
            static_assert(has_native_allreduce<C>::value,
                          "hitch::allreduce::automatic on a communicator with a native handle (comm::mpi) also weighs "
                          "its native all-reduce: #include \"hitch/allreduce/native.hpp\" (and link hitch::mpi)");
        auto& state = t.state();
        if (record_->pending.load(std::memory_order_acquire)) install_loaded(state);
        cost_constants k;
        std::shared_ptr<automatic_profile> profile;
        std::shared_ptr<automatic_profile> measured;  // the group's profile, when these options use one
        {
            std::lock_guard lock(state.m);
            if (options_.constants) {
                k = *options_.constants;
            } else {
                if (!state.constants) return -1;
                k = *state.constants;
                measured = state.slots.find(detail::automatic_profile_slot);
                if (measured) {
                    if (measured->outgrown_by(n_bytes)) return -1;
                    if (!record_->known.load(std::memory_order_acquire)) profile = measured;
                }
            }
            if (const auto memo = state.slots.find(detail::automatic_decisions_slot)) {
                const int hit =
                    static_cast<const memo_type*>(memo.get())->find(options_, t.size(), n_bytes, k, measured.get());
                if (hit >= 0) {
                    if (!record_->known.load(std::memory_order_acquire)) record_->note(k, profile);
                    return hit;
                }
            }
        }
        if (!options_.constants && !profile) profile = measured_profile(state);
        record_->note(k, profile);
        return remembered_choice(t, n_bytes, k, options_.constants ? nullptr : profile.get());
    }

    template <communicator C>
    [[nodiscard]] int remembered_choice(transport<C>& t, std::size_t n_bytes, const cost_constants& k,
                                        const automatic_profile* profile) const {
        const int p = t.size();
        const auto slot = t.state().slots.get_or_make(
            detail::automatic_decisions_slot,
            []() -> std::shared_ptr<detail::decision_memo_slot> { return std::make_shared<memo_type>(); });
        auto* const memo = static_cast<memo_type*>(slot.get());
        {
            std::lock_guard lock(t.state().m);
            if (const int hit = memo->find(options_, p, n_bytes, k, profile); hit >= 0) return hit;
        }
        const int pick = choose_index(p, n_bytes, k, profile);
        std::lock_guard lock(t.state().m);
        memo->remember({options_, p, n_bytes, k, profile, pick});
        return pick;
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
        const int pick = remembered_pick(t, data.size_bytes());
        if (pick < 0) throw config_error("hitch::allreduce::automatic: calibration left nothing to decide with");
        detail::reserved_call(t, detail::after_calibration_slot, caller,
                              [&](transport<C>& call) { run_candidate(pick, call, data, op); });
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
        const cost_constants k = known ? *known : detail::measure_constants(t);
        std::shared_ptr<automatic_profile> base = known ? measured_profile(state) : nullptr;
        if (!base) base = std::make_shared<automatic_profile>();
        const int upto = std::max(known ? 0 : automatic_profile::first_probes, base->probes_for(n_bytes));
        constexpr int candidates = has_native_allreduce<C>::value ? 7 : 6;
        const int p = t.size();
        auto prof = std::make_shared<automatic_profile>(detail::time_probes(
            t, *base, upto, candidates, budget_end,
            [&](int c, std::span<float> probe) { run_candidate(c, t, probe, reduce_op::sum); },
            [&](std::size_t bytes) {
                double s = 0;
                visit_candidates(
                    k, [&](std::string_view, const auto& schedule) { s += schedule.cost(p, bytes, k).seconds(k); });
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

    template <communicator C, floating_element T>
    void run_candidate(int pick, transport<C>& t, std::span<T> data, reduce_op op) const {
        switch (pick) {
            case 0:
                return recursive_doubling_.run(t, data, op);
            case 1:
                return ring_.run(t, data, op);
            case 2:
                return rabenseifner_.run(t, data, op);
            case 3:
                return binary_tree_.run(t, data, op);
            case 4:
                return double_binary_tree_.run(t, data, op);
            case 5:
                return parameter_server_.run(t, data, op);
            default:
                break;
        }
        if constexpr (has_native_allreduce<C>::value) {
            return typename detail::native_for<C>::type{}.run(t, data, op);
        }
        throw config_error("hitch::allreduce::automatic: the model picked native, which this communicator lacks");
    }

    /// Index into candidate_names of the cheapest candidate (the first of equally cheap ones).
    [[nodiscard]] int choose_index(int p, std::size_t n_bytes, const cost_constants& k,
                                   const automatic_profile* profile) const {
        int best = 0, index = 0;
        double best_s = -1;
        visit_candidates(k, [&](std::string_view, const auto& s) {
            double c = s.cost(p, n_bytes, k).seconds(k);
            if (profile != nullptr) c *= detail::measured_ratio(*profile, index, p, n_bytes, k, s);
            if (best_s < 0 || c < best_s) {
                best = index;
                best_s = c;
            }
            ++index;
        });
        return best;
    }

    template <class F>
    void visit_candidates(const cost_constants& k, F&& f) const {
        f(recursive_doubling::name, recursive_doubling_);
        f(ring::name, ring_);  // before rabenseifner: on a tie (p = 2) the wavefront ring overlaps its two phases
        f(rabenseifner::name, rabenseifner_);
        f(binary_tree::name, binary_tree_);
        f(double_binary_tree::name, double_binary_tree_);
        f(parameter_server::name, parameter_server_);
        if (k.has_native()) f(std::string_view("native"), native_model{});
    }
    /// The native all-reduce as measured.
    struct native_model {
        [[nodiscard]] cost_estimate cost(int p, std::size_t n, const cost_constants& k) const {
            return native_cost(p, n, k);
        }
    };

    options_type options_{};
    ring ring_{};
    recursive_doubling recursive_doubling_{};
    rabenseifner rabenseifner_{};
    binary_tree binary_tree_{};
    double_binary_tree double_binary_tree_{};
    parameter_server parameter_server_{parameter_server::options_type{.servers = 1 << 20}};
    detail::record_handle record_;
};

static_assert(schedule_for<automatic, comm::local>,
              "hitch::allreduce::automatic must model hitch::allreduce_schedule on comm::local");

}  // namespace hitch::allreduce
