#pragma once
// The alpha-beta cost of each compressed exchange (exchange_kind), from the codec's message size: what `automatic`
// weighs when a codec's messages cannot be summed by an all-reduce (allreduce/cost.hpp has the same model for the
// schedules). m is the bytes of one rank's message for the whole bucket (the codec's max_message_bytes), n the
// bucket's elements, g the largest node's ranks and N the nodes.
//
//   compressed_ring              2 (p - 1) alpha + 2 (p - 1) / p m beta
//   compressed_halving_doubling  2 log2 p alpha + 2 (p - 1) / p m beta       (p a power of two; else two more
//                                                                              rounds of m for the folded ranks)
//   compressed_hierarchical      2 (g - 1) (alpha + 4 n beta) inside a node, the ring over N leaders between nodes
//   allgather_ring               (p - 1) alpha + (p - 1) m beta
//   sparse_recursive_doubling    sum over rounds i < log2 p of alpha + min(8 n u_i, 4 n) beta, where u_i is the
//                                density of the union of 2^i ranks' selections
//   sparse_hierarchical          (g - 1)(alpha + m beta) inside a node, the recursive doubling over N leaders
//                                starting from unions of g selections, (g - 1)(alpha + the result) back
//
// A sparse set costs 8 bytes an entry (index and value), a dense one 4 bytes an element, and the exchange switches
// to dense once the union passes half the bucket. The model takes the ranks' selections as independent: a union of
// j selections of density d has density 1 - (1 - d)^j. Real gradients overlap more (their large entries share
// indices), so the sparse exchanges move less than modelled; the model errs towards the all-gather, whose bytes do
// not depend on overlap. A flat exchange whose ranks span nodes pays the between-node constants for every round
// (the rule of allreduce/cost.hpp).

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "hitch/allreduce/cost.hpp"
#include "hitch/core/cost.hpp"
#include "hitch/exchange/aggregation.hpp"

namespace hitch::compress {

namespace detail {

/// Bytes of a merged set of density u over n elements: sparse (8 bytes an entry) until that passes the dense form.
[[nodiscard]] inline double merged_bytes(double n, double u) noexcept { return std::min(8.0 * n * u, 4.0 * n); }
/// Density of the union of j independent selections of density d.
[[nodiscard]] inline double union_density(double d, double j) noexcept {
    return 1.0 - std::pow(1.0 - std::clamp(d, 0.0, 1.0), j);
}

/// Recursive doubling over q participants, each starting from a union of `start` selections of density d:
/// latency terms and the bytes on the critical path (the non-power-of-two fold adds a round each way).
[[nodiscard]] inline cost_estimate sparse_doubling_cost(int q, double n, double d, double start) noexcept {
    cost_estimate c;
    if (q <= 1) return c;
    const int levels = allreduce::detail::floor_log2(q);
    const bool folded = allreduce::detail::floor_pow2(q) != q;
    double holds = folded ? 2.0 * start : start;  // selections merged in each set
    if (folded) {
        c.latency_terms += 2;
        c.bandwidth_bytes += merged_bytes(n, union_density(d, start)) + merged_bytes(n, union_density(d, q * start));
    }
    for (int i = 0; i < levels; ++i) {
        const double bytes = merged_bytes(n, union_density(d, holds));
        c.latency_terms += 1;
        c.bandwidth_bytes += bytes;
        c.sent_bytes += bytes;
        c.sent_messages += 1;
        holds *= 2.0;
    }
    return c;
}

/// The compressed ring over q ranks with messages of m bytes for the whole bucket.
[[nodiscard]] inline cost_estimate compressed_ring_cost(int q, double m) noexcept {
    cost_estimate c;
    if (q <= 1) return c;
    c.latency_terms = 2.0 * (q - 1);
    c.bandwidth_bytes = 2.0 * (q - 1) / q * m;
    c.sent_messages = c.latency_terms;
    c.sent_bytes = c.bandwidth_bytes;
    return c;
}

/// c's rounds moved to the between-node constants, added to `to`.
inline void add_across_nodes(cost_estimate& to, const cost_estimate& c) noexcept {
    to.inter_latency_terms += c.latency_terms + c.inter_latency_terms;
    to.inter_bandwidth_bytes += c.bandwidth_bytes + c.inter_bandwidth_bytes;
    to.sent_messages += c.sent_messages;
    to.sent_bytes += c.sent_bytes;
}

}  // namespace detail

/// The modelled cost of exchange `e` for a bucket of n elements whose messages are m bytes, on ranks of `shape`.
[[nodiscard]] inline cost_estimate exchange_cost(exchange_kind e, const allreduce::level_shape& shape, std::size_t n,
                                                 double m) noexcept {
    const int p = std::max(shape.ranks, 1);
    const double elements = static_cast<double>(n);
    const double d = elements > 0 ? std::min(1.0, m / (8.0 * elements)) : 1.0;
    const int g = std::clamp(shape.largest_node, 1, p);
    const int nodes = std::max(shape.nodes, 1);
    cost_estimate c;
    if (p <= 1) return c;
    const auto flat = [&](const cost_estimate& one_level) {
        return nodes > 1 ? allreduce::across_nodes(one_level) : one_level;
    };
    switch (e) {
        case exchange_kind::compressed_ring:
            return flat(detail::compressed_ring_cost(p, m));
        case exchange_kind::compressed_halving_doubling: {
            const int levels = allreduce::detail::floor_log2(p);
            const int q = allreduce::detail::floor_pow2(p);
            c.latency_terms = 2.0 * levels;
            c.bandwidth_bytes = 2.0 * (q - 1) / q * m;
            if (q != p) {
                c.latency_terms += 2;
                c.bandwidth_bytes += 2.0 * m;
            }
            c.sent_messages = c.latency_terms;
            c.sent_bytes = c.bandwidth_bytes;
            return flat(c);
        }
        case exchange_kind::compressed_hierarchical:
            c.latency_terms = 2.0 * (g - 1);
            c.bandwidth_bytes = 2.0 * (g - 1) * 4.0 * elements;
            detail::add_across_nodes(c, detail::compressed_ring_cost(nodes, m));
            return c;
        case exchange_kind::allgather_ring:
            c.latency_terms = p - 1.0;
            c.bandwidth_bytes = (p - 1.0) * m;
            c.sent_messages = c.latency_terms;
            c.sent_bytes = c.bandwidth_bytes;
            return flat(c);
        case exchange_kind::sparse_recursive_doubling:
            return flat(detail::sparse_doubling_cost(p, elements, d, 1.0));
        case exchange_kind::sparse_hierarchical: {
            const double result = detail::merged_bytes(elements, detail::union_density(d, p));
            c.latency_terms = 2.0 * (g - 1);
            c.bandwidth_bytes = (g - 1) * (m + result);
            detail::add_across_nodes(c, detail::sparse_doubling_cost(nodes, elements, d, g));
            return c;
        }
        case exchange_kind::allreduce:
        case exchange_kind::low_rank:
            break;
    }
    return c;
}

}  // namespace hitch::compress
