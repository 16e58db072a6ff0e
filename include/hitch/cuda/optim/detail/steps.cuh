#pragma once
// The GPU steps behind hitch::optim::device_step<Rule, hitch::cuda::device>: one layer at a time (the rules'
// step(), and the two phases of the layer-wise rules), and the fused plans of model_optimizer (every layer in one
// launch per pass). Everything is queued on the device's stream; only the layer-wise rules' first phase, which
// returns its sums to the host, waits for the GPU. nvcc only.
//
// A fused step of an element-wise rule (sgd, momentum, adam, adamw) is one launch. LARS is three: the partial sums
// of ||w||^2 and ||g||^2 of every chunk of every layer, then one thread per layer adding its chunks' sums in block
// order and taking the trust ratio, then the base rule's update with each layer's trust ratio as its gradient
// scale. LAMB is three the same way: moments and partial sums of ||w||^2 and ||r||^2, the rates, the update.
#if !defined(__CUDACC__)
#error "hitch/cuda/optim/detail/steps.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/optim/detail/kernels.cuh"
#include "hitch/cuda/optim/detail/tables.cuh"
#include "hitch/cuda/optim/math.hpp"
#include "hitch/cuda/optim/multi_tensor.hpp"
#include "hitch/cuda/optim/rules.hpp"
#include "hitch/device/buffer.hpp"
#include "hitch/optim/detail/checks.hpp"
#include "hitch/optim/lamb.hpp"
#include "hitch/optim/lars.hpp"
#include "hitch/optim/split_step.hpp"

namespace hitch::cuda::optim::detail {

using hitch::optim::layer_sums;

/// The device a layer's state was made on (its stream runs the step).
template <class State>
[[nodiscard]] cuda::device& state_device(State& s, std::string_view who) {
    cuda::device* d = nullptr;
    if constexpr (requires { s.device; })
        d = s.device;
    else if constexpr (requires { s.velocity; })
        d = s.velocity.device();
    else
        d = s.m.device();
    if (d == nullptr)
        throw config_error(hitch::detail::concat(who, ": the layer's state was not made by make_state on a device"));
    return *d;
}

/// The learning rate check of hitch/optim/detail/checks.hpp, for a fused step of many layers.
inline void check_rate(std::string_view who, float lr) {
    if (!(lr >= 0.0f) || !std::isfinite(lr))
        throw config_error(
            hitch::detail::concat(who, ": learning rate ", lr, " is outside the allowed range [0, inf)"));
}

/// A layer's row of a one-tensor launch.
template <class Rule, class State>
[[nodiscard]] single_chunks single_of(const layer& l, State& s) {
    const std::array<float*, 3> state = elementwise_rule<Rule>::buffers(s);
    return {make_tensor_entry(l, std::span<float* const>(state)), chunk_count(l.size())};
}

/// Scratch room of a one-layer layer-wise step: the partial sums of its chunks, its two sums and its scale.
struct layer_scratch {
    device_buffer<double, cuda::device> room;
    std::uint64_t chunks = 0;
    layer_scratch(cuda::device& dev, std::uint64_t n) : room(dev, 2 * chunk_count(n) + 3), chunks(chunk_count(n)) {}
    [[nodiscard]] double* partial() const noexcept { return room.data(); }
    [[nodiscard]] double* sums() const noexcept { return room.data() + 2 * chunks; }
    [[nodiscard]] float* scale() const noexcept { return reinterpret_cast<float*>(room.data() + 2 * chunks + 2); }
};

// ==== element-wise rules (sgd, momentum, adam, adamw) ============================================================

/// One layer's step: d = scale * (g + decay), the rule's update.
template <class Rule, class State>
void elementwise_layer_step(const Rule& rule, const layer& l, State& s, float lr, float wd, float scale) {
    using R = elementwise_rule<Rule>;
    if (l.size() != 0) {
        cuda::device& dev = state_device(s, Rule::name);
        launch_elementwise<R>(dev, R::state_count(rule), single_of<Rule>(l, s),
                              same_row<typename R::scalars>{R::make(rule, lr, wd, s.steps)}, same_row<float>{scale});
    }
    ++s.steps;
}

/// The rows of a model's layers for rule R (state buffers in R's order).
template <class Rule, class State, class Proj>
[[nodiscard]] std::vector<tensor_entry> rows_of(std::span<const layer> layers, std::span<State> states, Proj& proj) {
    std::vector<tensor_entry> rows;
    rows.reserve(layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const std::array<float*, 3> state = elementwise_rule<Rule>::buffers(std::invoke(proj, states[i]));
        rows.push_back(make_tensor_entry(layers[i], std::span<float* const>(state)));
    }
    return rows;
}

/// model_optimizer's fused step of an element-wise rule: one launch for every layer.
template <class Rule>
class elementwise_plan {
    using R = elementwise_rule<Rule>;

public:
    elementwise_plan() = default;
    template <class State, class Proj = std::identity>
    elementwise_plan(const Rule& /*rule*/, std::span<const layer> layers, std::span<State> states, cuda::device& dev,
                     Proj proj = {})
        : tables_(dev, rows_of<Rule>(layers, states, proj), false), scalars_(dev, layers.size()) {}

