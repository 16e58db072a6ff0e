#pragma once
// lr::one_cycle: the 1cycle policy (Smith 2018, "A disciplined approach to neural network hyper-parameters";
// Smith and Topin 2017, "Super-Convergence"), with the inverse momentum cycle. Defined as torch's OneCycleLR
// so recipes carry over. With T = round(total_epochs * steps_per_epoch) steps, initial = max_lr / div_factor and
// minimum = initial / final_div_factor:
//
//   two phases (default):  steps [0, a]: initial -> max_lr,   momentum max_momentum -> base_momentum
//                          steps [a, T-1]: max_lr -> minimum, momentum base_momentum -> max_momentum
//                          with a = warm_fraction * T - 1
//   three phases (Smith's original shape): [0, a]: initial -> max_lr; [a, b]: max_lr -> initial;
//                          [b, T-1]: initial -> minimum (momentum stays at max_momentum);  b = 2 warm_fraction T - 2
//
// Inside a phase from step s0 to s1, p = (t - s0) / (s1 - s0) and the value goes from v0 to v1 as
//   cosine: v1 + (v0 - v1) * (1 + cos(pi p)) / 2        linear: v0 + (v1 - v0) p
// Steps past T-1 keep the final values. Large rates with low momentum, then small rates with high momentum,
// let networks train in far fewer epochs ("super-convergence").

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

#include "hitch/core/options.hpp"
#include "hitch/optim/lr/schedule.hpp"

namespace hitch::lr {

enum class anneal { cosine, linear };

class one_cycle {
public:
    struct options_type {
        double max_lr = 0.1;
        /// The cycle's length in epochs, > 0.
        double total_epochs = 30;
        /// The share of the cycle spent rising, in (0, 1) ((0, 0.5) with three phases).
        double warm_fraction = 0.3;
        /// initial = max_lr / div_factor, > 0.
        double div_factor = 25.0;
        /// minimum = initial / final_div_factor, > 0.
        double final_div_factor = 1e4;
        bool three_phase = false;
        anneal strategy = anneal::cosine;
        /// Momentum at the rate's peak and at its ends; 0 <= base_momentum <= max_momentum < 1.
        double base_momentum = 0.85;
        double max_momentum = 0.95;

        void validate() const {
            const option_validator v("hitch::lr::one_cycle");
            v.positive("max_lr", max_lr)
                .positive("total_epochs", total_epochs)
                .open("warm_fraction", warm_fraction, 0.0, three_phase ? 0.5 : 1.0)
                .positive("div_factor", div_factor)
                .positive("final_div_factor", final_div_factor)
                .half_open("max_momentum", max_momentum, 0.0, 1.0)
                .closed("base_momentum", base_momentum, 0.0, max_momentum);
        }
    };

    explicit one_cycle(const options_type& o) : o_(o) { o_.validate(); }

    /// The learning rate at `step`.
    [[nodiscard]] double operator()(std::uint64_t step, std::uint64_t steps_per_epoch) const {
        return value(step, steps_per_epoch, true);
    }
    /// The momentum (beta1 for Adam) at `step`: it falls while the rate rises and rises while the rate falls.
    [[nodiscard]] double momentum(std::uint64_t step, std::uint64_t steps_per_epoch) const {
        return value(step, steps_per_epoch, false);
    }
    /// T, the number of steps in the cycle; config_error when a phase would be empty.
    [[nodiscard]] std::uint64_t total_steps(std::uint64_t steps_per_epoch) const {
        (void)detail::epochs(0, steps_per_epoch, "hitch::lr::one_cycle");
        const double t = std::round(o_.total_epochs * static_cast<double>(steps_per_epoch));
        const auto total = static_cast<std::uint64_t>(t);
        const double a = o_.warm_fraction * t - 1.0;
        const double b = o_.three_phase ? 2.0 * o_.warm_fraction * t - 2.0 : t - 1.0;
        if (!(a > 0.0) || !(b > a) || !(t - 1.0 > (o_.three_phase ? b : a)))
            throw config_error(detail::concat("hitch::lr::one_cycle: ", total,
                                              " steps (total_epochs = ", o_.total_epochs, " at ", steps_per_epoch,
                                              " steps per epoch) leave a phase of the cycle empty; use more steps"));
        return total;
    }

private:
    [[nodiscard]] double value(std::uint64_t step, std::uint64_t steps_per_epoch, bool rate) const {
        const double t_total = static_cast<double>(total_steps(steps_per_epoch));
        const double initial = o_.max_lr / o_.div_factor;
        const double minimum = initial / o_.final_div_factor;
        struct phase {
            double end, lr0, lr1, m0, m1;
        };
        const double a = o_.warm_fraction * t_total - 1.0;
        phase phases[3];
        int count = 0;
        if (o_.three_phase) {
            const double b = 2.0 * o_.warm_fraction * t_total - 2.0;
            phases[count++] = {a, initial, o_.max_lr, o_.max_momentum, o_.base_momentum};
            phases[count++] = {b, o_.max_lr, initial, o_.base_momentum, o_.max_momentum};
            phases[count++] = {t_total - 1.0, initial, minimum, o_.max_momentum, o_.max_momentum};
        } else {
            phases[count++] = {a, initial, o_.max_lr, o_.max_momentum, o_.base_momentum};
            phases[count++] = {t_total - 1.0, o_.max_lr, minimum, o_.base_momentum, o_.max_momentum};
        }
        const double t = static_cast<double>(step);
        double start = 0.0;
        for (int i = 0; i < count; ++i) {
            const phase& ph = phases[i];
            if (t <= ph.end || i == count - 1) {
                const double p = std::clamp((t - start) / (ph.end - start), 0.0, 1.0);
                return rate ? interpolate(ph.lr0, ph.lr1, p) : interpolate(ph.m0, ph.m1, p);
            }
            start = ph.end;
        }
        return 0.0;  // not reached: the last phase always answers
    }
    [[nodiscard]] double interpolate(double v0, double v1, double p) const {
        if (o_.strategy == anneal::cosine) return v1 + (v0 - v1) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
        return v0 + (v1 - v0) * p;
    }

    options_type o_;
};

static_assert(schedule<one_cycle>, "hitch::lr::one_cycle must model hitch::lr::schedule");

}  // namespace hitch::lr
