#pragma once
// lr::multi_step: multiply the rate by gamma at each milestone epoch (Goyal et al. 2017: 0.1 at epochs 30, 60, 80).
//
//   lr(e) = base * gamma^(number of milestones m with e >= m)

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hitch/core/options.hpp"
#include "hitch/optim/lr/schedule.hpp"

namespace hitch::lr {

class multi_step {
public:
    struct options_type {
        double base = 0.1;
        /// Epochs, strictly increasing, each > 0.
        std::vector<double> milestones = {30, 60, 80};
        double gamma = 0.1;
        void validate() const {
            const option_validator v("hitch::lr::multi_step");
            v.non_negative("base", base).open_closed("gamma", gamma, 0.0, 1.0);
            for (std::size_t i = 0; i < milestones.size(); ++i) {
                v.positive("milestones[" + std::to_string(i) + "]", milestones[i]);
                if (i > 0)
                    v.require(milestones[i] > milestones[i - 1], "milestones[" + std::to_string(i) + "]", milestones[i],
                              "(milestones[i-1], inf): milestones must increase");
            }
        }
    };
    explicit multi_step(options_type o) : o_(std::move(o)) { o_.validate(); }
    [[nodiscard]] double operator()(std::uint64_t step, std::uint64_t steps_per_epoch) const {
        const double e = detail::epochs(step, steps_per_epoch, "hitch::lr::multi_step");
        int passed = 0;
        for (double m : o_.milestones)
            if (e >= m) ++passed;
        return o_.base * std::pow(o_.gamma, passed);
    }

private:
    options_type o_;
};

static_assert(schedule<multi_step>, "hitch::lr::multi_step must model hitch::lr::schedule");

}  // namespace hitch::lr
