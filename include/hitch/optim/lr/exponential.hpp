#pragma once
// lr::exponential: the rate shrinks by gamma per epoch, continuously or once per whole epoch (staircase).
//
//   lr(e) = base * gamma^e        (staircase: base * gamma^floor(e))

#include <cmath>
#include <cstdint>

#include "hitch/core/options.hpp"
#include "hitch/optim/lr/schedule.hpp"

namespace hitch::lr {

class exponential {
public:
    struct options_type {
        double base = 0.1;
        /// Factor per epoch, in (0, 1].
        double gamma = 0.95;
        bool staircase = false;
        void validate() const {
            option_validator("hitch::lr::exponential").non_negative("base", base).open_closed("gamma", gamma, 0.0, 1.0);
        }
    };
    explicit exponential(const options_type& o) : o_(o) { o_.validate(); }
    [[nodiscard]] double operator()(std::uint64_t step, std::uint64_t steps_per_epoch) const {
        const double e = detail::epochs(step, steps_per_epoch, "hitch::lr::exponential");
        return o_.base * std::pow(o_.gamma, o_.staircase ? std::floor(e) : e);
    }

private:
    options_type o_;
};

static_assert(schedule<exponential>, "hitch::lr::exponential must model hitch::lr::schedule");

}  // namespace hitch::lr
