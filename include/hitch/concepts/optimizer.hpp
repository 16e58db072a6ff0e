#pragma once
// hitch::optimizer<O>: a per-layer update rule with typed per-layer state. Modelled by optim::sgd, momentum, adam,
// adamw, lars<Base> and lamb; a user's rule plugs in by offering the same members.
//
//   O::options_type                      typed hyper-parameters, validated by O's constructor (config_error)
//   O(options), o.options()
//   O::id() -> std::string               names the rule in saved state ("adam", "lars<momentum>")
//   O::state_type<D>                     one layer's state on device D (e.g. Adam's m and v), with
//       s.steps                          std::uint64_t: the number of steps this layer has taken
//       s.buffers()                      a range of tensor_view<float>: every tensor of the state, for save/load
//   o.make_state(device, n) -> state_type<D>                     zeroed state for a layer of n parameters
//   o.step(layer, state, lr, parallel_options)                   one update of one layer, in place
//
// The step of one layer never touches another layer's state, so a parameter-server shard holding some whole
// layers can run the same rule on just those (see hitch/optim/model_optimizer.hpp for a whole model).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ranges>
#include <string>

#include "hitch/core/parallel.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/device/cpu.hpp"
#include "hitch/optim/layer.hpp"

namespace hitch {

template <class O>
concept optimizer_has_options = requires(const O& o) {
    typename O::options_type;
    requires std::constructible_from<O, typename O::options_type>;
    { o.options() } -> std::convertible_to<const typename O::options_type&>;
};

template <class O>
concept optimizer_has_id = requires {
    { O::id() } -> std::convertible_to<std::string>;
};

/// One layer's state: a step count and the tensors to save.
template <class S>
concept optimizer_state = std::movable<S> && requires(S& s) {
    { s.steps } -> std::convertible_to<std::uint64_t>;
    { s.buffers() } -> std::ranges::range;
    requires std::convertible_to<std::ranges::range_value_t<decltype(s.buffers())>, tensor_view<float>>;
};

template <class O>
concept optimizer_has_state = requires(const O& o, cpu& dev, std::size_t n) {
    typename O::template state_type<cpu>;
    requires optimizer_state<typename O::template state_type<cpu>>;
    { o.make_state(dev, n) } -> std::same_as<typename O::template state_type<cpu>>;
};

template <class O>
concept optimizer_has_step = requires(const O& o, const optim::layer& l, typename O::template state_type<cpu>& s,
                                      float lr, const parallel_options& p) {
    o.step(l, s, lr, p);
};

/// A per-layer update rule with typed per-layer state (see the file comment).
template <class O>
concept optimizer = std::copy_constructible<O> && optimizer_has_options<O> && optimizer_has_id<O> &&
                    optimizer_has_state<O> && optimizer_has_step<O>;

/// Static checks with messages a newcomer can act on; instantiate where a user's type is first used.
template <class O>
constexpr bool check_optimizer() {
    static_assert(optimizer_has_options<O>,
                  "an optimizer needs a nested options_type, a constructor from it, and options()");
    static_assert(optimizer_has_id<O>, "an optimizer needs static id() returning its name for saved state");
    static_assert(optimizer_has_state<O>,
                  "an optimizer needs template <device D> state_type (with steps and buffers()) and "
                  "make_state(device, layer_size)");
    static_assert(optimizer_has_step<O>,
                  "an optimizer needs step(const optim::layer&, state_type<cpu>&, float lr, const parallel_options&)");
    return true;
}

}  // namespace hitch
