#pragma once
// Checks of the sparse exchanges (exchange/sparse_recursive_doubling.hpp, sparse_hierarchical.hpp), written once
// against the communicator concept and run over comm::local and comm::mpi. Each function is collective; every
// rank generates every rank's gradients and computes the references itself:
//   - exact data: decode-then-sum (aggregate_suite.hpp), which any summation order gives exactly;
//   - any data: the same rounds run serially over p virtual ranks on dense arrays with a mask of the indices each
//     set holds (absent = +0, so a + b is the merge rule's value), which gives the result bits, the dense switch
//     (a set turns dense when 2 |union| >= n or either side is dense) and the bytes each rank sends.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "aggregate_suite.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/exchange/sparse_hierarchical.hpp"
#include "hitch/exchange/sparse_recursive_doubling.hpp"

namespace hitch_test {

/// The exchange under test: recursive doubling over all ranks, or hierarchical over a layout.
struct sparse_exchange {
    bool hierarchical = false;
    hitch::node_layout layout{};

    template <hitch::communicator C, class Codec, class T>
    hc::aggregation_stats operator()(hitch::allreduce::group<C>& g, const Codec& codec, hc::aggregation_state<Codec>& s,
                                     hitch::tensor_view<T> bucket, const hc::aggregate_options& o = {}) const {
        if (hierarchical) return hc::aggregate_sparse_hierarchical(g, codec, s, bucket, layout, o);
        return hc::aggregate_sparse_recursive_doubling(g, codec, s, bucket, o);
    }
    [[nodiscard]] std::string label() const {
        if (!hierarchical) return "sparse_recursive_doubling";
        std::string out = "sparse_hierarchical {";
        for (int node : layout.node_of_rank) out += std::to_string(node);
        return out + "}";
    }
};

/// A layout from each rank's node.
inline hitch::node_layout layout_of(std::vector<int> node_of_rank) {
    hitch::node_layout out;
    int nodes = 0;
    for (int x : node_of_rank) nodes = std::max(nodes, x + 1);
    out.node_of_rank = std::move(node_of_rank);
    out.nodes = nodes;
    return out;
}

/// A virtual rank's set in the simulation.
struct sim_set {
    bool dense = false;
    std::vector<float> v;
    std::vector<char> present;
    [[nodiscard]] std::size_t count() const {
        std::size_t k = 0;
        for (char c : present) k += c != 0;
        return k;
    }
    [[nodiscard]] std::size_t bytes() const { return dense ? 4 * v.size() : 8 * count(); }
};

inline sim_set sim_merge(const sim_set& a, const sim_set& b) {
    const std::size_t n = a.v.size();
    sim_set out;
    out.v.resize(n);
    out.present.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        out.v[i] = a.v[i] + b.v[i];
        out.present[i] = a.present[i] || b.present[i];
    }
    out.dense = a.dense || b.dense || 2 * out.count() >= n;
    return out;
}

struct simulation {
    std::vector<sim_set> sets;       // per virtual rank, at the end
    std::vector<std::size_t> bytes;  // sent per virtual rank
    bool any_dense = false;          // some set turned (or started) dense
};

inline void sim_send(simulation& s, int from, const sim_set& what) {
    s.bytes[static_cast<std::size_t>(from)] += 8 + what.bytes();
    s.any_dense = s.any_dense || what.dense;
}

/// Recursive doubling among `ranks` (ascending), extra ranks folded into rank index - 2^k.
inline void sim_doubling(simulation& s, const std::vector<int>& ranks) {
    const std::size_t m = ranks.size(), m2 = std::bit_floor(m);
    auto& sets = s.sets;
    for (std::size_t i = m2; i < m; ++i) {
        sim_send(s, ranks[i], sets[ranks[i]]);
        sets[ranks[i - m2]] = sim_merge(sets[ranks[i - m2]], sets[ranks[i]]);
    }
    for (std::size_t mask = 1; mask < m2; mask <<= 1) {
        const auto old = sets;
        for (std::size_t i = 0; i < m2; ++i) {
            sim_send(s, ranks[i], old[ranks[i]]);
            sets[ranks[i]] = sim_merge(old[ranks[i]], old[ranks[i ^ mask]]);
        }
    }
    for (std::size_t i = m2; i < m; ++i) {
        sim_send(s, ranks[i - m2], sets[ranks[i - m2]]);
        sets[ranks[i]] = sets[ranks[i - m2]];
    }
    for (int r : ranks) s.any_dense = s.any_dense || sets[r].dense;
}

