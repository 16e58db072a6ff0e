#pragma once
// Adam (Kingma and Ba 2015) with the AMSGrad option (Reddi et al. 2018), as a policy template over how weight
// decay enters: coupled_weight_decay (an L2 term added to the gradient: optim::adam, torch.optim.Adam) or
// decoupled_weight_decay (the weights shrink directly: optim::adamw, Loshchilov and Hutter 2019,
// torch.optim.AdamW).
//
//   t = t + 1;  d = g + wd * w  (coupled)            w = (1 - lr * wd) * w  (decoupled)
//   m = b1 * m + (1 - b1) * d
//   v = b2 * v + (1 - b2) * d^2;   AMSGrad: vmax = max(vmax, v), used in place of v below
//   w = w - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//
// Per layer step, in double, rounded once to float: a = lr / (1 - b1^t), q = sqrt(1 - b2^t),
// k = 1 - lr * wd (decoupled). In float: c1 = 1 - b1, c2 = 1 - b2.
// Per element, in float, each operation rounded on its own in this order (s: per-layer gradient scale, 1 except
// under lars<adam>):
//   decoupled: w = w * k;          coupled: t0 = wd * w;  d = g + t0;     then  d = s * d;
//   t1 = b1 * m;  t2 = c1 * d;  m = t1 + t2;
//   d2 = d * d;  t3 = b2 * v;  t4 = c2 * d2;  v = t3 + t4;
//   AMSGrad: vmax = max(vmax, v) (vmax if equal), r = sqrt(vmax);  else r = sqrt(v);
//   r = r / q;  r = r + eps;  u = m / r;  u = a * u;  w = w - u

#include <algorithm>
#include <array>
#include <cmath>
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
#include "hitch/optim/detail/sqrt.hpp"
#include "hitch/optim/detail/strict_fp.hpp"
#include "hitch/optim/detail/tiers.hpp"

namespace hitch::optim {

/// Weight decay as an L2 term in the gradient (Adam as published; torch.optim.Adam's weight_decay).
struct coupled_weight_decay {
    static constexpr bool decoupled = false;
    static constexpr std::string_view name = "adam";
};
/// Weight decay applied to the weights directly, scaled by the learning rate (AdamW).
struct decoupled_weight_decay {
    static constexpr bool decoupled = true;
    static constexpr std::string_view name = "adamw";
};

namespace detail {
struct adam_scalars;
}  // namespace detail

/// One layer's adam state on device D.
template <device D>
struct adam_state {
    device_buffer<float, D> m, v, v_max;  // v_max is empty unless amsgrad
    std::uint64_t steps = 0;
    [[nodiscard]] std::array<tensor_view<float>, 3> buffers() const noexcept {
        return {m.view(), v.view(), v_max.view()};
    }
};

template <class WeightDecay = coupled_weight_decay>
class basic_adam {
public:
    struct options_type {
        /// Decay of the first moment, in [0, 1).
        float beta1 = 0.9f;
        /// Decay of the second moment, in [0, 1).
        float beta2 = 0.999f;
        /// Added to the denominator, > 0.
        float epsilon = 1e-8f;
        /// wd >= 0: an L2 coefficient (adam) or the decoupled decay rate (adamw).
        float weight_decay = WeightDecay::decoupled ? 1e-2f : 0.0f;
        /// Keep the running maximum of v (AMSGrad).
        bool amsgrad = false;

        void validate() const {
            option_validator(std::string("hitch::optim::").append(WeightDecay::name))
                .half_open("beta1", beta1, 0.0f, 1.0f)
                .half_open("beta2", beta2, 0.0f, 1.0f)
                .positive("epsilon", epsilon)
                .non_negative("weight_decay", weight_decay);
        }
    };

    template <class D>  // constrained by the state itself (clang 14 cannot take a constrained alias here)
    using state_type = adam_state<D>;

    basic_adam() : basic_adam(options_type{}) {}
    explicit basic_adam(const options_type& options) : options_(options) { options_.validate(); }

    [[nodiscard]] const options_type& options() const noexcept { return options_; }
    static constexpr std::string_view name = WeightDecay::name;
    /// Each element's update reads only that element: a piece of a layer steps alone (optim/split_step.hpp).
    static constexpr bool elementwise = true;

    template <device D>
    [[nodiscard]] state_type<D> make_state(D& dev, std::size_t n) const {
        return {device_buffer<float, D>(dev, n), device_buffer<float, D>(dev, n),
                device_buffer<float, D>(dev, options_.amsgrad ? n : 0), 0};
    }

    template <host_device D>
    void step(const layer& l, state_type<D>& s, float lr, const parallel_options& exec = {}) const {
        apply(l, s, lr, l.flags.exclude_from_weight_decay ? 0.0f : options_.weight_decay, 1.0f, exec);
    }
    /// The same step on a device the host cannot read, by that device's kernels (optim/detail/device_step.hpp).
    template <device D>
        requires(!host_device<D>)
    void step(const layer& l, state_type<D>& s, float lr, const parallel_options& exec = {}) const {
        device_step<basic_adam, D>::step(*this, l, s, lr, exec);
    }

    /// The step with an explicit weight decay and gradient scale (used by lars<adam>).
    template <host_device D>
    void apply(const layer& l, state_type<D>& s, float lr, float weight_decay, float scale,
               const parallel_options& exec = {}) const;

