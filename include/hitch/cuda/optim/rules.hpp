#pragma once
// How the GPU kernels see each host optimizer: the per-layer scalars of a step (made on the host from the rule's
// options by the rule's own code where it has some, so the doubles, powers and roundings are the CPU's), which state
// buffers an element reads and writes, and the element update itself (hitch/cuda/optim/math.hpp). The kernels
// (*.cuh) and the host tests both go through these, so the host tests check exactly what the GPU computes.
//
//   elementwise_rule<Rule>           sgd, momentum, adam, adamw: the update of an element reads only that element
//     ::scalars                      the per-layer scalars (math.hpp)
//     make(rule, lr, wd, steps)      a layer's scalars for its next step (steps: the steps it has taken)
//     weight_decay(rule, flags)      the rule's own weight decay for a layer with these flags
//     state_count(rule)              how many state buffers an element uses (0 to 3), between
//     min_states and max_states      the counts the rule can have (the kernels are built for those only)
//     buffers(state)                 their pointers, in the order apply() takes them
//     apply(w, g, s, scale, k)       one element (HD)
//     check(rule, layer, state, lr)  the host rule's checks before a step, for a layer in GPU memory
//
// Host code, apart from apply(), which the GPU calls too.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "hitch/core/layer.hpp"
#include "hitch/cuda/detail/hd.hpp"
#include "hitch/cuda/optim/math.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/detail/checks.hpp"
#include "hitch/optim/detail/norm.hpp"
#include "hitch/optim/lamb.hpp"
#include "hitch/optim/lars.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"

