#pragma once
// hitch::comm::detail node emulation: k "nodes" of consecutive ranks on one machine, so the multi-node paths
// (shared memory only inside a node, messages between nodes, two-level schedules) can be tried and tested on one
// host. A rank's node is the pair (real node, emulated block of its world rank): two ranks share a node only when
// they share both. Also what a communicator counts of the traffic that leaves its node.

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/core/node_layout.hpp"
#include "hitch/core/options.hpp"

namespace hitch::comm {

/// What one rank sent to ranks on other nodes (real or emulated): payload bytes and messages.
struct cross_node_traffic {
    std::uint64_t bytes = 0;
    std::uint64_t messages = 0;
    friend bool operator==(const cross_node_traffic&, const cross_node_traffic&) = default;
};

namespace detail {

/// HITCH_EMULATE_NODES as a count of nodes; 0 when unset or empty.
[[nodiscard]] inline int emulated_nodes_from_environment() {
    const char* text = std::getenv("HITCH_EMULATE_NODES");
    if (text == nullptr || *text == '\0') return 0;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    const option_validator check("hitch: environment variable");
    if (end == text || *end != '\0')
        check.fail("HITCH_EMULATE_NODES", std::string(text), "a whole number of nodes >= 1");
    if (value < 1 || value > (1L << 20)) check.fail("HITCH_EMULATE_NODES", value, "[1, world size] nodes");
    return static_cast<int>(value);
}

/// The number of emulated nodes for a world of `world_size` ranks: mpi_options::emulate_nodes when set (> 0), else
/// HITCH_EMULATE_NODES, else 0 (no emulation). More nodes than ranks is a config_error naming where it came from.
[[nodiscard]] inline int resolve_emulated_nodes(int option, int world_size) {
    const bool from_option = option > 0;
    const int k = from_option ? option : emulated_nodes_from_environment();
    if (from_option)
        option_validator("hitch::comm::mpi_options").closed("emulate_nodes", k, 0, world_size);
    else
        option_validator("hitch: environment variable").closed("HITCH_EMULATE_NODES", k, 0, world_size);
    return k;
}

/// The emulated node of rank `r` of `p` split into `k` blocks of consecutive ranks, as even as possible: the first
/// p mod k blocks hold one rank more (p = 5, k = 3: 2-2-1).
[[nodiscard]] inline int emulated_node(int r, int p, int k) noexcept {
    if (k <= 1) return 0;
    const int base = p / k;
    const int extra = p % k;
    const int in_big = extra * (base + 1);
    return r < in_big ? r / (base + 1) : extra + (r - in_big) / base;
}

/// Where a rank runs: its real node (named by the lowest world rank on it) and its emulated block (0 without
/// emulation). Two ranks share a node when their keys are equal.
struct node_key {
    int real = 0;
    int emulated = 0;
    friend bool operator==(const node_key&, const node_key&) = default;
};

/// The layout of ranks whose keys are `keys` (rank order): nodes numbered in the order of their lowest rank.
[[nodiscard]] inline node_layout layout_from_keys(const std::vector<node_key>& keys) {
    node_layout layout;
    layout.node_of_rank.resize(keys.size());
    std::vector<node_key> seen;
    for (std::size_t r = 0; r < keys.size(); ++r) {
        std::size_t id = 0;
        while (id < seen.size() && !(seen[id] == keys[r])) ++id;
        if (id == seen.size()) seen.push_back(keys[r]);
        layout.node_of_rank[r] = static_cast<int>(id);
    }
    layout.nodes = static_cast<int>(seen.size());
    return layout;
}

/// Counts of traffic across nodes, shared by a communicator and every communicator split from it (so a rank's
/// count includes what its groups and schedules sent on their own sub-communicators). Relaxed atomics: a group's
/// progress thread sends while the user reads.
struct traffic_counter {
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<std::uint64_t> messages{0};

    void add(std::uint64_t n) noexcept {
        bytes.fetch_add(n, std::memory_order_relaxed);
        messages.fetch_add(1, std::memory_order_relaxed);
    }
    [[nodiscard]] cross_node_traffic read() const noexcept {
        return {bytes.load(std::memory_order_relaxed), messages.load(std::memory_order_relaxed)};
    }
    void reset() noexcept {
        bytes.store(0, std::memory_order_relaxed);
        messages.store(0, std::memory_order_relaxed);
    }

private:
    static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
};

}  // namespace detail
}  // namespace hitch::comm
