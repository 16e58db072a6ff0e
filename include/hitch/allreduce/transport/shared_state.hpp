#pragma once
// hitch::allreduce::shared_state<C>: what the calls of one group on communicator C share, and attach_pipes(), which
// gives it the staged path's pipes when the communicator maps node memory.

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

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
};

/// Collective over `comm`: gives `state` the pipes of the transport's staged path when `comm` can map memory that
/// all its ranks share (comm::mpi with every rank on one node), and leaves it without otherwise.
template <communicator C>
void attach_pipes(C& comm, shared_state<C>& state) {
    if constexpr (maps_node_memory<C>) {
        const detail::pipes::layout shape = detail::pipes::layout_for(comm.size());
        if (comm.size() > 1 && shape.slots >= 2)
            if (auto memory = comm.map_node_memory(detail::pipes::part_bytes(comm.size(), shape)))
                state.pipes = std::make_shared<detail::pipes>(std::move(memory), comm.rank(), comm.size(), shape);
    }
}

}  // namespace hitch::allreduce
