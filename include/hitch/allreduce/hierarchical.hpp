#pragma once
// hitch::allreduce::hierarchical<Intra, Inter>: ranks form groups, by default the nodes of the communicator's node
// layout (node_layout_of: comm::mpi's shared-memory split, comm::simulated's topology). Each group reduces to its
// leader (its lowest rank) with Intra, the leaders all-reduce among themselves with Inter, and each leader
// broadcasts the result back to its group with Intra (the two-level scheme of hierarchical all-reduce in Horovod
// and of Jia et al. 2018). Only one rank per node crosses the slow level, with the whole buffer once. Nodes need
// not be of one size nor hold consecutive ranks. On one node Intra runs alone; with one rank per node, Inter.
// options_type::ranks_per_group > 0 instead groups that many consecutive ranks, whatever the layout.
// The sub-communicators come from split() on the first call and are kept for later calls.
//
//   T(p, n) = T_Intra(g, n) + T_Inter(nodes, n)     (g: the largest group; T_Intra counts its reduce and broadcast)
//
// T_Intra is paid at the constants inside a node, T_Inter at those between nodes (cost_constants::inter_*).
// An average is summed across both levels and divided once by p at the leaders (for 16-bit types that is a
// second rounding after the sum).

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "hitch/allreduce/binary_tree.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/ring.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/core/options.hpp"

namespace hitch::allreduce {

template <class Intra = binary_tree, class Inter = ring>
class hierarchical {
public:
    struct options_type {
        /// 0: a group per node of the communicator's node layout. > 0: groups of that many consecutive ranks (the
        /// last may be smaller; >= the world size means a single group).
        int ranks_per_group = 0;
        typename Intra::options_type intra{};
        typename Inter::options_type inter{};

        void validate() const {
            option_validator("hitch::allreduce::hierarchical").closed("ranks_per_group", ranks_per_group, 0, 1 << 20);
            intra.validate();
            inter.validate();
        }

        friend bool operator==(const options_type&, const options_type&) = default;
    };

    static constexpr std::string_view name = "hierarchical";

    hierarchical() = default;
    explicit hierarchical(const options_type& o) : options_(o), intra_(o.intra), inter_(o.inter) {
        options_.validate();
    }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    /// The cost on ranks of the given shape (cost.hpp): groups by node take the shape's largest node and node
    /// count; consecutive groups take ranks_per_group and are costed as nodes.
    [[nodiscard]] cost_estimate cost(const level_shape& shape, std::size_t n_bytes, const cost_constants& k) const {
        const int p = std::max(shape.ranks, 1);
        int g = std::clamp(shape.largest_node, 1, p);
        int groups = std::max(shape.nodes, 1);
        if (options_.ranks_per_group > 0) {
            g = std::min(options_.ranks_per_group, p);
            groups = (p + g - 1) / g;
        }
        if (groups <= 1) return intra_.cost(p, n_bytes, k);
        if (g <= 1) return across_nodes(inter_.cost(p, n_bytes, k));
        const cost_estimate a = intra_.cost(g, n_bytes, k);
        const cost_estimate b = across_nodes(inter_.cost(groups, n_bytes, k));
        cost_estimate c;
        c.latency_terms = a.latency_terms + b.latency_terms;
        c.bandwidth_bytes = a.bandwidth_bytes + b.bandwidth_bytes;
        c.inter_latency_terms = a.inter_latency_terms + b.inter_latency_terms;
        c.inter_bandwidth_bytes = a.inter_bandwidth_bytes + b.inter_bandwidth_bytes;
        c.reduced_bytes = a.reduced_bytes + b.reduced_bytes;
        c.sent_messages = a.sent_messages + b.sent_messages;
        c.sent_bytes = a.sent_bytes + b.sent_bytes;
        return c;
    }
    [[nodiscard]] cost_estimate cost(const node_layout& layout, std::size_t n_bytes, const cost_constants& k) const {
        return cost(level_shape::of(layout), n_bytes, k);
    }
    /// Without a layout, groups by node take the p ranks as one node (what they run on comm::local): Intra alone.
    [[nodiscard]] cost_estimate cost(int p, std::size_t n_bytes, const cost_constants& k = {}) const {
        return cost(level_shape::one_node(p), n_bytes, k);
    }

    template <communicator C, floating_element T>
    void run(transport<C>& t, std::span<T> data, reduce_op op) const {
        static_assert(rooted_schedule_for<Intra, C>,
                      "hitch::allreduce::hierarchical<Intra, Inter>: Intra must offer reduce() and broadcast() "
                      "(binary_tree and ring do)");
        static_assert(schedule_for<Inter, C>,
                      "hitch::allreduce::hierarchical<Intra, Inter>: Inter must model hitch::allreduce_schedule");
        const int p = t.size();
        if (p <= 1) return;
        const int g = std::min(options_.ranks_per_group, p);
        const std::string key = g > 0 ? detail::concat("hierarchical/", g) : std::string("hierarchical/nodes");
        auto levels = t.state().slots.get_or_make(slot_key<state<C>>{key}, [&] {
            return std::make_shared<state<C>>(t.comm(), g > 0 ? consecutive_nodes(p, g) : node_layout_of(t.comm()));
        });
        if (levels->shape == state<C>::one_group) return intra_.run(t, data, op);
        if (levels->shape == state<C>::singletons) return inter_.run(t, data, op);
        const reduce_op level_op = op == reduce_op::average ? reduce_op::sum : op;
        transport<C> intra(*levels->intra, t.sequence(), t.limit(), t.shared_memory(), levels->intra_state);
        intra_.reduce(intra, std::span<const T>(data), data, level_op, 0);
        if (levels->intra->rank() == 0) {
            transport<C> inter(*levels->leaders, t.sequence(), t.limit(), t.shared_memory(), levels->leaders_state);
            inter_.run(inter, data, level_op);
            if (op == reduce_op::average) divide(data.data(), data.size(), p);
        }
        intra_.broadcast(intra, data, 0);
    }

private:
    /// The groups' sub-communicators (collective to make: every rank splits in the same first call).
    template <class C>
    struct state {
        enum kind { one_group, singletons, two_levels };
        state(C& comm, const node_layout& groups) {
            const level_shape s = level_shape::of(groups);
            shape = s.nodes <= 1 ? one_group : s.largest_node <= 1 ? singletons : two_levels;
            if (shape != two_levels) return;
            const int me = comm.rank();
            const bool leader = groups.local_rank(me) == 0;  // the lowest rank of its group
            intra.emplace(comm.split(groups.node_of(me), me));
            leaders.emplace(comm.split(leader ? 0 : 1, me));
            attach_pipes(*intra, intra_state);
            attach_pipes(*leaders, leaders_state);
        }
        kind shape = one_group;
        std::optional<C> intra;
        std::optional<C> leaders;  // for non-leaders: the other ranks' communicator, unused
        shared_state<C> intra_state;
        shared_state<C> leaders_state;
    };

    options_type options_{};
    Intra intra_{};
    Inter inter_{};
};

static_assert(schedule_for<hierarchical<>, comm::local>,
              "hitch::allreduce::hierarchical must model hitch::allreduce_schedule on comm::local");

}  // namespace hitch::allreduce
