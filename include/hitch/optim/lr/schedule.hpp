#pragma once
// hitch::lr: learning-rate and batch-size schedules. Every schedule is a pure function of (step, steps per epoch)
// — it keeps no state — so a run resumed at step t gets exactly the value an uninterrupted run had at step t.
//
//   hitch::lr::schedule<S>:  s(std::uint64_t step, std::uint64_t steps_per_epoch) -> double, const
//
// Positions are measured in epochs, e = step / steps_per_epoch (a real number), so milestones, cycle lengths
// and warm-up lengths are given in epochs (fractions allowed) and do not change when the batch size — and with it
// steps_per_epoch — does. Values are computed in double; optimizers take the rate as float.

#include <concepts>
#include <cstdint>

#include "hitch/core/error.hpp"

namespace hitch::lr {

/// A learning-rate schedule: a const call (step, steps_per_epoch) -> rate.
template <class S>
concept schedule = std::copy_constructible<S> && requires(const S& s, std::uint64_t step, std::uint64_t spe) {
    { s(step, spe) } -> std::convertible_to<double>;
};

namespace detail {

using hitch::detail::concat;

/// The position in epochs; throws config_error when steps_per_epoch is 0.
[[nodiscard]] inline double epochs(std::uint64_t step, std::uint64_t steps_per_epoch, const char* who) {
    if (steps_per_epoch == 0)
        throw config_error(concat(who, ": steps_per_epoch = 0 is outside the allowed range [1, inf)"));
    return static_cast<double>(step) / static_cast<double>(steps_per_epoch);
}

}  // namespace detail
}  // namespace hitch::lr
