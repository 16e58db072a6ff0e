#pragma once
// lr::constant: the same rate at every step.

#include <cstdint>

#include "hitch/core/options.hpp"
#include "hitch/optim/lr/schedule.hpp"

namespace hitch::lr {

class constant {
public:
    struct options_type {
        double value = 0.1;
        void validate() const { option_validator("hitch::lr::constant").non_negative("value", value); }
    };
    explicit constant(const options_type& o) : o_(o) { o_.validate(); }
    [[nodiscard]] double operator()(std::uint64_t step, std::uint64_t steps_per_epoch) const {
        (void)detail::epochs(step, steps_per_epoch, "hitch::lr::constant");
        return o_.value;
    }

private:
    options_type o_;
};

static_assert(schedule<constant>, "hitch::lr::constant must model hitch::lr::schedule");

}  // namespace hitch::lr
