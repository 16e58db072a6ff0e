#pragma once
// hitch::allreduce::shared_state<C>: what the calls of one group on communicator C share, and attach_pipes(), which
// gives it the staged path's pipes when the communicator maps node memory: over all its ranks when they share one
// node, over the ranks of each node (a sub-communicator per node) when they span several.

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/detail/pipes.hpp"
#include "hitch/allreduce/transport/scratch.hpp"
#include "hitch/concepts/communicator.hpp"

namespace hitch::allreduce {

/// What the calls on one communicator share: scratch memory, the cost constants `automatic` uses, objects schedules
/// build once per communicator (slots), and the staged path's pipes.
template <communicator C>
struct shared_state {
    scratch_arena arena;
    /// Typed objects kept per communicator (e.g. hierarchical's sub-communicators).
    slot_store slots;
    /// Guards `constants`, and the slots automatic keeps beside them (allreduce/automatic/decisions.hpp).
    mutable std::mutex m;
    std::optional<cost_constants> constants;
    /// The staged path's pipes (null unless the communicator's ranks share a node and it could map them).
    std::shared_ptr<detail::pipes> pipes;
    /// Ranks on several nodes: the pipes among this rank's node (null when it is alone there or the node could not
    /// map them), the node's sub-communicator they were mapped over, and each rank's place among the ranks of its
    /// node (local_of[r]; -1 for ranks on another node than this one). The transport's node_path uses them.
    std::shared_ptr<detail::pipes> node_pipes;
    std::shared_ptr<C> node_comm;
    std::vector<int> local_of;
    /// Why the ranks of a node could not map their pipes (the communicator's words, e.g. "rank 0: reserving ...
    /// bytes of shared memory ...: No space left on device"); empty when they could, or had nothing to map. The
    /// calls then take messages.
    std::string shared_memory_refusal;
};

namespace detail {

/// What `comm` says of its last refused mapping, where it says anything.
template <class C>
[[nodiscard]] std::string refusal_of(const C& comm) {
    if constexpr (requires { comm.node_memory_refusal(); })
        return std::string(comm.node_memory_refusal());
    else
        return "the communicator mapped no shared memory";
}

}  // namespace detail

/// Collective over `comm`: gives `state` the pipes of the transport's staged path when `comm` can map memory that
/// all its ranks share (comm::mpi with every rank on one node); when its ranks span several nodes and some node
/// holds more than one of them, the pipes among each node's ranks instead (node_pipes: one mapping per node, made
/// over a sub-communicator of that node, none across nodes); nothing otherwise.
template <communicator C>
void attach_pipes(C& comm, shared_state<C>& state) {
    if constexpr (maps_node_memory<C>) {
        if (comm.size() <= 1) return;
        const node_layout layout = node_layout_of(comm);
        if (!has_node_layout<C> || layout.single_node()) {
            const detail::pipes::layout shape = detail::pipes::layout_for(comm.size());
            if (shape.slots >= 2) {
                if (auto memory = comm.map_node_memory(detail::pipes::part_bytes(comm.size(), shape)))
                    state.pipes = std::make_shared<detail::pipes>(std::move(memory), comm.rank(), comm.size(), shape);
                else
                    state.shared_memory_refusal = detail::refusal_of(comm);
            }
            return;
        }
        if (layout.nodes == comm.size()) return;  // one rank per node: nobody to share memory with
        auto node = std::make_shared<C>(comm.split(layout.node_of(comm.rank()), comm.rank()));
        const int n = node->size();
        const detail::pipes::layout shape = detail::pipes::layout_for(n);
        if (n <= 1 || shape.slots < 2) return;  // the node's map_node_memory is collective over its ranks only
        auto memory = node->map_node_memory(detail::pipes::part_bytes(n, shape));
        if (memory == nullptr) {  // agreed on the node: its ranks all take messages
            state.shared_memory_refusal = detail::refusal_of(*node);
            return;
        }
        state.node_pipes = std::make_shared<detail::pipes>(std::move(memory), node->rank(), n, shape);
        state.local_of.assign(static_cast<std::size_t>(comm.size()), -1);
        const int mine = layout.node_of(comm.rank());
        for (int r = 0, l = 0; r < comm.size(); ++r)
            if (layout.node_of(r) == mine) state.local_of[static_cast<std::size_t>(r)] = l++;
        state.node_comm = std::move(node);
    }
}

}  // namespace hitch::allreduce
