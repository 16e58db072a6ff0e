#pragma once
// sync::soft: n-softsync with a staleness-dependent learning rate (Zhang, Gupta, Lian, Liu, IJCAI 2016, "Staleness-
// aware async-SGD for distributed deep learning"). Workers push gradients to the parameter server and pull the
// parameters back without waiting for each other; the server averages every c gradients into one update, each
// gradient scaled by 1 / max(tau, 1) where tau is its staleness (the server's version minus the version it was
// computed on), which is the paper's learning rate lambda_0 / tau with lambda_0 the schedule's rate.
//
// c = 1 is fully asynchronous; c = the number of workers with no scaling and the deterministic order is hard
// sync's update (every worker's pull waits until the update its gradient joined is applied). Zhang et al. find
// the scaled form converges like hard sync for c up to the number of workers with far less waiting.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/core/options.hpp"
#include "hitch/sync/detail/server_policy.hpp"
#include "hitch/sync/server/options.hpp"

namespace hitch::sync {

/// The options of sync::soft.
struct soft_options {
    server_options server{};
    /// Gradients averaged into one update (c); 0: as many as there are workers.
    std::uint32_t gradients_per_update = 1;
    /// Scale each gradient by 1 / max(staleness, 1).
    bool scale_by_staleness = true;

    void validate() const {
        server.validate();
        option_validator("hitch::sync::soft")
            .closed("gradients_per_update", gradients_per_update, std::uint32_t{0}, std::uint32_t{1} << 20);
    }
};

class soft : public detail::push_pull_policy<soft, soft_options> {
public:
    static constexpr std::string_view name = "soft";

    using push_pull_policy::push_pull_policy;

    [[nodiscard]] sync::server_rule server_rule(int /*workers*/) const {
        sync::server_rule r;
        r.gradients_per_update = options_.gradients_per_update;
        r.scale_by_staleness = options_.scale_by_staleness;
        return r;
    }
};

static_assert(check_sync_policy<soft>() && server_policy<soft>, "hitch::sync::soft must model hitch::sync_policy");

}  // namespace hitch::sync