    template <class State, class Proj = std::identity>
    void step(const Rule& rule, std::span<const layer> layers, std::span<State> states, float lr,
              const parallel_options& /*exec*/, Proj proj = {}) {
        check_rate(std::string("hitch::optim::model_optimizer<").append(Rule::name).append(">::step"), lr);
        typename R::scalars* k = scalars_.begin_write();
        for (std::size_t i = 0; i < layers.size(); ++i)
            k[i] = R::make(rule, lr, R::weight_decay(rule, layers[i].flags), std::invoke(proj, states[i]).steps);
        cuda::device& dev = tables_.device();
        const typename R::scalars* rows = scalars_.upload(dev.stream());
        launch_elementwise<R>(dev, R::state_count(rule), tables_.chunks(), table_rows<typename R::scalars>{rows},
                              same_row<float>{1.0f});
        for (std::size_t i = 0; i < layers.size(); ++i) ++std::invoke(proj, states[i]).steps;
    }
    template <class State>
    void rebind(std::size_t i, const layer& l, State& s) {
        const std::array<float*, 3> state = R::buffers(s);
        tables_.rebind(i, make_tensor_entry(l, std::span<float* const>(state)));
    }

private:
    fused_tables tables_;
    staged_rows<typename R::scalars> scalars_;
};

// ==== lars<Base> =================================================================================================

template <class Base>
[[nodiscard]] lars_scalars lars_options_of(const hitch::optim::lars<Base>& rule) {
    return make_lars_scalars(rule, layer_flags{});
}

/// One layer's LARS step, all on the GPU: norms, trust ratio, the base rule's update.
template <class Base, class State>
void lars_layer_step(const hitch::optim::lars<Base>& rule, const layer& l, State& s, float lr) {
    using R = elementwise_rule<Base>;
    const std::string who = std::string("hitch::optim::").append(hitch::optim::lars<Base>::name);
    check_layer(l, memory_space::cuda, who);
    R::check(rule.base(), l, s, lr);
    const float wd = lars_weight_decay(rule, l.flags);
    if (l.size() == 0 || l.flags.exclude_from_adaptation) {  // trust 1: no norms needed
        elementwise_layer_step(rule.base(), l, s, lr, wd, 1.0f);
        return;
    }
    cuda::device& dev = state_device(s, who);
    const single_chunks chunks = single_of<Base>(l, s);
    const layer_scratch scratch(dev, l.size());
    launch_lane_sums<lars_norms_pass>(dev, chunks, same_row<lars_scalars>{}, scratch.partial());
    launch_finish<lars_norms_pass>(dev, single_tensor{chunks.tensor}, scratch.partial(), nullptr, scratch.scale(),
                                   lars_finish{lars_options_of(rule)});
    launch_elementwise<R>(dev, R::state_count(rule.base()), chunks,
                          same_row<typename R::scalars>{R::make(rule.base(), lr, wd, s.steps)},
                          table_rows<float>{scratch.scale()});
    ++s.steps;
}

/// Phase 1 (optim/split_step.hpp): ||w||^2 and ||g||^2 of the piece, back on the host.
template <class Base, class State>
[[nodiscard]] layer_sums lars_norm_sums(const hitch::optim::lars<Base>& rule, const layer& piece, State& s) {
    const std::string who = std::string("hitch::optim::").append(hitch::optim::lars<Base>::name);
    check_layer(piece, memory_space::cuda, who);
    if (piece.flags.exclude_from_adaptation || piece.size() == 0) return {0.0, 0.0};
    (void)rule;
    cuda::device& dev = state_device(s, who);
    const single_chunks chunks = single_of<Base>(piece, s);
    const layer_scratch scratch(dev, piece.size());
    launch_lane_sums<lars_norms_pass>(dev, chunks, same_row<lars_scalars>{}, scratch.partial());
    launch_finish<lars_norms_pass>(dev, single_tensor{chunks.tensor}, scratch.partial(), scratch.sums(), nullptr,
                                   sums_only{});
    layer_sums sums{};
    dev.copy_to_host(sums.data(), scratch.sums(), sizeof sums);
    return sums;
}

/// Phase 2: the base rule's update with the trust ratio of the whole layer's sums (taken on the host, by the rule).
template <class Base, class State>
void lars_apply_with_sums(const hitch::optim::lars<Base>& rule, const layer& piece, State& s, float lr,
                          layer_sums sums) {
    const std::string who = std::string("hitch::optim::").append(hitch::optim::lars<Base>::name);
    check_layer(piece, memory_space::cuda, who);
    elementwise_rule<Base>::check(rule.base(), piece, s, lr);
    elementwise_layer_step(rule.base(), piece, s, lr, lars_weight_decay(rule, piece.flags),
                           rule.trust_ratio_from_sums(piece.flags, sums));
}

/// model_optimizer's fused LARS step: three launches for every layer.
template <class Base>
class lars_plan {
    using R = elementwise_rule<Base>;
    using rule_type = hitch::optim::lars<Base>;

public:
    lars_plan() = default;
    template <class State, class Proj = std::identity>
    lars_plan(const rule_type& /*rule*/, std::span<const layer> layers, std::span<State> states, cuda::device& dev,
              Proj proj = {})
        : tables_(dev, rows_of<Base>(layers, states, proj), true), scalars_(dev, layers.size()) {}