    /// The per-layer scalars of step t (from 1) with this rate, weight decay and gradient scale, as every device's
    /// kernel takes them (the file comment says how each is rounded).
    [[nodiscard]] detail::adam_scalars scalars(float lr, float weight_decay, float scale, std::uint64_t t) const;

private:
    options_type options_;
};

/// Adam with an L2 penalty (Kingma and Ba 2015).
using adam = basic_adam<coupled_weight_decay>;

// ================================================ implementation ================================================

HITCH_OPTIM_STRICT_FP_BEGIN
namespace detail {

/// The scalars of one Adam step, fixed per layer step.
struct adam_scalars {
    float b1, b2, c1, c2, eps, step_size, bc2_sqrt, wd, decay, scale;
};

template <hitch::isa Tier, bool Decoupled, bool Decay, bool Amsgrad>
HITCH_OPTIM_KERNEL void adam_kernel(float* __restrict w, const float* __restrict g, float* __restrict m,
                                    float* __restrict v, float* __restrict vmax, std::size_t n, adam_scalars k) {
    HITCH_OPTIM_STRICT_FP_SCOPE
    // Tiles: moments and radicands first, square roots (detail/sqrt.hpp), then the weights; see the file comment
    // for the operation order, which the tiling does not change.
    alignas(64) float root[sqrt_tile];
    alignas(64) float decayed[sqrt_tile];
    for (std::size_t base = 0; base < n; base += sqrt_tile) {
        const std::size_t len = std::min(sqrt_tile, n - base);
        float* __restrict wt = w + base;
        const float* __restrict gt = g + base;
        float* __restrict mt = m + base;
        float* __restrict vt = v + base;
        for (std::size_t i = 0; i < len; ++i) {
            float p = wt[i];
            float d = gt[i];
            if constexpr (Decay) {
                if constexpr (Decoupled) {
                    p = p * k.decay;
                } else {
                    const float t0 = k.wd * p;
                    d = d + t0;
                }
            }
            decayed[i] = p;
            d = k.scale * d;
            const float t1 = k.b1 * mt[i];
            const float t2 = k.c1 * d;
            mt[i] = t1 + t2;
            const float d2 = d * d;
            const float t3 = k.b2 * vt[i];
            const float t4 = k.c2 * d2;
            const float vi = t3 + t4;
            vt[i] = vi;
            if constexpr (Amsgrad) {
                float* __restrict vmt = vmax + base;
                const float vm = vmt[i] < vi ? vi : vmt[i];
                vmt[i] = vm;
                root[i] = vm;
            } else {
                root[i] = vi;
            }
        }
        sqrt_in_place<Tier>(root, len);
        for (std::size_t i = 0; i < len; ++i) {
            float r = root[i] / k.bc2_sqrt;
            r = r + k.eps;
            float u = mt[i] / r;
            u = k.step_size * u;
            wt[i] = decayed[i] - u;
        }
    }
}

template <hitch::isa Tier, bool Decoupled, bool Decay>
HITCH_OPTIM_KERNEL void adam_dispatch(bool amsgrad, float* w, const float* g, float* m, float* v, float* vmax,
                                      std::size_t n, const adam_scalars& k) {
    if (amsgrad)
        adam_kernel<Tier, Decoupled, Decay, true>(w, g, m, v, vmax, n, k);
    else
        adam_kernel<Tier, Decoupled, Decay, false>(w, g, m, v, vmax, n, k);
}

}  // namespace detail
HITCH_OPTIM_STRICT_FP_END

template <class WeightDecay>
detail::adam_scalars basic_adam<WeightDecay>::scalars(float lr, float weight_decay, float scale,
                                                      std::uint64_t t) const {
    detail::adam_scalars k{};
    k.b1 = options_.beta1;
    k.b2 = options_.beta2;
    k.c1 = 1.0f - options_.beta1;
    k.c2 = 1.0f - options_.beta2;
    k.eps = options_.epsilon;
    k.step_size = static_cast<float>(static_cast<double>(lr) / (1.0 - detail::power(options_.beta1, t)));
    k.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - detail::power(options_.beta2, t)));
    k.wd = weight_decay;
    k.decay = static_cast<float>(1.0 - static_cast<double>(lr) * static_cast<double>(weight_decay));
    k.scale = scale;
    return k;
}

template <class WeightDecay>
template <host_device D>
void basic_adam<WeightDecay>::apply(const layer& l, state_type<D>& s, float lr, float weight_decay, float scale,
                                    const parallel_options& exec) const {
    const std::string who = std::string("hitch::optim::").append(name);
    if (options_.amsgrad)
        detail::check_step(who, l, {s.m.size(), s.v.size(), s.v_max.size()}, lr);
    else
        detail::check_step(who, l, {s.m.size(), s.v.size()}, lr);
    const std::uint64_t t = s.steps + 1;
    const detail::adam_scalars k = scalars(lr, weight_decay, scale, t);
    float* w = l.params.data();
    const float* g = l.grads.data();
    float* m = s.m.data();
    float* v = s.v.data();
    float* vmax = s.v_max.data();
    const bool amsgrad = options_.amsgrad;
    constexpr bool decoupled = WeightDecay::decoupled;
    parallel_for(
        l.size(),
        [&](std::size_t b, std::size_t e) {
            float* vm = amsgrad ? vmax + b : nullptr;
            detail::run_tiered([&](auto tier) HITCH_OPTIM_INLINE_LAMBDA {
                constexpr hitch::isa T = decltype(tier)::value;
                if (weight_decay != 0.0f)
                    detail::adam_dispatch<T, decoupled, true>(amsgrad, w + b, g + b, m + b, v + b, vm, e - b, k);
                else
                    detail::adam_dispatch<T, decoupled, false>(amsgrad, w + b, g + b, m + b, v + b, vm, e - b, k);
            });
        },
        exec);
    s.steps = t;
}

static_assert(optimizer<adam>, "hitch::optim::adam must model hitch::optimizer");

}  // namespace hitch::optim
