#pragma once
// The two-level sparse exchange of the compressed exchange, for all-gather codecs: each node's lowest rank is its
// leader; the other ranks of the node send their sparse sets to it (peers on one node go through shared memory
// where the transport has it), the leader merges them in ascending rank order, the leaders run the sparse
// recursive doubling among themselves (exchange/sparse_recursive_doubling.hpp) and each leader hands the result to
// its node. Only leaders send between nodes, once per round; the merge at the leader also lets overlapping supports
// collapse before they cross the slow level. Nodes may be uneven and hold non-consecutive ranks.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "hitch/allreduce/group.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/aggregation.hpp"
#include "hitch/exchange/detail/sparse_set.hpp"
#include "hitch/exchange/sparse_recursive_doubling.hpp"

namespace hitch::compress {

/// Sparse sets merged at each node's leader, sparse recursive doubling among the leaders, the result back to the
/// nodes (see the file comment). `nodes` is the node of every rank of g (e.g. g.comm().node_layout()); every rank
/// must pass the same layout (checked with the call's agreement).
template <communicator C, compressor Codec, floating_element T>
aggregation_stats aggregate_sparse_hierarchical(allreduce::group<C>& g, const Codec& codec, aggregation_state<Codec>& s,
                                                tensor_view<T> bucket, const node_layout& nodes,
                                                const aggregate_options& options = {}) {
    const int p = g.size(), me = g.rank();
    if (nodes.node_of_rank.size() != static_cast<std::size_t>(p))
        throw config_error(hitch::detail::concat(detail::aggregate_who,
                                                 ": sparse_hierarchical: nodes.node_of_rank has ",
                                                 nodes.node_of_rank.size(), " entries for a group of ", p, " ranks"));
    std::uint64_t layout_hash = 0xcbf29ce484222325ull;
    for (int node : nodes.node_of_rank) {
        if (node < 0 || node >= nodes.nodes)
            throw config_error(hitch::detail::concat(detail::aggregate_who,
                                                     ": sparse_hierarchical: nodes.node_of_rank holds node ", node,
                                                     "; nodes are numbered [0, nodes.nodes = ", nodes.nodes, ")"));
        layout_hash = (layout_hash ^ static_cast<std::uint64_t>(node)) * 0x100000001b3ull;
    }
    const std::vector<int> members = nodes.ranks_on(nodes.node_of(me));
    const int leader = members.front();
    std::vector<int> leaders;  // ascending: the first rank seen of each node
    std::vector<bool> seen(static_cast<std::size_t>(nodes.nodes), false);
    for (int r = 0; r < p; ++r)
        if (!seen[static_cast<std::size_t>(nodes.node_of(r))]) {
            seen[static_cast<std::size_t>(nodes.node_of(r))] = true;
            leaders.push_back(r);
        }
    return detail::run_sparse_exchange(
        g, codec, s, bucket, options, "sparse_hierarchical", exchange_kind::sparse_hierarchical, layout_hash,
        [&](detail::sparse_messages<C>& msg, detail::sparse_set& set) {
            const std::size_t n = s.count;
            if (me != leader) {
                msg.step(leader, &set, -1, nullptr);
                msg.step(-1, nullptr, leader, &set);
                return;
            }
            detail::sparse_set& incoming = s.sparse_received;
            detail::sparse_set& merged = s.sparse_merged;
            for (std::size_t j = 1; j < members.size(); ++j)
                if (msg.step(-1, nullptr, members[j], &incoming)) {
                    detail::merge(set, incoming, n, merged);
                    std::swap(set, merged);
                }
            detail::sparse_recursive_doubling(msg, std::span<const int>(leaders), me, n, set, incoming, merged);
            for (std::size_t j = 1; j < members.size(); ++j) msg.step(members[j], &set, -1, nullptr);
        });
}

}  // namespace hitch::compress
