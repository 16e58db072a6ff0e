#pragma once
// lr::warmup<S>: gradual warm-up in front of any schedule (Goyal et al. 2017, "Accurate, Large Minibatch SGD:
// Training ImageNet in 1 Hour", section 2.2): the rate grows by the same amount every step, from start_lr at step
// 0 to the wrapped schedule's value at the end of the warm-up, and follows the wrapped schedule from then on
// (which keeps counting from step 0, as in the paper: its milestones are not shifted).
//
//   W = round(epochs * steps_per_epoch) (at least 1 step)
//   lr(t) = start + (inner(W) - start) * t / W     for t < W
//   lr(t) = inner(t)                               for t >= W
//
// Goyal et al.: batch kn with the linearly scaled rate k * eta, warm-up over 5 epochs from eta:
//   lr::warmup sched(lr::multi_step({.base = k * eta, .milestones = {30, 60, 80}}), {.epochs = 5, .start_lr = eta});

#include <cmath>
#include <cstdint>
#include <utility>

#include "hitch/core/options.hpp"
#include "hitch/optim/lr/constant.hpp"
#include "hitch/optim/lr/schedule.hpp"

namespace hitch::lr {

struct warmup_options {
    /// The length of the warm-up in epochs; must be > 0 (a warm-up of zero length is a configuration mistake).
    double epochs = 5;
    /// The rate at step 0, >= 0.
    double start_lr = 0.0;
    void validate() const {
        option_validator("hitch::lr::warmup").positive("epochs", epochs).non_negative("start_lr", start_lr);
    }
};

template <schedule S>
class warmup {
public:
    using options_type = warmup_options;

    warmup(S inner, const options_type& o) : inner_(std::move(inner)), o_(o) { o_.validate(); }

    /// The number of warm-up steps for a given epoch length.
    [[nodiscard]] std::uint64_t warmup_steps(std::uint64_t steps_per_epoch) const {
        (void)detail::epochs(0, steps_per_epoch, "hitch::lr::warmup");
        const double w = std::round(o_.epochs * static_cast<double>(steps_per_epoch));
        return w < 1.0 ? 1 : static_cast<std::uint64_t>(w);
    }

    [[nodiscard]] double operator()(std::uint64_t step, std::uint64_t steps_per_epoch) const {
        const std::uint64_t w = warmup_steps(steps_per_epoch);
        if (step >= w) return inner_(step, steps_per_epoch);
        const double target = inner_(w, steps_per_epoch);
        return o_.start_lr + (target - o_.start_lr) * static_cast<double>(step) / static_cast<double>(w);
    }

    [[nodiscard]] const S& inner() const noexcept { return inner_; }

private:
    S inner_;
    options_type o_;
};

}  // namespace hitch::lr
