#pragma once
// hitch::optimizer_on<O, D>: a per-layer update rule with typed per-layer state on device D. Modelled by
// optim::sgd, momentum, adam, adamw, lars<Base> and lamb (on host devices); a user's rule plugs in by offering
// the same members. optimizer<O> is optimizer_on<O, host_device_archetype>: the floor knows no real device, so a
// CUDA rule models optimizer_on<O, cuda::device> without the concepts knowing CUDA.
//
//   O::name                              static constexpr std::string_view: names the rule in saved state
//                                        ("adam", "lars<momentum>"); a rule chosen at run time adds
//                                        o.rule_name() (optimizer_name(o) below)
//   O::options_type, O(options_type), O(), o.options()
//                                        typed hyper-parameters with validate(), checked by O's constructor
//   O::state_type<D>                     one layer's state on device D (e.g. Adam's m and v), with
//       s.steps                          std::uint64_t: the number of steps this layer has taken
//       s.buffers()                      a range of tensor_view<float>: every tensor of the state, for save/load
//   o.make_state(device, n) -> state_type<D>                     zeroed state for a layer of n parameters
//   o.step(layer, state, lr, parallel_options)                   one update of one layer, in place
//
// The layer (hitch/core/layer.hpp) carries views that know their memory space. The step of one layer never
// touches another layer's state, so a parameter-server shard holding some whole layers can run the same rule on
// just those (see hitch/optim/model_optimizer.hpp for a whole model).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ranges>
#include <string_view>

#include "hitch/concepts/device.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/core/tensor.hpp"

namespace hitch {

template <class O>
concept optimizer_has_name = requires {
    { O::name } -> std::convertible_to<std::string_view>;
};

template <class O>
concept optimizer_has_options =
    requires { typename O::options_type; } && requires(const O& o, const typename O::options_type& opts) {
        opts.validate();
        { o.options() } -> std::convertible_to<const typename O::options_type&>;
    } && std::default_initializable<O> && std::constructible_from<O, const typename O::options_type&>;

/// One layer's state: a step count and the tensors to save.
template <class S>
concept optimizer_state = std::movable<S> && requires(S& s) {
    { s.steps } -> std::convertible_to<std::uint64_t>;
    { s.buffers() } -> std::ranges::range;
    requires std::convertible_to<std::ranges::range_value_t<decltype(s.buffers())>, tensor_view<float>>;
};

template <class O, class D>
concept optimizer_has_state_on = requires(const O& o, D& dev, std::size_t n) {
    typename O::template state_type<D>;
    requires optimizer_state<typename O::template state_type<D>>;
    { o.make_state(dev, n) } -> std::same_as<typename O::template state_type<D>>;
};

template <class O, class D>
concept optimizer_steps_on = requires(const O& o, const layer& l, typename O::template state_type<D>& s, float lr,
                                      const parallel_options& p) { o.step(l, s, lr, p); };

/// A per-layer update rule whose state lives on device D (see the file comment).
template <class O, class D>
concept optimizer_on = device<D> && std::copy_constructible<O> && optimizer_has_name<O> && optimizer_has_options<O> &&
                       optimizer_has_state_on<O, D> && optimizer_steps_on<O, D>;

/// A per-layer update rule on the host.
template <class O>
concept optimizer = optimizer_on<O, host_device_archetype>;

/// The name saved state records for the optimizer object o: O::name, or, for a rule chosen at run time
/// (optim::one_of), the chosen rule's name o.rule_name(), a view of static storage.
template <class O>
[[nodiscard]] constexpr std::string_view optimizer_name(const O& o) noexcept {
    if constexpr (requires {
                      { o.rule_name() } -> std::convertible_to<std::string_view>;
                  }) {
        return o.rule_name();
    } else {
        return O::name;
    }
}

/// Returns true when O models optimizer_on<O, D>; otherwise fails to compile with one sentence naming the first
/// requirement O misses and what to write. Use it where a user's rule first meets hitch:
/// `static_assert(check_optimizer<O>());` (or check_optimizer<O, D>() for the device it runs on).
template <class O, class D = host_device_archetype>
consteval bool check_optimizer() {
    if constexpr (!device<D>) {
        return check_device<D>();
    } else if constexpr (!std::copy_constructible<O>) {
        static_assert(std::copy_constructible<O>,
                      "hitch::optimizer: the optimizer type cannot be copied: an "
                      "optimizer holds only its options; keep per-layer state in "
                      "state_type");
    } else if constexpr (!optimizer_has_name<O>) {
        static_assert(optimizer_has_name<O>,
                      "hitch::optimizer: the optimizer type has no name: add "
                      "`static constexpr std::string_view name = \"my_rule\";` (saved "
                      "state records it)");
    } else if constexpr (!optimizer_has_options<O>) {
        static_assert(optimizer_has_options<O>,
                      "hitch::optimizer: the optimizer type has no options: add a nested `struct options_type { "
                      "void validate() const; };`, a default constructor, a constructor taking `const "
                      "options_type&` and `const options_type& options() const`");
    } else if constexpr (!optimizer_has_state_on<O, D>) {
        static_assert(optimizer_has_state_on<O, D>,
                      "hitch::optimizer: the optimizer type has no per-layer state: add `template <class D> using "
                      "state_type = ...;` (with `std::uint64_t steps` and `buffers()`) and "
                      "`state_type<D> make_state(D& device, std::size_t n) const`");
    } else if constexpr (!optimizer_steps_on<O, D>) {
        static_assert(optimizer_steps_on<O, D>,
                      "hitch::optimizer: the optimizer type cannot step: add `template <hitch::host_device D> void "
                      "step(const hitch::layer&, state_type<D>&, float lr, const hitch::parallel_options&) const`");
    }
    return true;
}

}  // namespace hitch
