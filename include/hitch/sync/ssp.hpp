#pragma once
// sync::ssp: stale-synchronous parallel (Ho, Cipar, Cui, Lee, Kim, Gibbons, Gibson, Ganger, Xing, NIPS 2013, "More
// effective distributed ML via a stale synchronous parallel parameter server"). Each worker's clock is the number
// of gradients it has pushed; the server applies every gradient as it arrives, and a worker that is more than s
// clocks ahead of the slowest worker still training waits for its pull until the slowest catches up. s = 0 is
// bulk-synchronous; a large s approaches fully asynchronous SGD. The bound keeps the staleness of what a worker
// reads to at most s clocks of the others' updates, which is what the paper's convergence bound needs, while
// fast workers run ahead of a straggler by up to s steps instead of waiting on it every step.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/core/options.hpp"
#include "hitch/sync/detail/server_policy.hpp"
#include "hitch/sync/server/options.hpp"

namespace hitch::sync {

/// The options of sync::ssp.
struct ssp_options {
    server_options server{};
    /// s: how many clocks a worker may run ahead of the slowest one.
    std::uint64_t staleness_bound = 3;

    void validate() const {
        server.validate();
        option_validator("hitch::sync::ssp")
            .closed("staleness_bound", staleness_bound, std::uint64_t{0}, std::uint64_t{1} << 40);
    }
};

class ssp : public detail::push_pull_policy<ssp, ssp_options> {
public:
    static constexpr std::string_view name = "ssp";

    using push_pull_policy::push_pull_policy;

    [[nodiscard]] sync::server_rule server_rule(int /*workers*/) const {
        sync::server_rule r;
        r.gradients_per_update = 1;
        r.staleness_bound = static_cast<std::int64_t>(options_.staleness_bound);
        return r;
    }
};

static_assert(check_sync_policy<ssp>() && server_policy<ssp>, "hitch::sync::ssp must model hitch::sync_policy");

}  // namespace hitch::sync