    template <class State, class Proj = std::identity>
    void step(const rule_type& rule, std::span<const layer> layers, std::span<State> states, float lr,
              const parallel_options& /*exec*/, Proj proj = {}) {
        check_rate(std::string("hitch::optim::model_optimizer<").append(rule_type::name).append(">::step"), lr);
        typename R::scalars* k = scalars_.begin_write();
        for (std::size_t i = 0; i < layers.size(); ++i)
            k[i] =
                R::make(rule.base(), lr, lars_weight_decay(rule, layers[i].flags), std::invoke(proj, states[i]).steps);
        cuda::device& dev = tables_.device();
        const typename R::scalars* rows = scalars_.upload(dev.stream());
        launch_lane_sums<lars_norms_pass>(dev, tables_.chunks(), same_row<lars_scalars>{}, tables_.partial());
        launch_finish<lars_norms_pass>(dev, tables_.tensors(), tables_.partial(), tables_.sums(), tables_.scales(),
                                       lars_finish{lars_options_of(rule)});
        launch_elementwise<R>(dev, R::state_count(rule.base()), tables_.chunks(), table_rows<typename R::scalars>{rows},
                              table_rows<float>{tables_.scales()});
        for (std::size_t i = 0; i < layers.size(); ++i) ++std::invoke(proj, states[i]).steps;
    }
    template <class State>
    void rebind(std::size_t i, const layer& l, State& s) {
        const std::array<float*, 3> state = R::buffers(s);
        tables_.rebind(i, make_tensor_entry(l, std::span<float* const>(state)));
    }

private:
    fused_tables tables_;
    staged_rows<typename R::scalars> scalars_;
};

// ==== lamb =======================================================================================================

template <class State>
[[nodiscard]] single_chunks lamb_single_of(const layer& l, State& s) {
    const std::array<float*, 3> state{s.m.data(), s.v.data(), nullptr};
    return {make_tensor_entry(l, std::span<float* const>(state)), chunk_count(l.size())};
}

/// One layer's LAMB step, all on the GPU: pass 1 with its sums, the rate, pass 2.
template <class State>
void lamb_layer_step(const hitch::optim::lamb& rule, const layer& l, State& s, float lr) {
    hitch::optim::detail::check_step("hitch::optim::lamb", l, {s.m.size(), s.v.size()}, lr, memory_space::cuda);
    if (l.size() != 0) {
        cuda::device& dev = state_device(s, "hitch::optim::lamb");
        const lamb_scalars k = make_lamb_scalars(rule, l.flags, s.steps);
        const single_chunks chunks = lamb_single_of(l, s);
        const layer_scratch scratch(dev, l.size());
        launch_lane_sums<lamb_moments_pass>(dev, chunks, same_row<lamb_scalars>{k}, scratch.partial());
        launch_finish<lamb_moments_pass>(dev, single_tensor{chunks.tensor}, scratch.partial(), nullptr, scratch.scale(),
                                         lamb_finish{lr});
        launch_elementwise<lamb_apply_rule>(dev, 2, chunks, same_row<lamb_scalars>{k},
                                            table_rows<float>{scratch.scale()});
    }
    ++s.steps;
}

/// Phase 1: pass 1 on the piece (the moments move) and its ||w||^2 and ||r||^2, back on the host.
template <class State>
[[nodiscard]] layer_sums lamb_norm_sums(const hitch::optim::lamb& rule, const layer& piece, State& s) {
    hitch::optim::detail::check_step("hitch::optim::lamb", piece, {s.m.size(), s.v.size()}, 0.0f, memory_space::cuda);
    if (piece.size() == 0) return {0.0, 0.0};
    cuda::device& dev = state_device(s, "hitch::optim::lamb");
    const single_chunks chunks = lamb_single_of(piece, s);
    const layer_scratch scratch(dev, piece.size());
    launch_lane_sums<lamb_moments_pass>(
        dev, chunks, same_row<lamb_scalars>{make_lamb_scalars(rule, piece.flags, s.steps)}, scratch.partial());
    launch_finish<lamb_moments_pass>(dev, single_tensor{chunks.tensor}, scratch.partial(), scratch.sums(), nullptr,
                                     sums_only{});
    layer_sums sums{};
    dev.copy_to_host(sums.data(), scratch.sums(), sizeof sums);
    return sums;
}

/// Phase 2: pass 2 on the piece with the rate of the whole layer's sums; counts the step.
template <class State>
void lamb_apply_with_sums(const hitch::optim::lamb& rule, const layer& piece, State& s, float lr, layer_sums sums) {
    hitch::optim::detail::check_step("hitch::optim::lamb", piece, {s.m.size(), s.v.size()}, lr, memory_space::cuda);
    if (piece.size() != 0) {
        cuda::device& dev = state_device(s, "hitch::optim::lamb");
        const float rate = lamb_rate(sums[0], sums[1], piece.flags.exclude_from_adaptation, lr);
        launch_elementwise<lamb_apply_rule>(dev, 2, lamb_single_of(piece, s),
                                            same_row<lamb_scalars>{make_lamb_scalars(rule, piece.flags, s.steps)},
                                            same_row<float>{rate});
    }
    ++s.steps;
}

/// model_optimizer's fused LAMB step: three launches for every layer.
class lamb_plan {
public:
    lamb_plan() = default;
    template <class State, class Proj = std::identity>
    lamb_plan(const hitch::optim::lamb& /*rule*/, std::span<const layer> layers, std::span<State> states,
              cuda::device& dev, Proj proj = {})
        : tables_(dev, rows(layers, states, proj), true), scalars_(dev, layers.size()) {}

