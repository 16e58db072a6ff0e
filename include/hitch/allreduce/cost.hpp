#pragma once
// The alpha-beta-gamma cost model (Hockney 1994; as used by Thakur, Rabenseifner & Gropp 2005): sending a message
// of m bytes costs alpha + m * beta, combining m bytes costs m * gamma. A schedule's cost for p ranks and n bytes is
//
//     T(p, n) = latency_terms * alpha + bandwidth_bytes * beta + reduced_bytes * gamma
//
// where the three coefficients are counted along the critical path. Each schedule also states what the busiest
// rank sends (messages and bytes), which tests check against an instrumented communicator.
//
// Two levels (ranks on several nodes, cost_constants::inter_*): cost_on(schedule, shape, n, k) is a schedule's
// cost on a node layout. A schedule that knows the layout (hierarchical) says its cost itself: its reduce and
// broadcast inside each node at the intra constants, the leaders' all-reduce at the inter constants. A flat
// schedule pays the inter constants for every message round once its ranks span more than one node: each of its
// rounds runs on every rank at once and ends with its slowest message, and in every round of ring, recursive
// doubling, rabenseifner, the trees and the parameter server some message crosses nodes once the ranks span
// two (on layouts where some rounds stay inside nodes this is an upper bound). Recursive doubling and
// rabenseifner state their own cost on a layout instead: their rounds pair every rank r with r ^ mask at once, so
// on nodes of g ranks numbered in blocks (g a power of two) the rounds with mask < g stay inside the nodes, and in
// each of the others all g ranks of a node cross through its nic together, g times a message's bytes at the
// between-node beta (on simulated nodes of 8, rabenseifner of 4 MiB over 64 ranks: 9.42 ms of virtual time, 9.45
// modelled so, 1.39 without the sharing). On other layouts they count every round across nodes with that
// sharing, an upper bound. The ring states its cost on a layout too: on nodes of contiguous ranks a chunk crosses
// between nodes on N of every p hops and no round waits for another, so N/p of its latency is between nodes and
// its bytes go at the between-node beta (1.62 ms modelled against 1.33 simulated there: its segments overlap
// latency and bandwidth, which the model adds). The trees and the parameter server keep the rule above. automatic's
// measured profile corrects what remains. The communicator's own all-reduce (native) keeps its measured fit.

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hitch/allreduce/tuning.hpp"
#include "hitch/core/cost.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/core/options.hpp"

namespace hitch::allreduce {

using hitch::cost_constants;
using hitch::cost_estimate;

/// The communicator's own all-reduce as measured (cost_constants::native_*), in alpha and beta units so that
/// seconds(k) reproduces native_alpha + n * native_beta.
/// The library's algorithm is not known, so the bytes sent are the least any all-reduce of n bytes over p ranks
/// must send, 2(p-1)/p n (what MPICH's Rabenseifner and ring send; its recursive doubling sends more).
[[nodiscard]] inline cost_estimate native_cost(int p, std::size_t n_bytes, const cost_constants& k) noexcept {
    cost_estimate c;
    if (p > 1) c.sent_bytes = 2.0 * (p - 1) / p * static_cast<double>(n_bytes);
    if (!k.has_native() || k.alpha_s <= 0 || k.beta_s_per_byte <= 0) return c;
    c.latency_terms = k.native_alpha_s / k.alpha_s;
    c.bandwidth_bytes = static_cast<double>(n_bytes) * k.native_beta_s_per_byte / k.beta_s_per_byte;
    return c;
}

/// What the cost model needs of a node layout: the ranks, the nodes, the largest node, whether each node's ranks
/// are numbered one after the other (contiguous), and whether the nodes are blocks besides (every node holds
/// largest_node ranks: rank r on the (r / g)-th node).
struct level_shape {
    int ranks = 1;
    int nodes = 1;
    int largest_node = 1;
    bool blocks = true;
    bool contiguous = true;

