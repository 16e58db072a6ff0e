#pragma once
// Stochastic gradient descent with L2 weight decay (Robbins and Monro 1951; torch.optim.SGD with momentum 0).
//
//   d = g + wd * w            (the L2 term is left out when wd = 0 or the layer is excluded from weight decay)
//   w = w - lr * d
//
// Per element, in float, each operation rounded on its own in this order (the reference for other devices):
//   t = wd * w;  d = g + t;  d = s * d;  u = lr * d;  w = w - u
// where s is a per-layer gradient scale: 1 for plain SGD (exact), the trust ratio under lars<sgd>.

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

/// One layer's sgd state on device D.
template <device D>
struct sgd_state {
    std::uint64_t steps = 0;
    /// The device the layer lives on: a device step runs on its stream (sgd has no buffer that would say so).
    D* device = nullptr;
    [[nodiscard]] std::array<tensor_view<float>, 0> buffers() const noexcept { return {}; }
};

/// Plain SGD with optional L2 weight decay. Stateless apart from the step count.
class sgd {
public:
    struct options_type {
        /// L2 penalty coefficient wd >= 0.
        float weight_decay = 0.0f;

        void validate() const { option_validator("hitch::optim::sgd").non_negative("weight_decay", weight_decay); }
    };

    template <class D>  // constrained by the state itself (clang 14 cannot take a constrained alias here)
    using state_type = sgd_state<D>;

    sgd() : sgd(options_type{}) {}
    explicit sgd(const options_type& options) : options_(options) { options_.validate(); }

    [[nodiscard]] const options_type& options() const noexcept { return options_; }
    static constexpr std::string_view name = "sgd";
    /// Each element's update reads only that element: a piece of a layer steps alone (optim/split_step.hpp).
    static constexpr bool elementwise = true;

    template <device D>
    [[nodiscard]] state_type<D> make_state(D& dev, std::size_t /*n*/) const {
        return {0, &dev};
    }

    /// One step of layer `l` with learning rate `lr`.
    template <host_device D>
    void step(const layer& l, state_type<D>& s, float lr, const parallel_options& exec = {}) const {
        apply(l, s, lr, l.flags.exclude_from_weight_decay ? 0.0f : options_.weight_decay, 1.0f, exec);
    }
    /// The same step on a device the host cannot read, by that device's kernels (optim/detail/device_step.hpp).
    template <device D>
        requires(!host_device<D>)
    void step(const layer& l, state_type<D>& s, float lr, const parallel_options& exec = {}) const {
        device_step<sgd, D>::step(*this, l, s, lr, exec);
    }

    /// The step with an explicit weight decay and gradient scale (used by lars<sgd>).
    template <host_device D>
    void apply(const layer& l, state_type<D>& s, float lr, float weight_decay, float scale,
               const parallel_options& exec = {}) const;

private:
    options_type options_;
};

// ================================================ implementation ================================================

HITCH_OPTIM_STRICT_FP_BEGIN
namespace detail {

template <hitch::isa Tier, bool Decay>
HITCH_OPTIM_KERNEL void sgd_kernel(float* __restrict w, const float* __restrict g, std::size_t n, float lr, float wd,
                                   float s) {
    HITCH_OPTIM_STRICT_FP_SCOPE
    for (std::size_t i = 0; i < n; ++i) {
        float d = g[i];
        if constexpr (Decay) {
            const float t = wd * w[i];
            d = d + t;
        }
        d = s * d;
        const float u = lr * d;
        w[i] = w[i] - u;
    }
}

}  // namespace detail
HITCH_OPTIM_STRICT_FP_END

template <host_device D>
void sgd::apply(const layer& l, state_type<D>& s, float lr, float weight_decay, float scale,
                const parallel_options& exec) const {
    detail::check_step("hitch::optim::sgd", l, {}, lr);
    float* w = l.params.data();
    const float* g = l.grads.data();
    parallel_for(
        l.size(),
        [&](std::size_t b, std::size_t e) {
            detail::run_tiered([&](auto tier) HITCH_OPTIM_INLINE_LAMBDA {
                constexpr hitch::isa T = decltype(tier)::value;
                if (weight_decay != 0.0f)
                    detail::sgd_kernel<T, true>(w + b, g + b, e - b, lr, weight_decay, scale);
                else
                    detail::sgd_kernel<T, false>(w + b, g + b, e - b, lr, weight_decay, scale);
            });
        },
        exec);
    ++s.steps;
}

static_assert(optimizer<sgd>, "hitch::optim::sgd must model hitch::optimizer");

}  // namespace hitch::optim
