#pragma once
// SGD with heavy-ball momentum (Polyak 1964), optionally Nesterov's accelerated form (Nesterov 1983, in the
// form of Sutskever et al. 2013) and dampening, as torch.optim.SGD defines them:
//
//   d = g + wd * w
//   b = d                               on the layer's first step
//   b = mu * b + (1 - dampening) * d    afterwards
//   d = d + mu * b  (Nesterov)   or   d = b
//   w = w - lr * d
//
// Per element, in float, each operation rounded on its own in this order (c = 1 - dampening, computed once in
// float; s is the per-layer gradient scale, 1 except under lars<momentum>):
//   t = wd * w;  d = g + t;  d = s * d;
//   first step: b = d;   later: t1 = mu * b;  t2 = c * d;  b = t1 + t2;
//   Nesterov: t3 = mu * b;  d = d + t3;   else: d = b;
//   u = lr * d;  w = w - u

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "hitch/concepts/optimizer.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/options.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/device/buffer.hpp"
#include "hitch/device/cpu.hpp"
#include "hitch/optim/detail/checks.hpp"
#include "hitch/optim/detail/device_step.hpp"
#include "hitch/optim/detail/strict_fp.hpp"
#include "hitch/optim/detail/tiers.hpp"

namespace hitch::optim {

/// One layer's momentum state on device D.
template <device D>
struct momentum_state {
    device_buffer<float, D> velocity;
    std::uint64_t steps = 0;
    [[nodiscard]] std::array<tensor_view<float>, 1> buffers() const noexcept { return {velocity.view()}; }
};

class momentum {
public:
    struct options_type {
        /// mu in [0, 1).
        float momentum = 0.9f;
        /// In [0, 1): the share of the new gradient left out of the velocity (0: none).
        float dampening = 0.0f;
        /// Nesterov's look-ahead form; needs momentum > 0 and dampening = 0 (as in torch.optim.SGD).
        bool nesterov = false;
        /// L2 penalty coefficient wd >= 0.
        float weight_decay = 0.0f;

        void validate() const {
            const option_validator v("hitch::optim::momentum");
            v.half_open("momentum", momentum, 0.0f, 1.0f)
                .half_open("dampening", dampening, 0.0f, 1.0f)
                .non_negative("weight_decay", weight_decay);
            if (nesterov) {
                v.require(momentum > 0.0f, "momentum", momentum, "(0, 1) when nesterov is set");
                v.require(dampening == 0.0f, "dampening", dampening, "{0} when nesterov is set");
            }
        }
    };

    template <class D>  // constrained by the state itself (clang 14 cannot take a constrained alias here)
    using state_type = momentum_state<D>;

    momentum() : momentum(options_type{}) {}
    explicit momentum(const options_type& options) : options_(options) { options_.validate(); }

    [[nodiscard]] const options_type& options() const noexcept { return options_; }
    static constexpr std::string_view name = "momentum";
    /// Each element's update reads only that element: a piece of a layer steps alone (optim/split_step.hpp).
    static constexpr bool elementwise = true;

    template <device D>
    [[nodiscard]] state_type<D> make_state(D& dev, std::size_t n) const {
        return {device_buffer<float, D>(dev, n), 0};
    }

    template <host_device D>
    void step(const layer& l, state_type<D>& s, float lr, const parallel_options& exec = {}) const {
        apply(l, s, lr, l.flags.exclude_from_weight_decay ? 0.0f : options_.weight_decay, 1.0f, exec);
    }
    /// The same step on a device the host cannot read, by that device's kernels (optim/detail/device_step.hpp).
    template <device D>
        requires(!host_device<D>)
    void step(const layer& l, state_type<D>& s, float lr, const parallel_options& exec = {}) const {
        device_step<momentum, D>::step(*this, l, s, lr, exec);
    }

    /// The step with an explicit weight decay and gradient scale (used by lars<momentum>).
    template <host_device D>
    void apply(const layer& l, state_type<D>& s, float lr, float weight_decay, float scale,
               const parallel_options& exec = {}) const;

private:
    options_type options_;
};

// ================================================ implementation ================================================

HITCH_OPTIM_STRICT_FP_BEGIN
namespace detail {

template <hitch::isa Tier, bool Decay, bool First, bool Nesterov>
HITCH_OPTIM_KERNEL void momentum_kernel(float* __restrict w, const float* __restrict g, float* __restrict b,
                                        std::size_t n, float lr, float wd, float s, float mu, float c) {
    HITCH_OPTIM_STRICT_FP_SCOPE
    for (std::size_t i = 0; i < n; ++i) {
        float d = g[i];
        if constexpr (Decay) {
            const float t = wd * w[i];
            d = d + t;
        }
        d = s * d;
        float v;
        if constexpr (First) {
            v = d;
        } else {
            const float t1 = mu * b[i];
            const float t2 = c * d;
            v = t1 + t2;
        }
        b[i] = v;
        if constexpr (Nesterov) {
            const float t3 = mu * v;
            d = d + t3;
        } else {
            d = v;
        }
        const float u = lr * d;
        w[i] = w[i] - u;
    }
}

template <hitch::isa Tier, bool Decay, bool First>
HITCH_OPTIM_KERNEL void momentum_dispatch(bool nesterov, float* w, const float* g, float* b, std::size_t n, float lr,
                                          float wd, float s, float mu, float c) {
    if (nesterov)
        momentum_kernel<Tier, Decay, First, true>(w, g, b, n, lr, wd, s, mu, c);
    else
        momentum_kernel<Tier, Decay, First, false>(w, g, b, n, lr, wd, s, mu, c);
}

}  // namespace detail
HITCH_OPTIM_STRICT_FP_END

template <host_device D>
void momentum::apply(const layer& l, state_type<D>& s, float lr, float weight_decay, float scale,
                     const parallel_options& exec) const {
    detail::check_step("hitch::optim::momentum", l, {s.velocity.size()}, lr);
    float* w = l.params.data();
    const float* g = l.grads.data();
    float* b = s.velocity.data();
    const float mu = options_.momentum;
    const float c = 1.0f - options_.dampening;
    const bool first = s.steps == 0;
    const bool nesterov = options_.nesterov;
    parallel_for(
        l.size(),
        [&](std::size_t i, std::size_t e) {
            const std::size_t n = e - i;
            detail::run_tiered([&](auto tier) HITCH_OPTIM_INLINE_LAMBDA {
                constexpr hitch::isa T = decltype(tier)::value;
                if (weight_decay != 0.0f) {
                    if (first)
                        detail::momentum_dispatch<T, true, true>(nesterov, w + i, g + i, b + i, n, lr, weight_decay,
                                                                 scale, mu, c);
                    else
                        detail::momentum_dispatch<T, true, false>(nesterov, w + i, g + i, b + i, n, lr, weight_decay,
                                                                  scale, mu, c);
                } else {
                    if (first)
                        detail::momentum_dispatch<T, false, true>(nesterov, w + i, g + i, b + i, n, lr, 0.0f, scale, mu,
                                                                  c);
                    else
                        detail::momentum_dispatch<T, false, false>(nesterov, w + i, g + i, b + i, n, lr, 0.0f, scale,
                                                                   mu, c);
                }
            });
        },
        exec);
    ++s.steps;
}

static_assert(optimizer<momentum>, "hitch::optim::momentum must model hitch::optimizer");

}  // namespace hitch::optim
