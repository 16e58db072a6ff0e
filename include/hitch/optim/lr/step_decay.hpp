#pragma once
// lr::step_decay: multiply the rate by gamma every step_epochs epochs (He et al. 2016: 0.1 every 30 epochs).
//
//   lr(e) = base * gamma^floor(e / step_epochs)

#include <cmath>
#include <cstdint>

#include "hitch/core/options.hpp"
#include "hitch/optim/lr/schedule.hpp"

namespace hitch::lr {

class step_decay {
public:
    struct options_type {
        double base = 0.1;
        double step_epochs = 30;
        double gamma = 0.1;
        void validate() const {
            option_validator("hitch::lr::step_decay")
                .non_negative("base", base)
                .positive("step_epochs", step_epochs)
                .open_closed("gamma", gamma, 0.0, 1.0);
        }
    };
    explicit step_decay(const options_type& o) : o_(o) { o_.validate(); }
    [[nodiscard]] double operator()(std::uint64_t step, std::uint64_t steps_per_epoch) const {
        const double e = detail::epochs(step, steps_per_epoch, "hitch::lr::step_decay");
        return o_.base * std::pow(o_.gamma, std::floor(e / o_.step_epochs));
    }

private:
    options_type o_;
};

static_assert(schedule<step_decay>, "hitch::lr::step_decay must model hitch::lr::schedule");

}  // namespace hitch::lr
