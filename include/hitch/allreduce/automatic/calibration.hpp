#pragma once
// Where and how automatic measures: a calibration context (a private split of the group's communicator with its
// own shared state and call numbers, so calibration runs under its own deadline without touching the caller's
// transport) and the timing of the candidates at the probe sizes within a time budget.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

#include "hitch/allreduce/automatic/agreement.hpp"
#include "hitch/allreduce/automatic/profile.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/allreduce/tuning.hpp"
#include "hitch/core/deadline.hpp"

namespace hitch::allreduce::detail {

/// A private communicator for one calibration. Collective: every rank of `parent` makes one. Its shared-memory
/// path is the caller's (pipes of its own when the caller is on the staged path), so the probes time what later
/// calls will use; its call numbers start at 0, apart from the group's.
template <communicator C>
class calibration_context {
public:
    calibration_context(C& parent, bool shared_memory, bool staged)
        : comm_(parent.split(0, parent.rank())), shared_memory_(shared_memory) {
        if (staged) attach_pipes(comm_, state_);
    }
    calibration_context(const calibration_context&) = delete;
    calibration_context& operator=(const calibration_context&) = delete;

    /// Runs `body(transport&)` as the next call in this context, every blocking step of it bounded by `timeout`
    /// from now.
    template <class Body>
    void call(seconds_f timeout, bool agreed, Body&& body) {
        comm_.set_timeout(timeout);
        transport<C> t(comm_, next_call_++, deadline(timeout), shared_memory_, state_);
        t.set_agreed(agreed);
        body(t);
    }

private:
    C comm_;
    shared_state<C> state_;
    std::uint64_t next_call_ = 0;
    bool shared_memory_ = false;
};

/// `base` with the candidates timed at the probes from base.measured up to `upto` (collective; the result is the
/// same on every rank). Before each probe all ranks decide together whether it fits in what is left of the budget
/// (its time predicted from the previous probe's, scaled by the model); the first that does not ends the probes.
/// `run(c, span)` runs candidate c once on the span; `model(bytes)` is the modelled time of one run of every
/// candidate.
template <communicator C, class Run, class Model>
[[nodiscard]] automatic_profile time_probes(transport<C>& t, const automatic_profile& base, int upto, int candidates,
                                            std::chrono::steady_clock::time_point budget_end, Run&& run,
                                            Model&& model) {
    using clock = std::chrono::steady_clock;
    automatic_profile prof = base;
    const std::size_t held = t.scratch_mark();
    std::span<float> data = t.template scratch<float>(automatic_profile::probe_bytes(upto - 1) / sizeof(float));
    std::fill(data.begin(), data.end(), 1e-30f);
    double last_seconds = 0, last_model = 0;
    int i = base.measured;
    for (; i < upto; ++i) {
        const std::size_t bytes = automatic_profile::probe_bytes(i);
        const int repeats = tuning::probe_repeats(bytes);
        const double modelled = model(bytes) * (repeats + 1);
        const double predicted = last_model > 0 ? last_seconds * modelled / last_model : modelled;
        const bool fits = clock::now() + std::chrono::duration_cast<clock::duration>(seconds_f(predicted)) <= budget_end;
        if (!agree_all(t.comm(), fits)) {
            prof.stopped_by_budget = 1;
            break;
        }
        const auto probe_start = clock::now();
        prof.bytes[static_cast<std::size_t>(i)] = static_cast<double>(bytes);
        const std::span<float> probe = data.subspan(0, bytes / sizeof(float));
        // The minimum of several runs (preemption by other processes only ever adds time), after one run of each
        // that is not counted (first touches of buffers and connections); interleaved, so a burst of load does not
        // fall on one candidate only.
        for (int rep = -1; rep < repeats; ++rep) {
            for (int c = 0; c < candidates; ++c) {
                const std::size_t mark = t.scratch_mark();
                const auto start = clock::now();
                run(c, probe);
                const double s = std::chrono::duration<double>(clock::now() - start).count();
                t.release_scratch(mark);  // the next run reuses this memory, as later calls of a size do
                double& slot = prof.seconds[static_cast<std::size_t>(c)][static_cast<std::size_t>(i)];
                if (rep >= 0) slot = rep == 0 ? s : std::min(slot, s);
            }
        }
        last_seconds = std::chrono::duration<double>(clock::now() - probe_start).count();
        last_model = modelled;
    }
    t.release_scratch(held);
    prof.measured = i;
    return agree_profile(t.comm(), prof);
}

}  // namespace hitch::allreduce::detail