namespace hitch::cuda::optim {

static_assert(norm_block == hitch::optim::detail::norm_block && norm_lanes == hitch::optim::detail::norm_lanes,
              "hitch::cuda::optim's sums of squares must cut layers as hitch/optim/detail/norm.hpp does");

/// The kernel side of an element-wise rule (see the file comment). Specialised for sgd, momentum, adam, adamw.
template <class Rule>
struct elementwise_rule;

template <>
struct elementwise_rule<hitch::optim::sgd> {
    using scalars = sgd_scalars;
    static constexpr int min_states = 0, max_states = 0;
    [[nodiscard]] static scalars make(const hitch::optim::sgd& /*rule*/, float lr, float wd, std::uint64_t /*steps*/) {
        return {lr, wd, wd != 0.0f ? 1u : 0u};
    }
    [[nodiscard]] static float weight_decay(const hitch::optim::sgd& rule, layer_flags flags) {
        return flags.exclude_from_weight_decay ? 0.0f : rule.options().weight_decay;
    }
    [[nodiscard]] static int state_count(const hitch::optim::sgd& /*rule*/) { return 0; }
    template <class State>
    [[nodiscard]] static std::array<float*, 3> buffers(State& /*state*/) {
        return {nullptr, nullptr, nullptr};
    }
    template <class State>
    static void check(const hitch::optim::sgd& /*rule*/, const layer& l, const State& /*state*/, float lr) {
        hitch::optim::detail::check_step("hitch::optim::sgd", l, {}, lr, memory_space::cuda);
    }
    HITCH_HD_INLINE static void apply(float& w, float g, float* /*s*/, float scale, const scalars& k) noexcept {
        w = sgd_element(w, g, scale, k);
    }
};

template <>
struct elementwise_rule<hitch::optim::momentum> {
    using scalars = momentum_scalars;
    static constexpr int min_states = 1, max_states = 1;
    [[nodiscard]] static scalars make(const hitch::optim::momentum& rule, float lr, float wd, std::uint64_t steps) {
        scalars k;
        k.lr = lr;
        k.wd = wd;
        k.mu = rule.options().momentum;
        k.c = 1.0f - rule.options().dampening;  // as hitch/optim/momentum.hpp rounds it
        k.decay = wd != 0.0f ? 1u : 0u;
        k.first = steps == 0 ? 1u : 0u;
        k.nesterov = rule.options().nesterov ? 1u : 0u;
        return k;
    }
    [[nodiscard]] static float weight_decay(const hitch::optim::momentum& rule, layer_flags flags) {
        return flags.exclude_from_weight_decay ? 0.0f : rule.options().weight_decay;
    }
    [[nodiscard]] static int state_count(const hitch::optim::momentum& /*rule*/) { return 1; }
    template <class State>
    [[nodiscard]] static std::array<float*, 3> buffers(State& state) {
        return {state.velocity.data(), nullptr, nullptr};
    }
    template <class State>
    static void check(const hitch::optim::momentum& /*rule*/, const layer& l, const State& state, float lr) {
        hitch::optim::detail::check_step("hitch::optim::momentum", l, {state.velocity.size()}, lr, memory_space::cuda);
    }
    HITCH_HD_INLINE static void apply(float& w, float g, float* s, float scale, const scalars& k) noexcept {
        momentum_element(w, g, s[0], scale, k);
    }
};

template <class WeightDecay>
struct elementwise_rule<hitch::optim::basic_adam<WeightDecay>> {
    using rule_type = hitch::optim::basic_adam<WeightDecay>;
    using scalars = adam_scalars;
    static constexpr int min_states = 2, max_states = 3;  // m, v (and v_max under AMSGrad)
    [[nodiscard]] static scalars make(const rule_type& rule, float lr, float wd, std::uint64_t steps) {
        const hitch::optim::detail::adam_scalars h = rule.scalars(lr, wd, 1.0f, steps + 1);
        scalars k;
        k.b1 = h.b1;
        k.b2 = h.b2;
        k.c1 = h.c1;
        k.c2 = h.c2;
        k.eps = h.eps;
        k.step_size = h.step_size;
        k.bc2_sqrt = h.bc2_sqrt;
        k.wd = h.wd;
        k.decay_factor = h.decay;
        k.decay = wd != 0.0f ? 1u : 0u;
        k.decoupled = WeightDecay::decoupled ? 1u : 0u;
        k.amsgrad = rule.options().amsgrad ? 1u : 0u;
        return k;
    }
    [[nodiscard]] static float weight_decay(const rule_type& rule, layer_flags flags) {
        return flags.exclude_from_weight_decay ? 0.0f : rule.options().weight_decay;
    }
    [[nodiscard]] static int state_count(const rule_type& rule) { return rule.options().amsgrad ? 3 : 2; }
    template <class State>
    [[nodiscard]] static std::array<float*, 3> buffers(State& state) {
        return {state.m.data(), state.v.data(), state.v_max.size() != 0 ? state.v_max.data() : nullptr};
    }
    template <class State>
    static void check(const rule_type& rule, const layer& l, const State& state, float lr) {
        const std::string who = std::string("hitch::optim::").append(rule_type::name);
        if (rule.options().amsgrad)
            hitch::optim::detail::check_step(who, l, {state.m.size(), state.v.size(), state.v_max.size()}, lr,
                                             memory_space::cuda);
        else
            hitch::optim::detail::check_step(who, l, {state.m.size(), state.v.size()}, lr, memory_space::cuda);
    }
    HITCH_HD_INLINE static void apply(float& w, float g, float* s, float scale, const scalars& k) noexcept {
        adam_element(w, g, s[0], s[1], s[2], scale, k);
    }
};

/// LAMB's scalars of a layer's next step (steps: the steps it has taken).
[[nodiscard]] inline lamb_scalars make_lamb_scalars(const hitch::optim::lamb& rule, layer_flags flags,
                                                    std::uint64_t steps) {
    const hitch::optim::detail::lamb_scalars h = rule.scalars(flags, steps + 1);
    lamb_scalars k;
    k.b1 = h.b1;
    k.b2 = h.b2;
    k.c1 = h.c1;
    k.c2 = h.c2;
    k.eps = h.eps;
    k.bc1 = h.bc1;
    k.bc2 = h.bc2;
    k.wd = h.wd;
    k.decay = h.wd != 0.0f ? 1u : 0u;
    return k;
}

/// LARS's trust-ratio scalars of a layer with these flags.
template <class Base>
[[nodiscard]] lars_scalars make_lars_scalars(const hitch::optim::lars<Base>& rule, layer_flags flags) {
    lars_scalars k;
    k.eta = rule.options().trust_coefficient;
    k.wd = flags.exclude_from_weight_decay ? 0.0f : rule.options().weight_decay;
    k.eps = rule.options().epsilon;
    k.exclude = flags.exclude_from_adaptation ? 1u : 0u;
    return k;
}

/// LARS's weight decay of a layer with these flags (the base rule's own is 0).
template <class Base>
[[nodiscard]] float lars_weight_decay(const hitch::optim::lars<Base>& rule, layer_flags flags) {
    return flags.exclude_from_weight_decay ? 0.0f : rule.options().weight_decay;
}

}  // namespace hitch::cuda::optim
