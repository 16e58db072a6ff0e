#pragma once
// How an update rule says it can step a piece of a layer (a sub-range of its elements), which is what sharded
// optimizer state needs (optim::sharded_optimizer, hitch/optim/sharded.hpp: each rank keeps the state of, and
// steps, only its pieces). A rule is one of two kinds:
//
//   elementwise_rule<O>    each element's update reads only that element (and per-layer scalars such as the step
//                          count), so o.step() on a piece is the whole layer's step restricted to it. The rule
//                          says so: `static constexpr bool elementwise = true;` (sgd, momentum, adam, adamw).
//   layerwise_rule<O, D>   the update needs sums over the whole layer (the norms of LARS and LAMB), so the step
//                          comes in two phases that the caller separates by an all-reduce of the sums:
//                            o.norm_sums(piece, state, exec) -> std::array<double, 2>
//                                this piece's partial sums (may also update state, as LAMB's moments);
//                            o.apply_with_sums(piece, state, lr, sums, exec)
//                                the rest of the step, with the whole layer's sums (the sum over all pieces).
//                          Phase 1 then phase 2 on a whole layer is o.step() on it (lars, lamb, and one_of over
//                          rules of either kind).

#include <array>
#include <concepts>

#include "hitch/concepts/device.hpp"
#include "hitch/concepts/optimizer.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/parallel.hpp"

namespace hitch::optim {

/// The per-layer sums a layer-wise rule reduces across the pieces of a layer (e.g. ||w||^2 and ||g||^2).
using layer_sums = std::array<double, 2>;

/// O's step on a piece of a layer is the layer's step restricted to that piece.
template <class O>
concept elementwise_rule = requires {
    { O::elementwise } -> std::convertible_to<bool>;
} && static_cast<bool>(O::elementwise);

/// O steps in two phases joined by per-layer sums (see the file comment).
template <class O, class D = host_device_archetype>
concept layerwise_rule = requires(const O& o, const layer& l, typename O::template state_type<D>& s, float lr,
                                  layer_sums sums, const parallel_options& p) {
    { o.norm_sums(l, s, p) } -> std::same_as<layer_sums>;
    o.apply_with_sums(l, s, lr, sums, p);
};

/// An optimizer on D whose state can be sharded across ranks.
template <class O, class D = host_device_archetype>
concept shardable_rule = optimizer_on<O, D> && (elementwise_rule<O> || layerwise_rule<O, D>);

/// Returns true when O models shardable_rule<O, D>; otherwise fails to compile with one sentence saying what to
/// add.
template <class O, class D = host_device_archetype>
consteval bool check_shardable_rule() {
    if constexpr (!optimizer_on<O, D>) {
        return check_optimizer<O, D>();
    } else if constexpr (!(elementwise_rule<O> || layerwise_rule<O, D>)) {
        static_assert(elementwise_rule<O> || layerwise_rule<O, D>,
                      "hitch::optim::sharded_optimizer: the rule cannot step a piece of a layer: add `static "
                      "constexpr bool elementwise = true;` if each element's update reads only that element, or, "
                      "if it needs sums over the whole layer, `std::array<double, 2> norm_sums(const hitch::layer&, "
                      "state_type<D>&, const hitch::parallel_options&) const` and `void apply_with_sums(const "
                      "hitch::layer&, state_type<D>&, float lr, std::array<double, 2> sums, const "
                      "hitch::parallel_options&) const` (see hitch/optim/split_step.hpp)");
    }
    return true;
}

}  // namespace hitch::optim