    template <class State, class Proj = std::identity>
    void step(const hitch::optim::lamb& rule, std::span<const layer> layers, std::span<State> states, float lr,
              const parallel_options& /*exec*/, Proj proj = {}) {
        check_rate("hitch::optim::model_optimizer<lamb>::step", lr);
        lamb_scalars* k = scalars_.begin_write();
        for (std::size_t i = 0; i < layers.size(); ++i)
            k[i] = make_lamb_scalars(rule, layers[i].flags, std::invoke(proj, states[i]).steps);
        cuda::device& dev = tables_.device();
        const lamb_scalars* rows_k = scalars_.upload(dev.stream());
        launch_lane_sums<lamb_moments_pass>(dev, tables_.chunks(), table_rows<lamb_scalars>{rows_k}, tables_.partial());
        launch_finish<lamb_moments_pass>(dev, tables_.tensors(), tables_.partial(), tables_.sums(), tables_.scales(),
                                         lamb_finish{lr});
        launch_elementwise<lamb_apply_rule>(dev, 2, tables_.chunks(), table_rows<lamb_scalars>{rows_k},
                                            table_rows<float>{tables_.scales()});
        for (std::size_t i = 0; i < layers.size(); ++i) ++std::invoke(proj, states[i]).steps;
    }
    template <class State>
    void rebind(std::size_t i, const layer& l, State& s) {
        tables_.rebind(i, lamb_single_of(l, s).tensor);
    }

private:
    template <class State, class Proj>
    static std::vector<tensor_entry> rows(std::span<const layer> layers, std::span<State> states, Proj& proj) {
        std::vector<tensor_entry> out;
        out.reserve(layers.size());
        for (std::size_t i = 0; i < layers.size(); ++i)
            out.push_back(lamb_single_of(layers[i], std::invoke(proj, states[i])).tensor);
        return out;
    }

    fused_tables tables_;
    staged_rows<lamb_scalars> scalars_;
};

}  // namespace hitch::cuda::optim::detail
