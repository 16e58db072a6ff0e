#pragma once
// Checks of the compressed halving-doubling and hierarchical exchanges (exchange/compressed_halving_doubling.hpp,
// compressed_hierarchical.hpp), written once against the communicator concept and run over comm::local and
// comm::mpi. Each function is collective; every rank generates every rank's gradients and computes the references
// itself: the same algorithms run serially over p virtual ranks with the codec's own encode / encode_ef (the
// leaders' ring of the hierarchical shape is aggregate_suite.hpp's simulation of the ring), conservation of
// inputs and residuals, the bytes each rank sends, and the failure protocol.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "aggregate_suite.hpp"
#include "hitch/allreduce/detail/fold.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/exchange/compressed_halving_doubling.hpp"
#include "hitch/exchange/compressed_hierarchical.hpp"

namespace hitch_test {

/// The hop codec of Codec (the inner codec of error_feedback).
template <class Codec>
const auto& hop_codec_of(const Codec& codec) {
    if constexpr (hc::detail::is_error_feedback<Codec>::value)
        return codec.inner();
    else
        return codec;
}

/// This rank's hop residual in an aggregation state (empty for codecs without hop feedback).
template <class Codec>
const std::vector<float>& hop_residual(const hc::aggregation_state<Codec>& st) {
    if constexpr (hc::detail::is_error_feedback<Codec>::value)
        return st.codec.residual;
    else
        return st.ring_residual;
}

/// Compressed halving-doubling over p virtual ranks, serially: the fold, recursive halving with an encode of the
/// half given away, the final blocks' messages, the result decoded from them. Residuals are updated in place (hop
/// feedback); sent[r] receives the bytes rank r sends (8 per size word and the messages).
template <class Codec>
std::vector<float> simulate_halving_doubling(const Codec& codec, const std::vector<std::vector<float>>& inputs,
                                             std::vector<std::vector<float>>& residuals, std::uint64_t call,
                                             std::vector<std::size_t>& sent) {
    constexpr bool feedback = hc::ring_hop_feedback<Codec>;
    const auto& hop = hop_codec_of(codec);
    const int p = static_cast<int>(inputs.size());
    const std::size_t n = inputs[0].size();
    int p2 = 1;
    while (p2 * 2 <= p) p2 *= 2;
    const int rem = p - p2;
    const auto real = [&](int nr) { return nr < rem ? 2 * nr + 1 : nr + rem; };
    const auto range = [&](int first, int last) { return hitch::allreduce::partition_range(n, p2, first, last); };
    sent.assign(static_cast<std::size_t>(p), 0);
    auto next_res = residuals;
    const auto encode = [&](int r, const float* values, int first, int last, std::vector<std::byte>& out) {
        const auto b = range(first, last);
        const int m = last - first;
        auto s = hop.make_state(b.count);
        set_step(s, call * static_cast<std::uint64_t>(2 * p2) + static_cast<std::uint64_t>(p2 / m + first / m));
        hc::detail::set_stream(s, r);
        if constexpr (feedback)
            hop.encode_ef(hitch::tensor_view<const float>(values + b.offset, b.count),
                          std::span<const float>(residuals[r].data() + b.offset, b.count),
                          std::span<float>(next_res[r].data() + b.offset, b.count), s, out);
        else
            hop.encode(hitch::tensor_view<const float>(values + b.offset, b.count), s, out);
    };
    // acc[nr]: the partial sums of power-of-two rank nr.
    std::vector<std::vector<float>> acc(static_cast<std::size_t>(p2));
    std::vector<std::byte> m;
    for (int nr = 0; nr < p2; ++nr) {
        const int r = real(nr);
        acc[nr] = inputs[r];
        if (nr < rem) {  // fold: even rank r - 1 sends its whole bucket, encoded
            encode(r - 1, inputs[r - 1].data(), 0, p2, m);
            sent[r - 1] += m.size() + 8;
            std::vector<float> d(n);
            hop.decode(m, hitch::tensor_view<float>(d));
            for (std::size_t i = 0; i < n; ++i) acc[nr][i] = d[i] + inputs[r][i];
        }
    }
    std::vector<int> lo(static_cast<std::size_t>(p2), 0), hi(static_cast<std::size_t>(p2), p2);
    std::vector<std::vector<std::byte>> out(static_cast<std::size_t>(p2));
    for (int mask = p2 / 2; mask >= 1; mask /= 2) {
        for (int nr = 0; nr < p2; ++nr) {
            const int mid = lo[nr] + mask;
            const bool upper = (nr & mask) != 0;
            encode(real(nr), acc[nr].data(), upper ? lo[nr] : mid, upper ? mid : hi[nr], out[nr]);
            sent[real(nr)] += out[nr].size() + 8;
        }
        for (int nr = 0; nr < p2; ++nr) {
            const int mid = lo[nr] + mask;
            const bool upper = (nr & mask) != 0;
            const auto keep = upper ? range(mid, hi[nr]) : range(lo[nr], mid);
            std::vector<float> d(keep.count);
            hop.decode(out[nr ^ mask], hitch::tensor_view<float>(d));
            for (std::size_t i = 0; i < keep.count; ++i) acc[nr][keep.offset + i] += d[i];
            (upper ? lo[nr] : hi[nr]) = mid;
        }
    }
    std::vector<std::vector<std::byte>> final_messages(static_cast<std::size_t>(p2));
    for (int nr = 0; nr < p2; ++nr) encode(real(nr), acc[nr].data(), nr, nr + 1, final_messages[nr]);
    std::size_t all_bytes = 0;
    for (const auto& f : final_messages) all_bytes += f.size() + 8;
    for (int nr = 0; nr < p2; ++nr) {
        for (int mask = 1; mask < p2; mask *= 2)
            for (int c = nr & ~(mask - 1); c < (nr & ~(mask - 1)) + mask; ++c)
                sent[real(nr)] += final_messages[c].size() + 8;
        if (nr < rem) sent[real(nr)] += all_bytes;  // back to the folded rank
    }
    std::vector<float> result(n, 0.0f);
    for (int c = 0; c < p2; ++c) {
        const auto b = hitch::allreduce::partition(n, p2, c);
        hop.decode(final_messages[c], hitch::tensor_view<float>(result.data() + b.offset, b.count));
    }
    if constexpr (feedback) residuals = next_res;
    return result;
}

/// The compressed hierarchical exchange over p virtual ranks: each node's exact sum in rank order, the ring among
/// the leaders (simulate_ring, the leaders' residuals updated in place in `residuals`), or the exact sum on one node.
template <class Codec>
std::vector<float> simulate_hierarchical(const Codec& codec, const std::vector<std::vector<float>>& inputs,
                                         const hitch::node_layout& nodes, std::vector<std::vector<float>>& residuals,
                                         std::uint64_t call) {
    const std::size_t n = inputs[0].size();
    std::vector<std::vector<float>> sums;
    std::vector<std::vector<float>> leader_res;
    for (int k = 0; k < nodes.nodes; ++k) {
        const auto ranks = nodes.ranks_on(k);
        std::vector<float> s = inputs[ranks[0]];
        for (std::size_t j = 1; j < ranks.size(); ++j)
            for (std::size_t i = 0; i < n; ++i) s[i] += inputs[ranks[j]][i];
        sums.push_back(s);
        leader_res.push_back(residuals[ranks[0]]);
    }
    if (nodes.nodes == 1) return sums[0];
    auto result = simulate_ring(codec, sums, leader_res, call);
    for (int k = 0; k < nodes.nodes; ++k) residuals[nodes.ranks_on(k)[0]] = leader_res[k];
    return result;
}

/// Bytes each rank sends in the hierarchical exchange, for codecs whose message size depends only on the element
/// count (onebit, terngrad): members their floats; leaders the ring's messages and the final ones to each member.
template <class Codec>
std::vector<std::size_t> hierarchical_sent_bytes(const Codec& codec, const hitch::node_layout& nodes, std::size_t n) {
    const auto& hop = hop_codec_of(codec);
    const int p = static_cast<int>(nodes.node_of_rank.size()), q = nodes.nodes;
    std::vector<std::size_t> sent(static_cast<std::size_t>(p), 4 * n + 8);
    const auto size = [&](int c) {
        return hop.max_message_bytes(hitch::allreduce::partition(n, q, (c % q + q) % q).count) + 8;
    };
    std::size_t finals = 0;
    for (int c = 0; c < q; ++c) finals += size(c);
    for (int k = 0; k < q; ++k) {
        const auto ranks = nodes.ranks_on(k);
        std::size_t s = (ranks.size() - 1) * (q == 1 ? 4 * n + 8 : finals);
        for (int j = 0; j < q - 1; ++j) s += size(k - j) + size(k + 1 - j);  // reduce-scatter, all-gather
        sent[ranks[0]] = s;
    }
    return sent;
}

/// Conservation with hop feedback: sum over ranks of (input + old residual) = result + sum of new residuals.
inline void require_conservation(const char* what, const std::vector<std::vector<float>>& inputs,
                                 const std::vector<std::vector<float>>& old_res,
                                 const std::vector<std::vector<float>>& new_res, const std::vector<float>& result) {
    const int p = static_cast<int>(inputs.size());
    for (std::size_t i = 0; i < result.size(); ++i) {
        double lhs = 0, rhs = result[i], scale = std::fabs(result[i]);
        for (int r = 0; r < p; ++r) {
            lhs += static_cast<double>(inputs[r][i]) + old_res[r][i];
            rhs += new_res[r][i];
            scale += std::fabs(inputs[r][i]) + std::fabs(old_res[r][i]) + std::fabs(new_res[r][i]);
        }
        require(std::fabs(lhs - rhs) <= 4.0 * (p + 1) * std::ldexp(scale, -23) + 1e-30,
                hitch::detail::concat(what, " conservation, element ", i, ": ", lhs, " vs ", rhs));
    }
}

/// Which shape a check runs.
enum class shape { halving_doubling, hierarchical };

template <hitch::communicator C, class Codec, class T>
hc::aggregation_stats run_shape(shape sh, hitch::allreduce::group<C>& g, const Codec& codec,
                                hc::aggregation_state<Codec>& st, std::vector<T>& bucket,
                                const hitch::node_layout& nodes) {
    if (sh == shape::halving_doubling)
        return hc::aggregate_compressed_halving_doubling(g, codec, st, hitch::tensor_view<T>(bucket));
    return hc::aggregate_compressed_hierarchical(g, codec, st, hitch::tensor_view<T>(bucket), nodes);
}

/// The shape equals its serial simulation bit for bit on every rank, for `steps` calls; its residual equals the
/// simulation's and conserves (hop feedback); its stats name it, and sent_bytes equals the simulation's (for
/// hierarchical, with check_bytes: codecs of fixed message sizes).
template <hitch::communicator C, class Codec>
void shape_matches_simulation(C& comm, shape sh, const Codec& codec, std::size_t n, const hitch::node_layout& nodes,
                              bool check_bytes = true, int steps = 3) {
    constexpr bool feedback = hc::ring_hop_feedback<Codec>;
    hitch::allreduce::group g(comm);
    const int p = comm.size(), me = comm.rank();
    auto st = hc::make_aggregation_state(codec, n);
    std::vector<std::vector<float>> residuals(static_cast<std::size_t>(p), std::vector<float>(feedback ? n : 0, 0.0f));
    const std::string what = hitch::detail::concat(
        Codec::name, sh == shape::halving_doubling ? " halving-doubling" : " hierarchical", ", p = ", p, ", n = ", n);
    for (int t = 0; t < steps; ++t) {
        std::vector<std::vector<float>> inputs;
        for (int r = 0; r < p; ++r) inputs.push_back(data_of(n, t, r, false));
        const auto old_res = residuals;
        auto bucket = inputs[static_cast<std::size_t>(me)];
        const auto stats = run_shape(sh, g, codec, st, bucket, nodes);
        std::vector<std::size_t> sent;
        const auto sim = sh == shape::halving_doubling
                             ? simulate_halving_doubling(codec, inputs, residuals, static_cast<std::uint64_t>(t), sent)
                             : simulate_hierarchical(codec, inputs, nodes, residuals, static_cast<std::uint64_t>(t));
        require(same_values(bucket, sim),
                hitch::detail::concat(what, ", step ", t, ": ", describe_difference(bucket, sim)));
        require(stats.path == hc::aggregation_path::compressed_ring, what + ": path");
        require(stats.exchange == (sh == shape::halving_doubling ? hc::exchange_kind::compressed_halving_doubling
                                                                 : hc::exchange_kind::compressed_hierarchical),
                what + ": exchange");
        if (sh == shape::hierarchical && check_bytes && p > 1) sent = hierarchical_sent_bytes(codec, nodes, n);
        if (p > 1 && (sh == shape::halving_doubling || check_bytes))
            require(stats.sent_bytes == sent[static_cast<std::size_t>(me)],
                    hitch::detail::concat(what, ": rank ", me, " sent ", stats.sent_bytes, " bytes, the simulation ",
                                          sent[static_cast<std::size_t>(me)]));
        if constexpr (feedback) {
            require(same_values(hop_residual(st), residuals[static_cast<std::size_t>(me)]),
                    what + ": the residual equals the simulation's");
            if (sh == shape::halving_doubling) {
                require_conservation(what.c_str(), inputs, old_res, residuals, sim);
            } else {  // only leaders keep residuals: they conserve the node sums
                std::vector<std::vector<float>> sums, old_l, new_l;
                for (int k = 0; k < nodes.nodes; ++k) {
                    const auto ranks = nodes.ranks_on(k);
                    std::vector<float> s(n, 0.0f);
                    for (int r : ranks)
                        for (std::size_t i = 0; i < n; ++i) s[i] += inputs[r][i];
                    sums.push_back(s);
                    old_l.push_back(old_res[ranks[0]]);
                    new_l.push_back(residuals[ranks[0]]);
                }
                require_conservation(what.c_str(), sums, old_l, new_l, sim);
            }
        }
    }
}

/// One node: the exact sum in rank order, on every rank, bit for bit, whatever the codec.
template <hitch::communicator C, class Codec>
void one_node_is_exact(C& comm, const Codec& codec, std::size_t n) {
    hitch::allreduce::group g(comm);
    const int p = comm.size(), me = comm.rank();
    hitch::node_layout one;
    one.node_of_rank.assign(static_cast<std::size_t>(p), 0);
    one.nodes = 1;
    auto st = hc::make_aggregation_state(codec, n);
    for (int t = 0; t < 2; ++t) {
        std::vector<float> want(n, 0.0f);
        for (int r = 0; r < p; ++r) {
            const auto x = data_of(n, t, r, false);
            for (std::size_t i = 0; i < n; ++i) want[i] = r == 0 ? x[i] : want[i] + x[i];
        }
        auto bucket = data_of(n, t, me, false);
        hc::aggregate_compressed_hierarchical(g, codec, st, hitch::tensor_view<float>(bucket), one);
        require(same_values(bucket, want), hitch::detail::concat(Codec::name, " hierarchical on one node, p = ", p,
                                                                 ": ", describe_difference(bucket, want)));
    }
}

/// Ranks with buckets of different sizes: mismatch_error on every rank.
template <hitch::communicator C, class Codec>
void shape_rejects_mismatched_sizes(C& comm, shape sh, const Codec& codec, const hitch::node_layout& nodes) {
    hitch::allreduce::group g(comm);
    const std::size_t n = comm.rank() == 0 ? 100 : 101;
    auto st = hc::make_aggregation_state(codec, n);
    auto bucket = data_of(n, 0, comm.rank(), false);
    bool threw = false;
    try {
        run_shape(sh, g, codec, st, bucket, nodes);
    } catch (const hitch::mismatch_error&) {
        threw = true;
    }
    require(threw || comm.size() == 1, hitch::detail::concat(Codec::name, ": rank ", comm.rank(),
                                                             " did not throw mismatch_error for sizes 100 and 101"));
}

/// A rank whose bucket holds NaN: every rank throws non_finite_error naming it, and no state changed: the next
/// call, with good data, gives what it gives on a copy of the state taken before the failed call.
template <hitch::communicator C, class Codec>
void shape_failure_changes_nothing(C& comm, shape sh, const Codec& codec, std::size_t n,
                                   const hitch::node_layout& nodes, int failing) {
    hitch::allreduce::group g(comm);
    const int me = comm.rank();
    auto st = hc::make_aggregation_state(codec, n);
    auto bucket = data_of(n, 0, me, false);
    run_shape(sh, g, codec, st, bucket, nodes);  // one good step: residuals are non-zero now
    auto twin = st;
    bucket = data_of(n, 1, me, false);
    if (me == failing) bucket[n / 2] = std::numeric_limits<float>::quiet_NaN();
    bool threw = false;
    try {
        run_shape(sh, g, codec, st, bucket, nodes);
    } catch (const hc::non_finite_error& e) {
        threw = true;
        if (me != failing)
            require(std::string(e.what()).find("rank " + std::to_string(failing)) != std::string::npos,
                    std::string("the error names the failing rank: ") + e.what());
    }
    require(threw, hitch::detail::concat(Codec::name, ": rank ", me, " did not throw non_finite_error"));
    require(hop_residual(st) == hop_residual(twin),
            hitch::detail::concat(Codec::name, ": rank ", me, "'s residual changed"));
    auto again = data_of(n, 1, me, false), first = again;
    run_shape(sh, g, codec, st, again, nodes);
    run_shape(sh, g, codec, twin, first, nodes);
    require(same_values(again, first) && hop_residual(st) == hop_residual(twin),
            hitch::detail::concat(Codec::name, ": after the failure the state gives what it gave before"));
}

}  // namespace hitch_test
