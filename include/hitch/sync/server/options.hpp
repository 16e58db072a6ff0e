#pragma once
// What a parameter-server policy tells the runtime (hitch/sync/server/): where the servers run and how the
// parameters are cut into shards (server_options, an option of every such policy), and how a server turns the
// requests it receives into updates (server_rule, fixed by the policy). server_policy<P> is the contract between
// a policy and data_parallel, which builds the runtime for it.

#include <concepts>
#include <cstdint>
#include <string_view>

#include "hitch/concepts/sync_policy.hpp"
#include "hitch/core/options.hpp"

namespace hitch::sync {

/// Where the server roles run.
enum class server_placement : std::uint8_t {
    /// Every rank is a worker and also serves one shard on a thread of its own (as BytePS's co-located servers).
    colocated,
    /// The last `dedicated_servers` ranks serve only; the others are workers (as a classic parameter server).
    dedicated,
};

/// How the parameters are cut into shards, one per server.
enum class shard_by : std::uint8_t {
    /// Whole layers, balanced by bytes (largest first onto the least loaded server). Layer-wise optimizers (LARS,
    /// LAMB) see whole layers, as on one rank.
    layer,
    /// Equal byte ranges of the concatenated parameters; a layer may be cut between servers, and then each piece
    /// is a layer of its own for the optimizer (a layer-wise trust ratio is then per piece).
    range,
};

[[nodiscard]] constexpr std::string_view to_string(server_placement p) noexcept {
    return p == server_placement::colocated ? "colocated" : "dedicated";
}
[[nodiscard]] constexpr std::string_view to_string(shard_by s) noexcept {
    return s == shard_by::layer ? "layer" : "range";
}

/// The runtime's options, part of every parameter-server policy's options.
struct server_options {
    server_placement placement = server_placement::colocated;
    /// With placement dedicated: how many of the last ranks serve only (at least 1, fewer than the ranks).
    int dedicated_servers = 1;
    shard_by sharding = shard_by::layer;
    /// Every server takes its workers' requests in a fixed round-robin order instead of the order of arrival, so
    /// a run is reproducible bit for bit (and a checkpoint resumes exactly). Workers then wait for each other.
    bool deterministic = false;

    void validate() const {
        option_validator("hitch::sync::server_options").closed("dedicated_servers", dedicated_servers, 1, 1 << 20);
    }
};

/// How a server applies what it receives. Fixed by each policy (see the policy headers); the runtime runs it.
struct server_rule {
    /// Workers push gradients (applied with the optimizer), or parameters (elastic averaging).
    bool elastic = false;
    /// Gradients averaged into one update; 0: as many as there are workers still training.
    std::uint32_t gradients_per_update = 1;
    /// Scale each gradient by 1 / max(staleness, 1) (Zhang et al. 2016's staleness-dependent learning rate).
    bool scale_by_staleness = false;
    /// Drop a gradient computed on an older version than the server's (backup workers: the step already had its
    /// quorum).
    bool drop_stale = false;
    /// A worker whose clock is more than this many clocks ahead of the slowest worker's waits for a pull
    /// (stale-synchronous parallel); negative: no bound.
    std::int64_t staleness_bound = -1;
    /// Elasticity: the centre moves by alpha * (worker - centre), the worker by the same amount back.
    double alpha = 0.0;
};

/// A sync policy served by a parameter server: it names its rule (for a number of workers) and placement, says
/// whether its options need the server at all (elastic averaging's synchronous form does not), and steps on a
/// server_context.
template <class P>
concept server_policy = sync_policy<P> && requires(const P& p, int workers) {
    { p.server_rule(workers) } -> std::same_as<server_rule>;
    { p.server() } -> std::convertible_to<const server_options&>;
    { p.needs_server() } -> std::convertible_to<bool>;
};

}  // namespace hitch::sync
