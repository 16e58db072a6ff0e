#pragma once
// lr::polynomial: polynomial decay to a final rate at epoch T; the LARS papers use power 2 (You et al. 2017).
//
//   lr(e) = final + (base - final) * (1 - min(e, T) / T)^power

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "hitch/core/options.hpp"
#include "hitch/optim/lr/schedule.hpp"

namespace hitch::lr {

class polynomial {
public:
    struct options_type {
        double base = 0.1;
        /// T, > 0.
        double total_epochs = 90;
        /// > 0; 1 is linear decay, 2 the LARS recipe.
        double power = 2.0;
        /// In [0, base].
        double final_lr = 0.0;
        void validate() const {
            option_validator("hitch::lr::polynomial")
                .non_negative("base", base)
                .positive("total_epochs", total_epochs)
                .positive("power", power)
                .closed("final_lr", final_lr, 0.0, base);
        }
    };
    explicit polynomial(const options_type& o) : o_(o) { o_.validate(); }
    [[nodiscard]] double operator()(std::uint64_t step, std::uint64_t steps_per_epoch) const {
        const double e = std::min(detail::epochs(step, steps_per_epoch, "hitch::lr::polynomial"), o_.total_epochs);
        return o_.final_lr + (o_.base - o_.final_lr) * std::pow(1.0 - e / o_.total_epochs, o_.power);
    }

private:
    options_type o_;
};

static_assert(schedule<polynomial>, "hitch::lr::polynomial must model hitch::lr::schedule");

}  // namespace hitch::lr