    /// p ranks on one node (one level of network: what the schedules' cost(p, n, k) assumes).
    [[nodiscard]] static level_shape one_node(int p) noexcept { return {p, 1, p, true, true}; }
    [[nodiscard]] static level_shape of(const node_layout& layout) {
        level_shape s;
        s.ranks = static_cast<int>(layout.node_of_rank.size());
        s.nodes = layout.nodes;
        std::vector<int> per_node(static_cast<std::size_t>(layout.nodes > 0 ? layout.nodes : 0), 0);
        s.largest_node = 0;
        for (int node : layout.node_of_rank)
            s.largest_node = std::max(s.largest_node, ++per_node.at(std::size_t(node)));
        // Contiguous: the node changes between neighbouring ranks exactly nodes - 1 times.
        int changes = 0;
        for (std::size_t r = 1; r < layout.node_of_rank.size(); ++r)
            changes += layout.node_of_rank[r] != layout.node_of_rank[r - 1] ? 1 : 0;
        s.contiguous = changes == std::max(s.nodes - 1, 0);
        const int g = std::max(s.largest_node, 1);
        s.blocks = s.contiguous && s.nodes * g == s.ranks;
        return s;
    }
    /// Ranks on more than one node, and more than one rank on some node: a schedule by node has two levels.
    [[nodiscard]] bool two_level() const noexcept { return nodes > 1 && largest_node > 1; }
    /// One node, or nodes that are blocks of a power-of-two g: a round between every rank r and r ^ mask at once
    /// (recursive doubling's and halving's rounds) then stays inside the nodes when mask < g, and crosses else.
    [[nodiscard]] bool power_of_two_blocks() const noexcept {
        return nodes <= 1 || (blocks && largest_node > 0 && std::has_single_bit(static_cast<unsigned>(largest_node)));
    }
    [[nodiscard]] bool pairs_inside_nodes(int mask) const noexcept {
        return nodes <= 1 || (power_of_two_blocks() && mask < largest_node);
    }

    friend bool operator==(const level_shape&, const level_shape&) = default;
};

/// `c` with every message round paid at the between-node constants (a flat schedule whose ranks span nodes), the
/// bytes of each `sharing` times (that many ranks of a node crossing through its nic at once).
[[nodiscard]] inline cost_estimate across_nodes(cost_estimate c, double sharing = 1.0) noexcept {
    c.inter_latency_terms += c.latency_terms;
    c.inter_bandwidth_bytes += c.bandwidth_bytes * sharing;
    c.latency_terms = 0;
    c.bandwidth_bytes = 0;
    return c;
}

/// A schedule that states its own cost on a node layout (hierarchical).
template <class S>
concept knows_levels = requires(const S& s, const level_shape& shape, std::size_t n, const cost_constants& k) {
    { s.cost(shape, n, k) } -> std::same_as<cost_estimate>;
};

/// Schedule s's cost for n bytes on ranks of the given shape (see the file comment for the rule).
template <class S>
[[nodiscard]] cost_estimate cost_on(const S& s, const level_shape& shape, std::size_t n_bytes,
                                    const cost_constants& k) {
    if constexpr (knows_levels<S>) {
        return s.cost(shape, n_bytes, k);
    } else {
        const cost_estimate c = s.cost(shape.ranks, n_bytes, k);
        return shape.nodes > 1 ? across_nodes(c) : c;
    }
}

namespace detail {

using hitch::detail::concat;

/// floor(log2(p)) for p >= 1.
[[nodiscard]] constexpr int floor_log2(int p) noexcept {
    int l = 0;
    while ((2 << l) <= p) ++l;
    return l;
}
/// The largest power of two <= p (p >= 1).
[[nodiscard]] constexpr int floor_pow2(int p) noexcept { return 1 << floor_log2(p); }
/// ceil(log2(p)) for p >= 1.
[[nodiscard]] constexpr int ceil_log2(int p) noexcept { return floor_pow2(p) == p ? floor_log2(p) : floor_log2(p) + 1; }

/// Number of segments of at most `segment` bytes that `bytes` is cut into (0 for 0 bytes).
[[nodiscard]] constexpr double segments(double bytes, double segment) noexcept {
    if (bytes <= 0) return 0;
    return std::ceil(bytes / segment);
}

}  // namespace detail
}  // namespace hitch::allreduce
