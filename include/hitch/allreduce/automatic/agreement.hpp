#pragma once
// How automatic's ranks come to the same decisions: every measurement is agreed before it is used (the maximum
// over ranks: preemption only ever adds time, and the slowest rank bounds a collective), and every decision to
// measure more or to stop is taken by all ranks together. Each function is collective over `comm`.

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include "hitch/allreduce/automatic/profile.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/comm/agree.hpp"

namespace hitch::allreduce::detail {

/// Every rank's constants, reduced to the maximum of each.
template <class C>
[[nodiscard]] cost_constants agree_constants(C& comm, const cost_constants& mine) {
    cost_constants k = mine;
    for (const cost_constants& o : comm::allgather_value(comm, mine)) {
        k.alpha_s = std::max(k.alpha_s, o.alpha_s);
        k.beta_s_per_byte = std::max(k.beta_s_per_byte, o.beta_s_per_byte);
        k.gamma_s_per_byte = std::max(k.gamma_s_per_byte, o.gamma_s_per_byte);
        k.native_alpha_s = std::max(k.native_alpha_s, o.native_alpha_s);
        k.native_beta_s_per_byte = std::max(k.native_beta_s_per_byte, o.native_beta_s_per_byte);
        k.inter_alpha_s = std::max(k.inter_alpha_s, o.inter_alpha_s);
        k.inter_beta_s_per_byte = std::max(k.inter_beta_s_per_byte, o.inter_beta_s_per_byte);
    }
    return k;
}

/// Every rank's profile, reduced to the maximum of each time. The probe sizes, the count measured and the budget
/// flag are taken from rank 0 (they come from agreed decisions, so they are the same everywhere already).
template <class C>
[[nodiscard]] automatic_profile agree_profile(C& comm, const automatic_profile& mine) {
    const std::vector<automatic_profile> all = comm::allgather_value(comm, mine);
    automatic_profile prof = all.front();
    for (const automatic_profile& o : all)
        for (std::size_t c = 0; c < prof.seconds.size(); ++c)
            for (std::size_t i = 0; i < prof.seconds[c].size(); ++i)
                prof.seconds[c][i] = std::max(prof.seconds[c][i], o.seconds[c][i]);
    return prof;
}

/// What a rank brings to a review of a call size's online ranking (allreduce/automatic/rerank.hpp): the median of
/// its own times of each candidate since the last review (0: not run), and how long its fastest review's
/// all-gather took. No padding: ranks send it as bytes.
struct review_summary {
    std::array<double, automatic_profile::candidates> median{};
    double agreement_s = 0;
};
static_assert(std::is_trivially_copyable_v<review_summary> &&
                  sizeof(review_summary) == sizeof(double) * (automatic_profile::candidates + 1),
              "review_summary is sent as bytes: it must have no padding");

/// Every rank's review summary, reduced to the maximum of each field (the slowest rank bounds a collective), by a
/// small all-reduce with `schedule` on a call's own transport: the same path as the calls it reviews (shared memory
/// where they have it), where an all-gather of point-to-point messages waited out a time slice on a busy host.
template <communicator C, class Schedule>
[[nodiscard]] review_summary agree_review_on_call(transport<C>& t, const Schedule& schedule,
                                                  const review_summary& mine) {
    constexpr std::size_t n = automatic_profile::candidates;
    std::array<double, n + 1> v{};
    std::copy(mine.median.begin(), mine.median.end(), v.begin());
    v[n] = mine.agreement_s;
    schedule.run(t, std::span<double>(v), reduce_op::max);
    review_summary agreed;
    std::copy(v.begin(), v.begin() + n, agreed.median.begin());
    agreed.agreement_s = v[n];
    return agreed;
}

/// True on every rank when every rank says yes.
template <class C>
[[nodiscard]] bool agree_all(C& comm, bool mine) {
    return !comm::any_of(comm, !mine);
}

}  // namespace hitch::allreduce::detail
