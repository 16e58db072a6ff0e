#pragma once
// Which compressed exchange a codec and a schedule make together (exchange/aggregate.hpp runs it). A schedule
// lends its shape to the codecs whose messages cannot be summed by its all-reduce:
//
//   codec's path (aggregation_path_of)   ring                recursive_doubling          rabenseifner
//   allreduce (none, fp16, bf16, randomk)   every schedule: its own all-reduce of the encoded elements
//   low_rank (powersgd)                     every schedule: its own all-reduce of P and of Q
//   compressed_ring (onebit, qsgd, terngrad)
//                                        compressed_ring     -                           compressed_halving_doubling
//   allgather (topk, threshold, dgc, yours)
//                                        allgather_ring      sparse_recursive_doubling   -
//
// hierarchical gives compressed_hierarchical or sparse_hierarchical, and automatic chooses among a path's
// exchanges with the cost model of exchange/exchange_cost.hpp. Any other pairing (the trees, the parameter server,
// native, a schedule of your own) is refused: at compile time where the schedule is a type (schedule_pairing), at
// run time with config_error where a schedule chooses its shape at run time (exchange_shape()), never a silent
// substitution.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "hitch/allreduce/automatic.hpp"
#include "hitch/allreduce/hierarchical.hpp"
#include "hitch/allreduce/rabenseifner.hpp"
#include "hitch/allreduce/recursive_doubling.hpp"
#include "hitch/allreduce/ring.hpp"
#include "hitch/core/error.hpp"
#include "hitch/exchange/aggregation.hpp"

namespace hitch::compress {

/// The shape a schedule lends to the compressed exchanges.
enum class exchange_shape : std::uint8_t {
    none = 0,  ///< no compressed form (the trees, the parameter server, native, schedules of your own)
    ring,
    recursive_doubling,
    halving_doubling,
    hierarchical,
    automatic,
};

[[nodiscard]] constexpr std::string_view name(exchange_shape s) noexcept {
    switch (s) {
        case exchange_shape::none:
            return "none";
        case exchange_shape::ring:
            return "ring";
        case exchange_shape::recursive_doubling:
            return "recursive_doubling";
        case exchange_shape::halving_doubling:
            return "rabenseifner";
        case exchange_shape::hierarchical:
            return "hierarchical";
        case exchange_shape::automatic:
            return "automatic";
    }
    return "invalid-shape";
}

/// The shape of schedule type S. A schedule that picks among others at run time instead has a member
/// `exchange_shape() -> hitch::compress::exchange_shape` (see shape_chosen_at_run_time).
template <class S>
inline constexpr exchange_shape exchange_shape_of = exchange_shape::none;
template <>
inline constexpr exchange_shape exchange_shape_of<allreduce::ring> = exchange_shape::ring;
template <>
inline constexpr exchange_shape exchange_shape_of<allreduce::recursive_doubling> = exchange_shape::recursive_doubling;
template <>
inline constexpr exchange_shape exchange_shape_of<allreduce::rabenseifner> = exchange_shape::halving_doubling;
template <class Intra, class Inter>
inline constexpr exchange_shape exchange_shape_of<allreduce::hierarchical<Intra, Inter>> = exchange_shape::hierarchical;
template <>
inline constexpr exchange_shape exchange_shape_of<allreduce::automatic> = exchange_shape::automatic;

/// A schedule that says its shape at run time (one chosen by name, as the example trainers' is).
template <class S>
concept shape_chosen_at_run_time = requires(const S& s) {
    { s.exchange_shape() } -> std::same_as<exchange_shape>;
};

/// The exchange a codec of `path` runs with a schedule of `shape`; nullopt where the pairing is not offered. For
/// the all-reduce paths, the schedule's own all-reduce; for `automatic`, the choice is made per call
/// (choose_exchange), so this gives the path's first exchange.
[[nodiscard]] constexpr std::optional<exchange_kind> exchange_for(aggregation_path path,
                                                                  exchange_shape shape) noexcept {
    if (path == aggregation_path::allreduce) return exchange_kind::allreduce;
    if (path == aggregation_path::low_rank) return exchange_kind::low_rank;
    const bool ring = path == aggregation_path::compressed_ring;
    switch (shape) {
        case exchange_shape::ring:
        case exchange_shape::automatic:
            return ring ? exchange_kind::compressed_ring : exchange_kind::allgather_ring;
        case exchange_shape::recursive_doubling:
            if (ring) return std::nullopt;
            return exchange_kind::sparse_recursive_doubling;
        case exchange_shape::halving_doubling:
            if (!ring) return std::nullopt;
            return exchange_kind::compressed_halving_doubling;
        case exchange_shape::hierarchical:
            return ring ? exchange_kind::compressed_hierarchical : exchange_kind::sparse_hierarchical;
        case exchange_shape::none:
            break;
    }
    return std::nullopt;
}

/// The schedules a codec of `path` goes with, for messages.
[[nodiscard]] constexpr std::string_view schedules_for(aggregation_path path) noexcept {
    switch (path) {
        case aggregation_path::compressed_ring:
            return "ring, rabenseifner, hierarchical or automatic";
        case aggregation_path::allgather:
            return "ring, recursive_doubling, hierarchical or automatic";
        case aggregation_path::allreduce:
        case aggregation_path::low_rank:
            break;
    }
    return "every schedule";
}

/// The compile-time check of a codec and a schedule type: instantiating it with a pairing that is not offered is
/// an error whose context names both types.
template <class Codec, class Schedule>
struct schedule_pairing {
    static constexpr aggregation_path path = aggregation_path_of<Codec>;
    static constexpr bool offered =
        shape_chosen_at_run_time<Schedule> || exchange_for(path, exchange_shape_of<Schedule>).has_value();
    static_assert(offered || path != aggregation_path::compressed_ring,
                  "hitch::compress::aggregate: this codec is summed by the compressed ring (onebit, qsgd, terngrad "
                  "and their error_feedback): it goes with the ring, rabenseifner, hierarchical or automatic schedule, "
                  "and this schedule has no compressed form for it (docs/compression.md has the table)");
    static_assert(offered || path != aggregation_path::allgather,
                  "hitch::compress::aggregate: this codec's messages are gathered, not summed in transit (topk, "
                  "threshold, dgc, a codec of your own): it goes with the ring, recursive_doubling, hierarchical or "
                  "automatic schedule, and this schedule has no sparse form for it (docs/compression.md has the "
                  "table)");
};

/// The run-time check: config_error naming the codec and the schedule when they do not go together.
inline void require_pairing(aggregation_path path, exchange_shape shape, std::string_view codec_name,
                            std::string_view schedule_name) {
    if (exchange_for(path, shape)) return;
    throw config_error(hitch::detail::concat("the codec ", codec_name, " does not go with the schedule ", schedule_name,
                                             ": ", codec_name, " goes with ", schedules_for(path),
                                             " (docs/compression.md has the table)"));
}

}  // namespace hitch::compress