/// The exchange over p virtual ranks whose decoded messages are `decoded`.
inline simulation simulate_sparse(const std::vector<std::vector<float>>& decoded, const sparse_exchange& x) {
    const int p = static_cast<int>(decoded.size());
    const std::size_t n = decoded[0].size();
    simulation s;
    s.bytes.assign(static_cast<std::size_t>(p), 0);
    for (const auto& d : decoded) {
        sim_set set;
        set.v = d;
        set.present.resize(n);
        for (std::size_t i = 0; i < n; ++i) set.present[i] = d[i] != 0.0f;
        set.dense = 2 * set.count() >= n;
        s.sets.push_back(std::move(set));
    }
    if (!x.hierarchical) {
        std::vector<int> all;
        for (int r = 0; r < p; ++r) all.push_back(r);
        sim_doubling(s, all);
        return s;
    }
    std::vector<int> leaders;
    for (int node = 0; node < x.layout.nodes; ++node) {
        const auto members = x.layout.ranks_on(node);
        for (std::size_t j = 1; j < members.size(); ++j) {
            sim_send(s, members[j], s.sets[members[j]]);
            s.sets[members[0]] = sim_merge(s.sets[members[0]], s.sets[members[j]]);
        }
        leaders.push_back(members[0]);
    }
    std::sort(leaders.begin(), leaders.end());
    sim_doubling(s, leaders);
    for (int node = 0; node < x.layout.nodes; ++node) {
        const auto members = x.layout.ranks_on(node);
        for (std::size_t j = 1; j < members.size(); ++j) {
            sim_send(s, members[0], s.sets[members[0]]);
            s.sets[members[j]] = s.sets[members[0]];
        }
    }
    return s;
}

/// Every rank holds the same bits.
template <hitch::communicator C>
void same_bits_everywhere(C& comm, const std::vector<float>& bucket, const std::string& what) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (float x : bucket) h = (h ^ std::bit_cast<std::uint32_t>(x)) * 0x100000001b3ull;
    for (std::uint64_t o : hitch::comm::allgather_value(comm, h)) require(o == h, what + ": the same bits everywhere");
}

/// Random data: the result equals the simulation bit for bit, on every rank, and the bytes sent are the
/// simulation's; `expect_dense` (0 no, 1 yes, -1 either) pins whether the case reaches the dense switch.
/// Returns whether it did.
template <hitch::communicator C, class Codec>
bool sparse_matches_simulation(C& comm, const Codec& codec, std::size_t n, const sparse_exchange& x, int steps,
                               int expect_dense = -1) {
    hitch::allreduce::group g(comm);
    const int p = comm.size(), me = comm.rank();
    auto st = hc::make_aggregation_state(codec, n);
    std::vector<typename Codec::state> ref_states;
    for (int r = 0; r < p; ++r) ref_states.push_back(state_for_rank(codec, n, r));
    bool dense = false;
    std::vector<std::byte> m;
    for (int t = 0; t < steps; ++t) {
        const std::string what =
            hitch::detail::concat(Codec::name, " ", x.label(), ", p = ", p, ", n = ", n, ", step ", t);
        auto bucket = data_of(n, t, me, false);
        const auto stats = x(g, codec, st, hitch::tensor_view<float>(bucket));
        std::vector<std::vector<float>> decoded;
        std::size_t own_bytes = 0;
        for (int r = 0; r < p; ++r) {
            const auto gr = data_of(n, t, r, false);
            codec.encode(hitch::tensor_view<const float>(gr), ref_states[r], m);
            if (r == me) own_bytes = m.size();
            decoded.emplace_back(n);
            codec.decode(m, hitch::tensor_view<float>(decoded.back()));
        }
        const simulation sim = simulate_sparse(decoded, x);
        const auto& want = sim.sets[static_cast<std::size_t>(me)].v;
        require(same_values(bucket, want), what + ": " + describe_difference(bucket, want));
        same_bits_everywhere(comm, bucket, what);
        require(stats.path == hc::aggregation_path::allgather, what + ": path");
        require(stats.exchange == (x.hierarchical ? hc::exchange_kind::sparse_hierarchical
                                                  : hc::exchange_kind::sparse_recursive_doubling),
                what + ": exchange");
        require(stats.message_bytes == own_bytes, what + ": message_bytes");
        require(stats.sent_bytes == sim.bytes[static_cast<std::size_t>(me)],
                hitch::detail::concat(what, ": sent ", stats.sent_bytes, " bytes, the simulation ",
                                      sim.bytes[static_cast<std::size_t>(me)]));
        dense = dense || sim.any_dense;
    }
    if (expect_dense >= 0)
        require(dense == (expect_dense == 1),
                hitch::detail::concat(Codec::name, " ", x.label(), ", p = ", p, ": the dense switch ",
                                      dense ? "happened" : "did not happen", " against the case's expectation"));
    return dense;
}

