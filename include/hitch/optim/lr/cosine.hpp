#pragma once
// lr::cosine: cosine annealing without restarts (Loshchilov and Hutter 2017, SGDR).
//
//   lr(e) = final + (base - final) * (1 + cos(pi * min(e, T) / T)) / 2

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

#include "hitch/core/options.hpp"
#include "hitch/optim/lr/schedule.hpp"

namespace hitch::lr {

class cosine {
public:
    struct options_type {
        double base = 0.1;
        /// T, the epochs from base to final, > 0.
        double total_epochs = 90;
        /// The rate at and after T, in [0, base].
        double final_lr = 0.0;
        void validate() const {
            option_validator("hitch::lr::cosine")
                .non_negative("base", base)
                .positive("total_epochs", total_epochs)
                .closed("final_lr", final_lr, 0.0, base);
        }
    };
    explicit cosine(const options_type& o) : o_(o) { o_.validate(); }
    [[nodiscard]] double operator()(std::uint64_t step, std::uint64_t steps_per_epoch) const {
        const double e = std::min(detail::epochs(step, steps_per_epoch, "hitch::lr::cosine"), o_.total_epochs);
        return o_.final_lr + (o_.base - o_.final_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * e / o_.total_epochs));
    }

private:
    options_type o_;
};

static_assert(schedule<cosine>, "hitch::lr::cosine must model hitch::lr::schedule");

}  // namespace hitch::lr
