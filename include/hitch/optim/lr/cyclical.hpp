#pragma once
// lr::cyclical: cyclical learning rates (Smith 2015/2017, "Cyclical Learning Rates for Training Neural Networks"),
// the triangular policy and triangular2 (the amplitude halves every cycle). With s = half_cycle_epochs *
// steps_per_epoch steps per half cycle:
//
//   cycle = floor(1 + t / (2 s));   x = |t / s - 2 cycle + 1|
//   lr(t) = base + (max - base) * max(0, 1 - x) * (triangular2 ? 2^-(cycle - 1) : 1)
//
// so the rate is base at t = 0, 2s, 4s ... and max at t = s, 3s, 5s ... Smith suggests a half cycle of 2 to 10
// epochs and finding base and max with a range test.

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "hitch/core/options.hpp"
#include "hitch/optim/lr/schedule.hpp"

namespace hitch::lr {

enum class cycle_mode { triangular, triangular2 };

class cyclical {
public:
    struct options_type {
        double base_lr = 0.001;
        double max_lr = 0.006;
        /// Epochs from base to max, > 0.
        double half_cycle_epochs = 4;
        cycle_mode mode = cycle_mode::triangular;
        void validate() const {
            option_validator("hitch::lr::cyclical")
                .non_negative("base_lr", base_lr)
                .at_least("max_lr", max_lr, base_lr)
                .positive("half_cycle_epochs", half_cycle_epochs);
        }
    };
    explicit cyclical(const options_type& o) : o_(o) { o_.validate(); }
    [[nodiscard]] double operator()(std::uint64_t step, std::uint64_t steps_per_epoch) const {
        (void)detail::epochs(step, steps_per_epoch, "hitch::lr::cyclical");
        const double s = o_.half_cycle_epochs * static_cast<double>(steps_per_epoch);
        const double t = static_cast<double>(step);
        const double cycle = std::floor(1.0 + t / (2.0 * s));
        const double x = std::abs(t / s - 2.0 * cycle + 1.0);
        const double amplitude = o_.mode == cycle_mode::triangular2 ? std::pow(0.5, cycle - 1.0) : 1.0;
        return o_.base_lr + (o_.max_lr - o_.base_lr) * std::max(0.0, 1.0 - x) * amplitude;
    }

private:
    options_type o_;
};

static_assert(schedule<cyclical>, "hitch::lr::cyclical must model hitch::lr::schedule");

}  // namespace hitch::lr
