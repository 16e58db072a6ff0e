#pragma once
// Measuring the alpha-beta-gamma constants of a communicator for automatic: a ping-pong for alpha, a 1 MiB
// exchange for beta, a 1 MiB combine for gamma, and two native all-reduces where the communicator has one.
// On a layout of two levels (more than one node, more than one rank on some node) alpha and beta are measured
// twice: between partners on one node (the intra constants), then between the leaders of pairs of nodes (the
// inter constants: one rank per node crosses, as in hierarchical's leaders and in a ring over nodes).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "hitch/allreduce/automatic/agreement.hpp"
#include "hitch/allreduce/automatic/native_candidate.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/allreduce/tuning.hpp"
#include "hitch/core/node_layout.hpp"

namespace hitch::allreduce::detail {

/// The channels of calibration's own messages (apart from every schedule's): a ping-pong and an exchange inside
/// a node, then the same between nodes.
inline constexpr int calibration_channel = 60;
inline constexpr int inter_calibration_channel = 62;

/// This rank's partner on its node for measuring the intra constants: the neighbour of its place among the node's
/// ranks (local rank ^ 1); -1 when it has none.
[[nodiscard]] inline int partner_on_node(const node_layout& layout, int me) {
    const std::vector<int> mine = layout.ranks_on(layout.node_of(me));
    const auto at = static_cast<std::size_t>(std::find(mine.begin(), mine.end(), me) - mine.begin());
    const std::size_t other = at ^ 1u;
    return other < mine.size() ? mine[other] : -1;
}
/// The partner across nodes: the leader (lowest rank) of node j ^ 1 for the leader of node j; -1 for every other
/// rank, and for the leader of a last, odd node.
[[nodiscard]] inline int partner_across_nodes(const node_layout& layout, int me) {
    const int node = layout.node_of(me);
    const std::vector<int> mine = layout.ranks_on(node);
    if (mine.empty() || mine.front() != me || (node ^ 1) >= layout.nodes) return -1;
    return layout.ranks_on(node ^ 1).front();
}

/// Alpha (half a round trip of one float, best of a few) and beta (a 1 MiB exchange less alpha, per byte, best of
/// a few) between this rank and `partner` (0, 0 without one: the maximum over ranks decides). a and b are the
/// exchange's buffers.
template <communicator C>
[[nodiscard]] std::pair<double, double> measure_pair(transport<C>& t, int partner, int channel, std::span<float> a,
                                                     std::span<float> b) {
    if (partner < 0) return {0.0, 0.0};
    const int me = t.rank();
    const auto seconds_since = [&t](clock_source::time_point s) {
        return std::chrono::duration<double>(now_on(t.comm()) - s).count();
    };
    double alpha = 1.0;
    float token = 0.0f;
    const std::span<const float> out(&token, 1);
    const std::span<float> in(&token, 1);
    for (int attempt = 0; attempt < tuning::constant_attempts; ++attempt) {
        const auto start = now_on(t.comm());
        for (int i = 0; i < tuning::alpha_round_trips; ++i) {
            if (me < partner) {
                t.template send<float>(partner, channel, out).wait(t.limit());
                t.template receive_into<float>(partner, channel, in).wait(t.limit());
            } else {
                t.template receive_into<float>(partner, channel, in).wait(t.limit());
                t.template send<float>(partner, channel, out).wait(t.limit());
            }
        }
        alpha = std::min(alpha, seconds_since(start) / (2.0 * tuning::alpha_round_trips));
    }
    const double bytes = static_cast<double>(a.size_bytes());
    double beta = 1.0;
    for (int attempt = 0; attempt < tuning::constant_attempts; ++attempt) {
        const auto start = now_on(t.comm());
        t.exchange_copy(partner, std::span<const float>(a), partner, b, a.size(), channel + 1);
        beta = std::min(beta, std::max(seconds_since(start) - alpha, 1e-12) / bytes);
    }
    return {alpha, beta};
}

/// Measures the constants (collective over t's communicator, whose node layout is `layout`); the result is the
/// same on every rank.
template <communicator C>
[[nodiscard]] cost_constants measure_constants(transport<C>& t, const node_layout& layout) {
    const int p = t.size(), me = t.rank();
    cost_constants k;
    if (p <= 1) return k;
    const bool two_level = level_shape::of(layout).two_level();
    // Timed on the communicator's clock: virtual time on a simulated cluster.
    const auto seconds_since = [&t](clock_source::time_point a) {
        return std::chrono::duration<double>(now_on(t.comm()) - a).count();
    };
    constexpr std::size_t bytes = tuning::constant_probe_bytes;
    const std::size_t count = bytes / sizeof(float);
    std::span<float> a = t.template scratch<float>(count);
    std::span<float> b = t.template scratch<float>(count);
    std::fill(a.begin(), a.end(), 1.0f);
    std::fill(b.begin(), b.end(), 2.0f);
    const int partner = two_level ? partner_on_node(layout, me) : ((me ^ 1) < p ? (me ^ 1) : -1);
    std::tie(k.alpha_s, k.beta_s_per_byte) = measure_pair(t, partner, calibration_channel, a, b);
    if (two_level)
        std::tie(k.inter_alpha_s, k.inter_beta_s_per_byte) =
            measure_pair(t, partner_across_nodes(layout, me), inter_calibration_channel, a, b);
    // gamma: combining as many bytes of floats.
    double gamma = 1.0;
    for (int attempt = 0; attempt < tuning::constant_attempts; ++attempt) {
        const auto start = now_on(t.comm());
        combine(a.data(), a.data(), b.data(), count, reduce_op::sum);
        gamma = std::min(gamma, std::max(seconds_since(start), 1e-12) / static_cast<double>(bytes));
    }
    k.gamma_s_per_byte = gamma;
    if constexpr (has_native_allreduce<C>::value) {
        const auto time_native = [&](std::size_t n) {
            double best = 1.0;
            for (int attempt = 0; attempt < tuning::constant_attempts; ++attempt) {
                const auto start = now_on(t.comm());
                typename native_for<C>::type{}.run(t, a.subspan(0, n), reduce_op::sum);
                best = std::min(best, seconds_since(start));
            }
            return best;
        };
        const double small = time_native(1);
        const double large = time_native(count);
        k.native_alpha_s = small;
        k.native_beta_s_per_byte = std::max(large - small, 1e-12) / static_cast<double>(bytes);
    }
    k = agree_constants(t.comm(), k);
    k.alpha_s = std::max(k.alpha_s, tuning::min_alpha_s);
    k.beta_s_per_byte = std::max(k.beta_s_per_byte, tuning::min_beta_s_per_byte);
    k.gamma_s_per_byte = std::max(k.gamma_s_per_byte, tuning::min_gamma_s_per_byte);
    if (two_level) {
        k.inter_alpha_s = std::max(k.inter_alpha_s, tuning::min_alpha_s);
        k.inter_beta_s_per_byte = std::max(k.inter_beta_s_per_byte, tuning::min_beta_s_per_byte);
    }
    return k;
}

}  // namespace hitch::allreduce::detail
