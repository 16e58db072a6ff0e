#pragma once
// What to do with a gradient that holds an inf or a NaN, and how every rank comes to the same answer.
//
// With a loss scaler (amp::loss_scaler) an overflow is expected now and then: the step is skipped and the scale
// backs off. Without one, a non-finite gradient is a bug or a diverging run, and gradient_guard applies a chosen
// policy: throw nonfinite_gradient_error naming the step, the rank, the layer and the element, or skip the step.
// Either way the ranks first agree (an all-gather of each rank's first bad element), so they all throw or all
// skip together, and replicas never diverge.
//
//   hitch::amp::gradient_guard guard(comm, {.policy = hitch::amp::nonfinite_policy::skip_step});
//   if (guard.check(opt.layers(), step)) opt.step(lr);

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "hitch/comm/agree.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/core/tensor.hpp"

namespace hitch::amp {

/// Thrown (on every rank) when a gradient is not finite and the policy is throw_error.
class nonfinite_gradient_error : public error {
public:
    using error::error;
};

enum class nonfinite_policy {
    /// Throw nonfinite_gradient_error on every rank, naming the step, rank, layer and element.
    throw_error,
    /// Skip the step on every rank (parameters and optimizer state untouched).
    skip_step,
};

/// The "communicator" of a run with one process: there is nobody to agree with.
struct single_process {};

/// What amp's agreement accepts: a hitch::communicator or single_process.
template <class C>
concept agreement_group = communicator<C> || std::same_as<C, single_process>;

namespace detail {

using hitch::detail::concat;

/// True on every rank when `flag` is true on any.
template <agreement_group C>
[[nodiscard]] bool any_rank(C& group, bool flag) {
    if constexpr (std::same_as<C, single_process>)
        return flag;
    else
        return comm::any_of(group, flag);
}

template <agreement_group C>
[[nodiscard]] int rank_of(const C& group) {
    if constexpr (std::same_as<C, single_process>)
        return 0;
    else
        return group.rank();
}

inline constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();

/// The index of the first non-finite element of x, or npos. Scans in parallel; the answer does not depend on it.
template <floating_element T>
[[nodiscard]] std::size_t first_nonfinite(tensor_view<const T> x, const parallel_options& exec = {}) {
    const std::size_t n = x.size();
    if (n == 0) return npos;
    const std::size_t chunks = chunk_count(n, exec);
    std::vector<std::size_t> first(chunks, npos);
    const T* p = x.data();
    thread_pool& pool = exec.pool != nullptr ? *exec.pool : thread_pool::shared();
    pool.run(chunks, [&](std::size_t c) {
        const auto [b, e] = static_chunk(n, chunks, c, exec.align);
        // A cheap vectorisable test first; the index only when something is wrong.
        bool bad = false;
        for (std::size_t i = b; i < e; ++i) bad |= !is_finite(p[i]);
        if (!bad) return;
        for (std::size_t i = b; i < e; ++i)
            if (!is_finite(p[i])) {
                first[c] = i;
                return;
            }
    });
    for (std::size_t f : first)
        if (f != npos) return f;
    return npos;
}

/// Where a rank found its first non-finite gradient (layer == -1: none).
struct nonfinite_report {
    std::int64_t layer = -1;
    std::int64_t element = -1;
    float value = 0.0f;
};

/// Gathers every rank's report; every rank gets them all, in rank order.
template <agreement_group C>
[[nodiscard]] std::vector<nonfinite_report> gather_reports(C& group, const nonfinite_report& mine) {
    if constexpr (std::same_as<C, single_process>)
        return {mine};
    else
        return comm::allgather_value(group, mine);
}

/// "step 12: rank 1 layer 3 ('fc.weight') element 7 = nan"
template <class NameOf>
[[nodiscard]] std::string describe(const std::vector<nonfinite_report>& reports, std::uint64_t step, bool ranks,
                                   NameOf&& name_of) {
    std::string s = concat("non-finite gradient at step ", step, ":");
    for (std::size_t r = 0; r < reports.size(); ++r) {
        const nonfinite_report& x = reports[r];
        if (!(x.layer >= 0)) continue;  // not `x.layer < 0`: nvcc reads `layer <` as a template
        s += ranks ? concat(" rank ", r, " layer ", x.layer) : concat(" layer ", x.layer);
        s += concat(" ('", name_of(static_cast<std::size_t>(x.layer)), "') element ", x.element, " = ", x.value, ";");
    }
    if (!s.empty() && s.back() == ';') s.pop_back();
    return s;
}

}  // namespace detail

struct gradient_guard_options {
    nonfinite_policy policy = nonfinite_policy::throw_error;
    parallel_options execution{};
    void validate() const { execution.validate(); }
};

/// Checks gradients for inf/NaN before a step and applies a nonfinite_policy, consistently on every rank.
template <agreement_group C = single_process>
class gradient_guard {
public:
    using options_type = gradient_guard_options;

    gradient_guard(C& group, const options_type& options) : group_(&group), options_(options) { options_.validate(); }
    explicit gradient_guard(const options_type& options = {})
        requires std::same_as<C, single_process>
        : group_(&own_), options_(options) {
        options_.validate();
    }
    gradient_guard(const gradient_guard&) = delete;
    gradient_guard& operator=(const gradient_guard&) = delete;

    /// Collective when C is a communicator. True: every gradient on every rank is finite, apply the step.
    /// False: some rank saw a non-finite gradient and the policy is skip_step. Otherwise throws
    /// nonfinite_gradient_error on every rank.
    bool check(std::span<const hitch::layer> layers, std::uint64_t step) {
        detail::nonfinite_report mine;
        for (std::size_t k = 0; k < layers.size() && !(mine.layer >= 0); ++k) {
            const std::size_t i = detail::first_nonfinite(layers[k].grads.as_const(), options_.execution);
            if (i != detail::npos)
                mine = {static_cast<std::int64_t>(k), static_cast<std::int64_t>(i), layers[k].grads[i]};
        }
        return check_found(mine, layers, step);
    }
    /// check() with this rank's first non-finite gradient already found, e.g. by a device's kernels when the
    /// gradients are not in host memory (`mine.layer == -1`: none). Collective as check().
    bool check_found(const detail::nonfinite_report& mine, std::span<const hitch::layer> layers, std::uint64_t step) {
        const auto reports = detail::gather_reports(*group_, mine);
        const bool any = std::any_of(reports.begin(), reports.end(), [](const auto& r) { return r.layer >= 0; });
        if (!any) return true;
        if (options_.policy == nonfinite_policy::skip_step) {
            ++skipped_;
            return false;
        }
        throw nonfinite_gradient_error(
            "hitch::amp::gradient_guard: " +
            detail::describe(reports, step, !std::same_as<C, single_process>,
                             [&](std::size_t k) { return k < layers.size() ? layers[k].name : std::string("?"); }));
    }

    /// Steps skipped so far.
    [[nodiscard]] std::uint64_t skipped() const noexcept { return skipped_; }

private:
    single_process own_{};
    C* group_;
    options_type options_;
    std::uint64_t skipped_ = 0;
};

}  // namespace hitch::amp
