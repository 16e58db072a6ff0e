#pragma once
// sync::backup_workers: synchronous SGD with backup workers (Chen, Pan, Monga, Bengio, Jozefowicz 2016,
// "Revisiting distributed synchronous SGD"). Of N + b workers, each step's update averages the first N gradients
// computed on the current parameters to arrive; the b late ones are dropped (and counted), and their workers
// pull the new parameters and go on. A straggler then costs a step only when more than b workers are slow at
// once, and every applied gradient is fresh (staleness 0). b = 0 is hard sync.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/core/error.hpp"
#include "hitch/core/options.hpp"
#include "hitch/sync/detail/server_policy.hpp"
#include "hitch/sync/server/options.hpp"

namespace hitch::sync {

/// The options of sync::backup_workers.
struct backup_workers_options {
    server_options server{};
    /// b: gradients per step that may be dropped (fewer than the workers).
    std::uint32_t backups = 1;

    void validate() const {
        server.validate();
        option_validator("hitch::sync::backup_workers")
            .closed("backups", backups, std::uint32_t{0}, std::uint32_t{1} << 20);
    }
};

class backup_workers : public detail::push_pull_policy<backup_workers, backup_workers_options> {
public:
    static constexpr std::string_view name = "backup_workers";

    using push_pull_policy::push_pull_policy;

    [[nodiscard]] sync::server_rule server_rule(int workers) const {
        if (options_.backups >= static_cast<std::uint32_t>(workers))
            throw config_error(hitch::detail::concat("hitch::sync::backup_workers: option backups = ", options_.backups,
                                                     " must be fewer than the ", workers, " workers"));
        sync::server_rule r;
        r.gradients_per_update = static_cast<std::uint32_t>(workers) - options_.backups;
        r.drop_stale = true;
        return r;
    }
};

static_assert(check_sync_policy<backup_workers>() && server_policy<backup_workers>,
              "hitch::sync::backup_workers must model hitch::sync_policy");

}  // namespace hitch::sync
