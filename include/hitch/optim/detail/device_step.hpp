#pragma once
// hitch::optim::device_step<Rule, D>: where an optimizer finds its kernels for a device whose memory the host cannot
// read (a GPU). The host optimizers run their own kernels on host devices; for any other device D their step
// (and the two phases of the layer-wise rules) forwards here, and model_optimizer<Rule, D> takes the trait's plan,
// which steps every layer at once (a fused multi-tensor launch on a GPU). The trait is specialised per device in
// that device's tree: hitch/cuda/optim/*.cuh for hitch::cuda::device. This floor knows no device.
//
// A specialisation offers
//   static void step(const Rule&, const layer&, state_type<D>&, float lr, const parallel_options&);
//   static layer_sums norm_sums(const Rule&, const layer&, state_type<D>&, const parallel_options&);   (lars, lamb)
//   static void apply_with_sums(const Rule&, const layer&, state_type<D>&, float lr, layer_sums,
//                               const parallel_options&);                                           (lars, lamb)
//   class plan {              the whole model's step, made once per model_optimizer
//     plan();  plan(const Rule&, std::span<const layer>, std::span<state_type<D>>, D&);   movable (noexcept)
//     void step(const Rule&, std::span<const layer>, std::span<state_type<D>>, float lr, const parallel_options&);
//     void rebind(std::size_t i, const layer&, state_type<D>&);   after model_optimizer::rebind
//   };
// per_layer_plan<Rule, D> below is a plan for rules without a fused kernel (it calls the per-layer step).
//
// The primary template refuses to be used, with one sentence saying what to include: the kernels of a device are
// device code (CUDA needs nvcc), so they cannot come with the host header of the rule.

#include <cstddef>
#include <span>
#include <type_traits>

#include "hitch/concepts/device.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/parallel.hpp"

namespace hitch::optim {

namespace detail {
template <class... T>
inline constexpr bool dependent_false = false;
}  // namespace detail

/// The kernels of optimizer Rule on device D (see the file comment). Specialised per device.
template <class Rule, class D>
struct device_step {
    static_assert(detail::dependent_false<Rule, D>,
                  "hitch::optim::device_step: this optimizer has no kernels for this device. For "
                  "hitch::cuda::device, include <hitch/cuda/optim/all.cuh> (or the rule's own header, e.g. "
                  "<hitch/cuda/optim/adam.cuh>) in the .cu file that uses it; for a rule or device of your own, "
                  "specialise hitch::optim::device_step<Rule, Device> (see hitch/optim/detail/device_step.hpp)");
};

/// A plan that steps the layers one at a time with the rule's own per-layer step (no fused kernel).
template <class Rule, class D>
class per_layer_plan {
public:
    per_layer_plan() = default;
    template <class State>
    per_layer_plan(const Rule& /*rule*/, std::span<const layer> /*layers*/, std::span<State> /*states*/,
                   D& /*device*/) {}

    template <class State>
    void step(const Rule& rule, std::span<const layer> layers, std::span<State> states, float lr,
              const parallel_options& exec) {
        for (std::size_t i = 0; i < layers.size(); ++i) rule.step(layers[i], states[i], lr, exec);
    }
    template <class State>
    void rebind(std::size_t /*i*/, const layer& /*l*/, State& /*state*/) {}
};

namespace detail {
/// model_optimizer's member for the whole-model step: nothing on a host device, the trait's plan elsewhere.
struct no_plan {};
template <class Rule, class D, bool Host = host_device<D>>
struct plan_of {
    using type = no_plan;
};
template <class Rule, class D>
struct plan_of<Rule, D, false> {
    using type = typename device_step<Rule, D>::plan;
};
template <class Rule, class D>
using plan_t = typename plan_of<Rule, D>::type;
}  // namespace detail

}  // namespace hitch::optim