/// Exact data: the result equals decode-then-sum exactly (any order of the sums gives it).
template <hitch::communicator C, class Codec>
void sparse_exact_equals_decode_then_sum(C& comm, const Codec& codec, std::size_t n, const sparse_exchange& x,
                                         int steps) {
    hitch::allreduce::group g(comm);
    const int p = comm.size(), me = comm.rank();
    auto st = hc::make_aggregation_state(codec, n);
    std::vector<typename Codec::state> ref_states;
    for (int r = 0; r < p; ++r) ref_states.push_back(state_for_rank(codec, n, r));
    for (int t = 0; t < steps; ++t) {
        auto bucket = data_of(n, t, me, true);
        x(g, codec, st, hitch::tensor_view<float>(bucket));
        const auto ref = decode_then_sum(codec, ref_states, n, t, true);
        require(same_values(bucket, ref), hitch::detail::concat(Codec::name, " ", x.label(), " (exact data), p = ", p,
                                                                ", step ", t, ": ", describe_difference(bucket, ref)));
    }
}

/// options.average divides the sum by p once at the end; a double bucket gives the float result converted.
template <hitch::communicator C, class Codec>
void sparse_average_and_double(C& comm, const Codec& codec, std::size_t n, const sparse_exchange& x) {
    hitch::allreduce::group g(comm);
    const int p = comm.size(), me = comm.rank();
    auto a = hc::make_aggregation_state(codec, n), b = hc::make_aggregation_state(codec, n),
         c = hc::make_aggregation_state(codec, n);
    auto sum = data_of(n, 0, me, false), mean = sum;
    x(g, codec, a, hitch::tensor_view<float>(sum));
    x(g, codec, b, hitch::tensor_view<float>(mean), {.average = true});
    const float f = 1.0f / static_cast<float>(p);
    for (std::size_t i = 0; i < n; ++i) require(mean[i] == sum[i] * f, x.label() + ": mean = sum * (1 / p)");
    const auto in = data_of(n, 0, me, false);
    std::vector<double> d(in.begin(), in.end());
    x(g, codec, c, hitch::tensor_view<double>(d));
    for (std::size_t i = 0; i < n; ++i) require(d[i] == static_cast<double>(sum[i]), x.label() + ": double bucket");
}

/// A rank with NaN: every rank throws non_finite_error naming it, no rank's codec state changes, and the next call
/// gives exactly what it gives on a state that never saw the failed call.
template <hitch::communicator C, class Codec, class StateOf>
void sparse_failure_reaches_every_rank(C& comm, const Codec& codec, std::size_t n, const sparse_exchange& x,
                                       StateOf&& state_of) {
    hitch::allreduce::group g(comm);
    const int p = comm.size(), me = comm.rank();
    auto st = hc::make_aggregation_state(codec, n), clean = hc::make_aggregation_state(codec, n);
    auto bucket = data_of(n, 0, me, false), other = bucket;
    x(g, codec, st, hitch::tensor_view<float>(bucket));
    x(g, codec, clean, hitch::tensor_view<float>(other));
    const auto before = state_of(st);
    bucket = data_of(n, 1, me, false);
    if (me == p - 1) bucket[n / 2] = std::numeric_limits<float>::quiet_NaN();
    bool threw = false;
    try {
        x(g, codec, st, hitch::tensor_view<float>(bucket));
    } catch (const hc::non_finite_error& e) {
        threw = true;
        if (me != p - 1)  // the failing rank rethrows its codec's own error
            require(std::string(e.what()).find(std::to_string(p - 1)) != std::string::npos,
                    std::string("the error names the failing rank: ") + e.what());
    }
    require(threw,
            hitch::detail::concat(Codec::name, " ", x.label(), ": rank ", me, " did not throw non_finite_error"));
    require(state_of(st) == before,
            hitch::detail::concat(Codec::name, " ", x.label(), ": rank ", me, "'s state changed"));
    bucket = data_of(n, 2, me, false);
    other = bucket;
    x(g, codec, st, hitch::tensor_view<float>(bucket));
    x(g, codec, clean, hitch::tensor_view<float>(other));
    require(same_values(bucket, other),
            hitch::detail::concat(Codec::name, ": the call after a failure is a first call"));
}

/// Ranks with different bucket sizes: mismatch_error on every rank, before any encode.
template <hitch::communicator C, class Codec>
bool sparse_mismatch_everywhere(C& comm, const Codec& codec, const sparse_exchange& x) {
    hitch::allreduce::group g(comm);
    const std::size_t n = comm.rank() == 1 ? 101 : 100;
    auto st = hc::make_aggregation_state(codec, n);
    auto bucket = data_of(n, 0, comm.rank(), false);
    try {
        x(g, codec, st, hitch::tensor_view<float>(bucket));
    } catch (const hitch::mismatch_error&) {
        return true;
    }
    return false;
}

}  // namespace hitch_test
