#pragma once
// A comm::local whose ranks sit on nodes of the test's choosing and that counts what each rank sends across nodes:
// the tests of the two-level schedules and exchanges see a node layout (uneven, non-consecutive) on one process.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "forwarding.hpp"
#include "hitch/comm/agree.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/core/node_layout.hpp"

namespace hitch_test {

/// The world's nodes and what each world rank sent to ranks of other nodes.
struct node_map {
    std::vector<int> node_of_world;
    std::vector<std::atomic<long long>> cross_bytes;
    explicit node_map(std::vector<int> nodes) : node_of_world(std::move(nodes)), cross_bytes(node_of_world.size()) {}
    [[nodiscard]] int node(int world) const { return node_of_world[static_cast<std::size_t>(world)]; }
};

/// comm::local whose ranks sit on the nodes of a node_map (collective node_layout(), as comm::mpi's), counting the
/// bytes each rank sends across nodes. Communicators split from it keep the world ranks of their members.
class laid_out : public hitch_test::forwarding_communicator<laid_out, hitch::comm::local, node_map> {
    using forwarding = hitch_test::forwarding_communicator<laid_out, hitch::comm::local, node_map>;

public:
    using forwarding::isend;
    using typename forwarding::request;
    static constexpr std::string_view name = "laid_out";

    laid_out(hitch::comm::local inner, std::shared_ptr<node_map> map, int world_rank)
        : forwarding(std::move(inner), std::move(map)),
          world_rank_(world_rank),
          members_(hitch::comm::allgather_value(inner_, world_rank)) {}
    laid_out(hitch::comm::local inner, std::shared_ptr<node_map> map)
        : laid_out(inner.split(0, inner.rank()), map, inner.rank()) {}

    template <class T>
    [[nodiscard]] request isend(std::span<const T> data, int peer, int tag) {
        if (shared_->node(members_[static_cast<std::size_t>(peer)]) != shared_->node(world_rank_))
            shared_->cross_bytes[static_cast<std::size_t>(world_rank_)] += static_cast<long long>(data.size_bytes());
        return inner_.isend(data, peer, tag);
    }
    [[nodiscard]] laid_out split(int color, int key) { return {inner_.split(color, key), shared_, world_rank_}; }

    [[nodiscard]] hitch::node_layout node_layout() {
        hitch::node_layout out;
        std::vector<int> seen;  // world node ids in the order of their lowest member
        for (int w : hitch::comm::allgather_value(inner_, world_rank_)) {
            const auto it = std::find(seen.begin(), seen.end(), shared_->node(w));
            out.node_of_rank.push_back(static_cast<int>(it - seen.begin()));
            if (it == seen.end()) seen.push_back(shared_->node(w));
        }
        out.nodes = static_cast<int>(seen.size());
        return out;
    }

private:
    int world_rank_;
    std::vector<int> members_;  // group rank -> world rank
};
static_assert(hitch::communicator<laid_out> && hitch::has_node_layout<laid_out>);

}  // namespace hitch_test
