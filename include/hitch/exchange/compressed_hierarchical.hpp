#pragma once
// The hierarchical shape for the compressed exchange (onebit, qsgd, terngrad and their error_feedback): only the
// nodes' leaders send compressed messages across nodes, where bandwidth is scarce; inside a node the bucket moves
// exactly.
//
// Each node's lowest rank is its leader. The other ranks of the node send their bucket (floats, exact) to the
// leader, which sums the node's buckets in ascending rank order. The leaders run the compression-aware ring
// (exchange/compressed_ring.hpp, the same code) among themselves, in node order, with their residuals. Each leader
// sends the ring's final messages to the ranks of its node, and every rank decodes the same messages, so the result
// is the same bits everywhere. Nodes may be of different sizes and hold non-consecutive ranks. With one node
// nothing is compressed: the result is the exact sum (in rank order), sent back as floats. With one rank per node
// it is the compressed ring over all ranks, bit for bit. Only leaders keep hop residuals (the others' stay as
// they are); with hop feedback, sum over leaders of (node sum + old residual) = result + sum of new residuals.
// A rank whose bucket holds NaN or an infinity fails the call on every rank, naming itself.
//
// Cost with b bits per element on the wire, N nodes of at most g ranks (the node's transfers run one after another
// at the leader, at the constants inside a node, alpha and beta; the ring at those between nodes, alpha' and beta'):
//
//   T = 2 (g - 1) alpha + (g - 1) (4 n + n b / 8) beta + 2 (N - 1) alpha' + 2 (N - 1) / N n b / 8 beta'
//
// (on one node the return carries the 4 n bytes of the exact sum instead of the N messages).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/aggregation.hpp"
#include "hitch/exchange/detail/bucket.hpp"
#include "hitch/exchange/detail/compressed_hops.hpp"

