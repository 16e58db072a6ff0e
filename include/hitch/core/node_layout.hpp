#pragma once
// hitch::node_layout: which node (machine) each rank of a communicator runs on. Ranks on one node can share
// memory; a schedule that knows the layout keeps its heavy traffic inside nodes (hierarchical, the staged path).

#include <cstddef>
#include <vector>

namespace hitch {

struct node_layout {
    /// node_of_rank[r]: the node rank r runs on, in [0, nodes); nodes are numbered in the order of their lowest rank.
    std::vector<int> node_of_rank;
    int nodes = 0;

    [[nodiscard]] int node_of(int rank) const { return node_of_rank.at(static_cast<std::size_t>(rank)); }
    /// Ranks on `node`, ascending.
    [[nodiscard]] std::vector<int> ranks_on(int node) const {
        std::vector<int> out;
        for (std::size_t r = 0; r < node_of_rank.size(); ++r)
            if (node_of_rank[r] == node) out.push_back(static_cast<int>(r));
        return out;
    }
    [[nodiscard]] bool single_node() const noexcept { return nodes == 1; }
    /// Rank r's place among the ranks of its node (0 for the lowest), as Horovod's local_rank: the index of the
    /// device a rank binds to when each node has one per rank.
    [[nodiscard]] int local_rank(int rank) const {
        const int node = node_of(rank);
        int below = 0;
        for (int r = 0; r < rank; ++r)
            if (node_of_rank[static_cast<std::size_t>(r)] == node) ++below;
        return below;
    }
    /// How many ranks run on rank r's node.
    [[nodiscard]] int local_size(int rank) const {
        const int node = node_of(rank);
        int n = 0;
        for (int on : node_of_rank)
            if (on == node) ++n;
        return n;
    }

    friend bool operator==(const node_layout&, const node_layout&) = default;
};

/// p ranks in nodes of g consecutive ranks (the last may hold fewer): a layout of the caller's choosing, as
/// hierarchical's ranks_per_group makes.
[[nodiscard]] inline node_layout consecutive_nodes(int p, int g) {
    node_layout out;
    for (int r = 0; r < p; ++r) out.node_of_rank.push_back(r / g);
    out.nodes = (p + g - 1) / g;
    return out;
}

}  // namespace hitch
