#pragma once
// Where and how automatic measures: in transports of their own inside the call that measures (each with its own
// call number and deadline, apart from the caller's), timing the candidates at the probe sizes within a time
// budget that every rank spends the same way.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "hitch/allreduce/automatic/agreement.hpp"
#include "hitch/allreduce/automatic/profile.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/allreduce/tuning.hpp"
#include "hitch/core/deadline.hpp"

namespace hitch::allreduce::detail {

/// Call numbers a group gives each call's transport: the call's own, then two that automatic may use inside that
/// call (calibration, then the call's all-reduce after it). Transports take call number sequence * stride, so
/// the reserved ones are distinct from every other call's and ordered between this call's and the next: the
/// staged path's pipes and the message tags keep calls apart by these numbers.
inline constexpr std::uint64_t sequence_stride = 3;
inline constexpr std::uint64_t calibration_slot = 1;
inline constexpr std::uint64_t after_calibration_slot = 2;

/// Runs `body(transport&)` in a transport of its own inside t's call (one of the reserved call numbers, `slot`),
/// on the same communicator, path and shared state, every blocking step bounded by `timeout` from now.
template <communicator C, class Body>
void reserved_call(transport<C>& t, std::uint64_t slot, seconds_f timeout, Body&& body) {
    t.comm().set_timeout(timeout);
    transport<C> r(t.comm(), t.sequence() + slot, deadline_for(t.comm(), timeout), t.shared_memory(), t.state());
    r.set_agreed(t.agreed());
    body(r);
}

/// `base` with the candidates timed at the probes from base.measured up to `upto` (collective; the result is the
/// same on every rank). `which` lists the candidates to time; `run(c, span)` runs candidate c once on the span;
/// `model(bytes)` is the modelled time of one run of each of them (one round). The budget is spent the same way on
/// every rank: before a probe's uncounted round, all ranks decide together whether it fits (predicted from the previous
/// probe's round, scaled by the model); after it, they agree on the slowest rank's round time and the least budget
/// left, and each takes as many counted rounds as fit (at most the tuned best-of-N). The first probe cut short ends the
/// probes.
template <communicator C, class Run, class Model>
[[nodiscard]] automatic_profile time_probes(transport<C>& t, const automatic_profile& base, int upto,
                                            std::span<const int> which,
                                            std::chrono::steady_clock::time_point budget_end, Run&& run,
                                            Model&& model) {
    const auto left = [&] { return std::chrono::duration<double>(budget_end - now_on(t.comm())).count(); };
    automatic_profile prof = base;
    const std::size_t held = t.scratch_mark();
    std::span<float> data = t.template scratch<float>(automatic_profile::probe_bytes(upto - 1) / sizeof(float));
    std::fill(data.begin(), data.end(), 1e-30f);
    double last_round = 0, last_model = 0;
    int i = base.measured;
    for (; i < upto; ++i) {
        const std::size_t bytes = automatic_profile::probe_bytes(i);
        const double modelled = model(bytes);
        const double predicted = last_model > 0 ? last_round * modelled / last_model : modelled;
        if (!agree_all(t.comm(), predicted <= left())) break;
        const std::span<float> probe = data.subspan(0, bytes / sizeof(float));
        auto& times = prof.seconds;
        // One round of every candidate: interleaved, so a burst of load does not fall on one candidate only.
        const auto round = [&](bool counted, bool first) {
            for (const int c : which) {
                const std::size_t mark = t.scratch_mark();
                const auto start = now_on(t.comm());
                run(c, probe);
                const double s = std::chrono::duration<double>(now_on(t.comm()) - start).count();
                t.release_scratch(mark);  // the next run reuses this memory, as later calls of a size do
                double& slot = times[static_cast<std::size_t>(c)][static_cast<std::size_t>(i)];
                if (counted) slot = first ? s : std::min(slot, s);  // preemption only ever adds time
            }
        };
        // The uncounted round pays the first touches of buffers and connections.
        const auto warm_start = now_on(t.comm());
        round(false, false);
        struct spent {
            double round_s;
            double left_s;
        };
        double round_s = 0, left_s = 1e300;
        for (const spent& o : comm::allgather_value(
                 t.comm(), spent{std::chrono::duration<double>(now_on(t.comm()) - warm_start).count(), left()})) {
            round_s = std::max(round_s, o.round_s);
            left_s = std::min(left_s, o.left_s);
        }
        const int wanted = tuning::probe_repeats(bytes);
        const int rounds =
            round_s > 0 ? static_cast<int>(std::min<double>(wanted, std::floor(left_s / round_s))) : wanted;
        if (rounds < 1) break;
        prof.bytes[static_cast<std::size_t>(i)] = static_cast<double>(bytes);
        for (int r = 0; r < rounds; ++r) round(true, r == 0);
        last_round = round_s;
        last_model = modelled;
        if (rounds < wanted) {
            ++i;
            break;
        }
    }
    if (i < upto) prof.stopped_by_budget = 1;
    t.release_scratch(held);
    prof.measured = i;
    return agree_profile(t.comm(), prof);
}

}  // namespace hitch::allreduce::detail