namespace hitch::compress {

namespace detail {

/// A layout of p ranks over nodes [0, nodes), none empty; config_error names the field otherwise.
inline void require_layout(const node_layout& nodes, int p) {
    const auto fail = [](auto&&... what) {
        throw config_error(hitch::detail::concat(aggregate_who, ": compressed hierarchical: ", what...));
    };
    if (static_cast<int>(nodes.node_of_rank.size()) != p)
        fail("nodes.node_of_rank has ", nodes.node_of_rank.size(), " entries for ", p, " ranks");
    if (nodes.nodes < 1 || nodes.nodes > p) fail("nodes.nodes is ", nodes.nodes, ", not in [1, ", p, "]");
    std::vector<int> count(static_cast<std::size_t>(nodes.nodes), 0);
    for (int r = 0; r < p; ++r) {
        const int node = nodes.node_of(r);
        if (node < 0 || node >= nodes.nodes)
            fail("nodes.node_of_rank[", r, "] is ", node, ", not in [0, ", nodes.nodes, ")");
        ++count[static_cast<std::size_t>(node)];
    }
    for (int k = 0; k < nodes.nodes; ++k)
        if (count[static_cast<std::size_t>(k)] == 0) fail("nodes.nodes is ", nodes.nodes, " but node ", k, " is empty");
}

[[nodiscard]] inline std::uint64_t layout_fingerprint(const node_layout& nodes) {
    std::uint64_t x = 0x84222325cbf29ce4ull;
    for (int node : nodes.node_of_rank) x = (x ^ static_cast<std::uint64_t>(node + 1)) * 0x100000001b3ull;
    return x;
}

/// The values as the bytes of a message.
inline void floats_to_bytes(std::span<const float> values, std::vector<std::byte>& out) {
    out.resize(values.size_bytes());
    if (!values.empty()) std::memcpy(out.data(), values.data(), values.size_bytes());
}

}  // namespace detail

/// The exact sum inside each node, the compression-aware ring among the nodes' leaders, the leaders' final
/// messages back to their nodes (see the file comment). `nodes` is the same layout on every rank (checked).
template <communicator C, compressor Codec, floating_element T>
aggregation_stats aggregate_compressed_hierarchical(allreduce::group<C>& g, const Codec& codec,
                                                    aggregation_state<Codec>& s, tensor_view<T> bucket,
                                                    const node_layout& nodes, const aggregate_options& options = {}) {
    const detail::hops<Codec> h = detail::hops_of(codec, s);
    detail::require_bucket(bucket, s.count);
    const int p = g.size(), me = g.rank();
    detail::require_layout(nodes, p);
    detail::set_stream(h.state, me);
    const std::span<float> mine = detail::float_view(bucket, s.scratch);
    const std::size_t n = s.count;
    const int q = nodes.nodes, node = nodes.node_of(me);
    const std::vector<int> members = nodes.ranks_on(node);
    const int leader = members.front();
    std::vector<int> leaders;
    for (int k = 0; k < q; ++k) leaders.push_back(nodes.ranks_on(k).front());
    s.accumulator.resize(n);
    s.messages.resize(static_cast<std::size_t>(q));
    aggregation_stats stats{aggregation_path::compressed_ring, exchange_kind::compressed_hierarchical, 0, 0};
    detail::exchange_status status(me);
    const allreduce::call_options call = detail::compressed_call<typename detail::hops<Codec>::codec_type>(
        options, n, detail::layout_fingerprint(nodes));
    const std::span<std::vector<std::byte>> all(s.messages.data(), s.messages.size());

    g.run(call, detail::exchange_descriptor<T>(n, call.fingerprint, "compressed_hierarchical"),
          [&](allreduce::transport<C>& t, const allreduce::call_descriptor&) {
              detail::hop_link<C> link(t, status);
              // Only leaders encode; every rank answers for its own bucket.
              status.attempt([&] {
                  for (std::size_t i = 0; i < n; ++i)
                      if (!std::isfinite(mine[i]))
                          throw non_finite_error(hitch::detail::concat(
                              detail::aggregate_who, ": compressed hierarchical: element ", i, " of rank ", me,
                              "'s bucket is ", mine[i], "; every rank stops here and no state changed"));
              });
              if (me != leader) {
                  if (status.ok()) detail::floats_to_bytes(mine, s.message);
                  stats.message_bytes = n * sizeof(float);
                  link.send(leader, detail::one(s.message));
                  if (q == 1) {
                      if (link.receive(leader, detail::one(s.message)))
                          std::memcpy(s.accumulator.data(), s.message.data(), n * sizeof(float));
                  } else {
                      link.receive(leader, all);
                  }
                  stats.sent_bytes = link.sent_bytes();
                  return;
              }
              s.shape_values.assign(mine.begin(), mine.end());
              for (std::size_t k = 1; k < members.size(); ++k) {
                  const int from = members[k];
                  if (!link.receive(from, detail::one(s.message))) continue;
                  status.attempt([&] {
                      if (s.message.size() != n * sizeof(float))
                          throw mismatch_error(hitch::detail::concat(
                              detail::aggregate_who, ": compressed hierarchical: rank ", from, " sent ",
                              s.message.size() / sizeof(float), " elements to its leader, which has ", n));
                      for (std::size_t i = 0; i < n; ++i) {
                          float v;
                          std::memcpy(&v, s.message.data() + i * sizeof(float), sizeof(float));
                          s.shape_values[i] += v;
                      }
                  });
              }
              if (q == 1) {
                  std::copy(s.shape_values.begin(), s.shape_values.end(), s.accumulator.begin());
                  if (status.ok()) detail::floats_to_bytes(s.shape_values, s.message);
                  stats.message_bytes = n * sizeof(float);
                  for (std::size_t k = 1; k < members.size(); ++k) link.send(members[k], detail::one(s.message));
              } else {
                  stats.message_bytes =
                      detail::ring_among(link, h, leaders, node, s.shape_values, s.accumulator, s.messages);
                  for (std::size_t k = 1; k < members.size(); ++k) link.send(members[k], all);
              }
              stats.sent_bytes = link.sent_bytes();
          });
    status.throw_if_failed("compressed hierarchical");
    if (q > 1) detail::decode_blocks(h, s.messages, q, s.accumulator);
    h.finish(q > 1 && me == leader);
    detail::write_result(s.accumulator, bucket, options.average, p);
    return stats;
}

}  // namespace hitch::compress
