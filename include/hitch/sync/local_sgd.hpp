#pragma once
// sync::local_sgd: periodic parameter averaging (model averaging; Zinkevich et al. 2010, "Parallelized Stochastic
// Gradient Descent"; local SGD, Stich 2019, Lin et al. 2020 "Don't Use Large Mini-Batches, Use Local SGD"). Each
// replica steps on its own gradients; every k steps the parameters — and, optionally, the optimizer state such as
// momentum — are averaged across ranks. Communication drops by a factor of k; between averages replicas drift
// apart, so staleness is the number of local steps since the last average. k = 1 without optimizer-state
// averaging equals hard sync for plain SGD (the average of p updated replicas is one update by the mean gradient).

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/concepts/sync_policy.hpp"
#include "hitch/core/options.hpp"
#include "hitch/sync/detail/state.hpp"

namespace hitch::sync {

class local_sgd {
public:
    struct options_type {
        /// Local steps between parameter averages, >= 1.
        std::uint64_t period = 8;
        /// Also average the optimizer state (momentum, Adam's moments) at each average.
        bool average_optimizer_state = false;

        void validate() const {
            option_validator("hitch::sync::local_sgd")
                .closed("period", period, std::uint64_t{1}, std::uint64_t{1} << 32);
        }
    };
    static constexpr std::string_view name = "local_sgd";
    static constexpr bool exchanges_gradients = false;

    local_sgd() = default;
    explicit local_sgd(const options_type& options) : options_(options) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    template <step_context Ctx>
    step_result step(Ctx& ctx) {
        if (!ctx.check_local_gradients()) return {false, false, since_average_};
        ctx.apply_optimizer();
        if (++since_average_ < options_.period) return {true, false, since_average_};
        ctx.average_parameters(options_.average_optimizer_state);
        since_average_ = 0;
        return {true, true, 0};
    }
    [[nodiscard]] std::uint64_t staleness() const noexcept { return since_average_; }
    void save_state(std::vector<std::byte>& blob) const {
        const std::array<std::uint64_t, 1> v{since_average_};
        detail::save_counters(blob, name, v);
    }
    void load_state(std::span<const std::byte> blob) {
        std::array<std::uint64_t, 1> v{};
        detail::load_counters(blob, name, v);
        if (v[0] >= options_.period)
            throw mismatch_error(hitch::detail::concat("hitch::sync::local_sgd: the saved state is ", v[0],
                                                       " steps into a period of ", options_.period));
        since_average_ = v[0];
    }

private:
    options_type options_{};
    std::uint64_t since_average_ = 0;
};

static_assert(check_sync_policy<local_sgd>() && sync_policy<local_sgd>,
              "hitch::sync::local_sgd must model hitch::sync_policy");

}  // namespace hitch::sync
