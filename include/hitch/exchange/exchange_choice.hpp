#pragma once
// Which exchange one compressed call runs (exchange/aggregate.hpp): the schedule's shape (exchange/pairing.hpp),
// and for `automatic` the exchange of the codec's path with the least modelled time (exchange/exchange_cost.hpp).
// The choice depends only on what every rank has alike (the bucket's size, the codec's options, the node layout,
// the group's agreed cost constants), so every rank runs the same exchange; the agreement check of the exchange's
// call catches a rank that differs.

#include <array>
#include <cstddef>
#include <limits>
#include <span>
#include <string_view>

#include "hitch/allreduce/automatic.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/hierarchical.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/exchange/aggregation.hpp"
#include "hitch/exchange/exchange_cost.hpp"
#include "hitch/exchange/pairing.hpp"

namespace hitch::compress {

/// The exchange of one call, and the nodes a hierarchical one groups by.
struct exchange_choice {
    exchange_kind exchange = exchange_kind::allgather_ring;
    node_layout nodes;
};

/// The exchanges `automatic` weighs for a path, the flat ones first (ties go to the earlier).
[[nodiscard]] constexpr std::array<exchange_kind, 3> exchanges_of(aggregation_path path) noexcept {
    if (path == aggregation_path::compressed_ring)
        return {exchange_kind::compressed_ring, exchange_kind::compressed_halving_doubling,
                exchange_kind::compressed_hierarchical};
    return {exchange_kind::allgather_ring, exchange_kind::sparse_recursive_doubling,
            exchange_kind::sparse_hierarchical};
}

/// The exchange with the least modelled time among the path's, for n elements in messages of m bytes on ranks of
/// `shape`. The hierarchical one is weighed only on two levels (more than one node, more than one rank on one).
[[nodiscard]] inline exchange_kind cheapest_exchange(aggregation_path path, const allreduce::level_shape& shape,
                                                     std::size_t n, double m, const cost_constants& k) {
    exchange_kind best = exchanges_of(path)[0];
    double best_s = std::numeric_limits<double>::infinity();
    for (const exchange_kind e : exchanges_of(path)) {
        const bool by_node = e == exchange_kind::compressed_hierarchical || e == exchange_kind::sparse_hierarchical;
        if (by_node && !shape.two_level()) continue;
        const double s = exchange_cost(e, shape, n, m).seconds(k);
        if (s < best_s) {
            best_s = s;
            best = e;
        }
    }
    return best;
}

namespace detail {

template <class S>
struct is_hierarchical : std::false_type {};
template <class Intra, class Inter>
struct is_hierarchical<allreduce::hierarchical<Intra, Inter>> : std::true_type {};

/// The name a message gives the schedule: the one it chose at run time, else its type's.
template <class Schedule>
[[nodiscard]] std::string_view schedule_name(const Schedule& schedule) {
    if constexpr (requires { schedule.chosen(); })
        return schedule.chosen();
    else
        return Schedule::name;
}

}  // namespace detail

/// The exchange a call of `aggregate` runs for Codec over `schedule` (see the file comment).
template <communicator C, compressor Codec, class Schedule>
[[nodiscard]] exchange_choice choose_exchange(allreduce::group<C>& g, const Codec& codec, std::size_t n,
                                              const Schedule& schedule) {
    constexpr aggregation_path path = aggregation_path_of<Codec>;
    exchange_shape shape = exchange_shape_of<Schedule>;
    if constexpr (shape_chosen_at_run_time<Schedule>) {
        shape = schedule.exchange_shape();
        require_pairing(path, shape, Codec::name, detail::schedule_name(schedule));
    }
    exchange_choice out;
    const auto layout = [&] {
        if constexpr (detail::is_hierarchical<Schedule>::value)
            if (schedule.options().ranks_per_group > 0)
                return consecutive_nodes(g.size(), schedule.options().ranks_per_group);
        return node_layout_of(g.comm());
    };
    if (shape == exchange_shape::hierarchical) {
        out.nodes = layout();
        out.exchange = *exchange_for(path, shape);
    } else if (shape == exchange_shape::automatic && g.size() > 1) {
        out.nodes = layout();
        cost_constants k = g.constants().value_or(cost_constants{});
        if constexpr (std::is_same_v<Schedule, allreduce::automatic>)
            if (schedule.options().constants) k = *schedule.options().constants;
        out.exchange = cheapest_exchange(path, allreduce::level_shape::of(out.nodes), n,
                                         static_cast<double>(codec.max_message_bytes(n)), k);
    } else {
        out.exchange = *exchange_for(path, shape);
    }
    return out;
}

}  // namespace hitch::compress
