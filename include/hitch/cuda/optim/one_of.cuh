#pragma once
// hitch::optim::one_of<Os...> on hitch::cuda::device. one_of's per-layer step already forwards to the chosen rule's
// own (its GPU step); this adds model_optimizer's fused step: the chosen rule's plan over the rule's state inside each
// layer's one_of state, with one_of's step count carried in and out as one_of::step does. Every rule of the set needs
// GPU kernels: hitch's own rules' come with this header. nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/optim/one_of.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cstddef>
#include <span>
#include <type_traits>
#include <variant>

#include "hitch/concepts/optimizer.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/optim/adam.cuh"
#include "hitch/cuda/optim/lamb.cuh"
#include "hitch/cuda/optim/lars.cuh"
#include "hitch/cuda/optim/momentum.cuh"
#include "hitch/cuda/optim/sgd.cuh"
#include "hitch/optim/detail/device_step.hpp"
#include "hitch/optim/one_of.hpp"

namespace hitch::cuda::optim::detail {

template <class T, class... Ts>
inline constexpr std::size_t index_in = [] {
    constexpr bool same[] = {std::is_same_v<T, Ts>...};
    for (std::size_t i = 0; i < sizeof...(Ts); ++i)
        if (same[i]) return i;
    return sizeof...(Ts);
}();

/// The chosen rule's fused plan, over the rule's own state inside each one_of state.
template <class... Os>
class one_of_plan {
    using rule_type = hitch::optim::one_of<Os...>;
    template <std::size_t I>
    struct own_state {
        template <class State>
        auto& operator()(State& s) const {
            return std::get<I>(s.rule);
        }
    };

public:
    one_of_plan() = default;
    template <class State>
    one_of_plan(const rule_type& rule, std::span<const layer> layers, std::span<State> states, cuda::device& dev) {
        rule.visit([&](const auto& chosen) {
            using chosen_type = std::remove_cvref_t<decltype(chosen)>;
            constexpr std::size_t i = index_in<chosen_type, Os...>;
            for (std::size_t k = 0; k < states.size(); ++k) check_holds(layers[k], states[k], i);
            inner_.template emplace<i + 1>(chosen, layers, states, dev, own_state<i>{});
        });
    }

    template <class State>
    void step(const rule_type& rule, std::span<const layer> layers, std::span<State> states, float lr,
              const parallel_options& exec) {
        rule.visit([&](const auto& chosen) {
            using chosen_type = std::remove_cvref_t<decltype(chosen)>;
            constexpr std::size_t i = index_in<chosen_type, Os...>;
            for (State& s : states) std::get<i>(s.rule).steps = s.steps;
            std::get<i + 1>(inner_).step(chosen, layers, states, lr, exec, own_state<i>{});
            for (State& s : states) s.steps = std::get<i>(s.rule).steps;
        });
    }
    template <class State>
    void rebind(std::size_t k, const layer& l, State& s) {
        rebind_at<0>(k, l, s);
    }

private:
    template <class State>
    static void check_holds(const layer& l, const State& s, std::size_t i) {
        if (s.rule.index() != i)
            throw config_error(hitch::detail::concat("hitch::optim::one_of: layer '", l.name, "' holds ",
                                                     rule_type::names[s.rule.index()], " state, but this optimizer is ",
                                                     rule_type::names[i]));
    }
    template <std::size_t I, class State>
    void rebind_at(std::size_t k, const layer& l, State& s) {
        if constexpr (I < sizeof...(Os)) {
            if (inner_.index() == I + 1)
                std::get<I + 1>(inner_).rebind(k, l, std::get<I>(s.rule));
            else
                rebind_at<I + 1>(k, l, s);
        }
    }

    std::variant<std::monostate, typename hitch::optim::device_step<Os, cuda::device>::plan...> inner_;
};

}  // namespace hitch::cuda::optim::detail

namespace hitch::optim {

template <class... Os>
struct device_step<one_of<Os...>, cuda::device> {
    using plan = cuda::optim::detail::one_of_plan<Os...>;
};

static_assert(optimizer_on<one_of<sgd, momentum, adam, adamw, lars<momentum>, lamb>, cuda::device>,
              "hitch::optim::one_of must model hitch::optimizer_on<cuda::device>");

}  // namespace hitch::optim
