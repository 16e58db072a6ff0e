#pragma once
// LARS, layer-wise adaptive rate scaling (You, Gitman and Ginsburg 2017, "Large Batch Training of Convolutional
// Networks"), over any base rule that accepts a gradient scale (sgd, momentum, adam, adamw).
//
// Per layer, from the norms of the weights and the gradient (one pass over both):
//   trust = eta * ||w|| / (||g|| + wd * ||w|| + eps)      (1 if a norm is 0 or the layer is excluded)
// then the base rule's step with the gradient d = trust * (g + wd * w) (a second, fused pass). With the default
// base, momentum, this is
//   b = mu * b + trust * (g + wd * w);   w = w - lr * b
// which is the paper's Algorithm 1 (v = m v + gamma * lambda * (g + beta w); w = w - v) with the global rate
// gamma moved out of the velocity: identical for a constant rate, and the usual form (torch-style SGD) when the
// rate follows a schedule. Biases and normalisation parameters are usually excluded from the trust ratio and the
// decay: layer_flags::bias_or_norm().
//
// Norms: ||x|| = sqrt of a sum of squares accumulated in double in the fixed order of hitch/optim/detail/norm.hpp,
// rounded to float. The trust ratio, in float, each operation rounded on its own:
//   t1 = wd * ||w||;  t2 = ||g|| + t1;  t3 = t2 + eps;  t4 = eta * ||w||;  trust = t4 / t3
// The base rule is then applied with weight decay wd and gradient scale trust (see its header for its order).
// The two passes are norm_sums() and apply_with_sums() (hitch/optim/split_step.hpp): sharded state sums the
// norms of each rank's piece of the layer across ranks in between; step() is both on the whole layer.
// LARS owns the weight decay: the base rule's weight_decay must be 0.
//
// Mixed precision: the seed literature's recipe (convert to FP32, apply LARS, convert back) is what
// amp::mixed_precision_optimizer does with any optimizer, LARS included.

#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "hitch/concepts/optimizer.hpp"
#include "hitch/core/fixed_string.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/options.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/device/cpu.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/detail/checks.hpp"
#include "hitch/optim/detail/device_step.hpp"
#include "hitch/optim/detail/norm.hpp"
#include "hitch/optim/detail/tiers.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/optim/split_step.hpp"

namespace hitch::optim {

/// A rule LARS can wrap: an optimizer whose options have a weight_decay and that can step with an explicit
/// weight decay and gradient scale.
namespace detail {
inline constexpr std::string_view lars_open = "lars<";
inline constexpr std::string_view lars_close = ">";

/// "lars<" + Base::name + ">" in static storage. Spelled out instead of join_names, whose reference template
/// arguments nvcc's front end mistranslates: lars<Base> is also used in CUDA translation units.
template <class Base>
struct lars_name {
    static constexpr std::size_t size = lars_open.size() + std::string_view(Base::name).size() + lars_close.size();
    static constexpr fixed_string<size> value = [] {
        fixed_string<size> out{};
        std::size_t at = 0;
        for (const std::string_view part : {lars_open, std::string_view(Base::name), lars_close})
            for (const char c : part) out.chars[at++] = c;
        return out;
    }();
};
}  // namespace detail

template <class B>
concept lars_base =
    optimizer<B> && requires(const B& b, const layer& l, typename B::template state_type<host_device_archetype>& s,
                             float x, const parallel_options& p, typename B::options_type o) {
        { o.weight_decay } -> std::convertible_to<float>;
        b.apply(l, s, x, x, x, p);
    };

template <lars_base Base = momentum>
class lars {
public:
    struct options_type {
        /// The base rule's options (its weight_decay must stay 0: LARS applies the decay itself).
        typename Base::options_type base{};
        /// eta, the trust coefficient, > 0 (You et al. use 0.001).
        float trust_coefficient = 0.001f;
        /// wd >= 0, applied as d = g + wd * w inside the trust-scaled gradient.
        float weight_decay = 0.0f;
        /// Added to the trust ratio's denominator, >= 0.
        float epsilon = 0.0f;

        void validate() const {
            base.validate();
            option_validator(std::string("hitch::optim::").append(lars::name))
                .positive("trust_coefficient", trust_coefficient)
                .non_negative("weight_decay", weight_decay)
                .non_negative("epsilon", epsilon)
                .require(base.weight_decay == 0.0f, "base.weight_decay", base.weight_decay,
                         "{0} (LARS applies the decay itself: set lars weight_decay instead)");
        }
    };

    template <class D>  // constrained by the state itself (clang 14 cannot take a constrained alias here)
    using state_type = typename Base::template state_type<D>;

    lars() : lars(options_type{}) {}
    explicit lars(const options_type& options) : options_(options), base_(options.base) { options_.validate(); }

    [[nodiscard]] const options_type& options() const noexcept { return options_; }
    static constexpr std::string_view name = detail::lars_name<Base>::value.view();
    [[nodiscard]] const Base& base() const noexcept { return base_; }

    template <device D>
    [[nodiscard]] state_type<D> make_state(D& dev, std::size_t n) const {
        return base_.make_state(dev, n);
    }

    /// The trust ratio of layer `l` now (the first pass of step()).
    [[nodiscard]] float trust_ratio(const layer& l, const parallel_options& exec = {}) const {
        return trust_ratio_from_sums(l.flags, sums_of(l, exec));
    }
    /// The trust ratio of a layer with these flags whose ||w||^2 and ||g||^2 are `sums`.
    [[nodiscard]] float trust_ratio_from_sums(layer_flags flags, layer_sums sums) const;

    template <host_device D>
    void step(const layer& l, state_type<D>& s, float lr, const parallel_options& exec = {}) const {
        apply_with_sums(l, s, lr, norm_sums(l, s, exec), exec);
    }
    /// The same step on a device the host cannot read, by that device's kernels (optim/detail/device_step.hpp).
    template <device D>
        requires(!host_device<D>)
    void step(const layer& l, state_type<D>& s, float lr, const parallel_options& exec = {}) const {
        device_step<lars, D>::step(*this, l, s, lr, exec);
    }

    /// Phase 1 of a step split across the pieces of a layer (optim/split_step.hpp): this piece's ||w||^2 and
    /// ||g||^2 (zeros when the layer is excluded from adaptation, which needs no norms).
    template <host_device D>
    [[nodiscard]] layer_sums norm_sums(const layer& piece, state_type<D>& /*state*/,
                                       const parallel_options& exec = {}) const {
        check_layer(piece, memory_space::host, std::string("hitch::optim::").append(name));
        return sums_of(piece, exec);
    }
    /// Phase 2: the base rule's step of the piece, with the trust ratio of the whole layer's `sums`.
    template <host_device D>
    void apply_with_sums(const layer& piece, state_type<D>& s, float lr, layer_sums sums,
                         const parallel_options& exec = {}) const {
        check_layer(piece, memory_space::host, std::string("hitch::optim::").append(name));
        const float wd = piece.flags.exclude_from_weight_decay ? 0.0f : options_.weight_decay;
        base_.apply(piece, s, lr, wd, trust_ratio_from_sums(piece.flags, sums), exec);
    }
    /// The two phases on a device the host cannot read (phase 1 returns the sums to the host).
    template <device D>
        requires(!host_device<D>)
    [[nodiscard]] layer_sums norm_sums(const layer& piece, state_type<D>& s, const parallel_options& exec = {}) const {
        return device_step<lars, D>::norm_sums(*this, piece, s, exec);
    }
    template <device D>
        requires(!host_device<D>)
    void apply_with_sums(const layer& piece, state_type<D>& s, float lr, layer_sums sums,
                         const parallel_options& exec = {}) const {
        device_step<lars, D>::apply_with_sums(*this, piece, s, lr, sums, exec);
    }

private:
    /// ||w||^2 and ||g||^2 of l, or zeros where the trust ratio needs no norms.
    [[nodiscard]] static layer_sums sums_of(const layer& l, const parallel_options& exec);

    options_type options_;
    Base base_;
};

/// LARS over heavy-ball momentum: the recipe of You et al. 2017 and Goyal et al.'s large-batch ResNet-50 runs.
using lars_sgd = lars<momentum>;
/// LARS over Adam's moments.
using lars_adam = lars<adam>;

// ================================================ implementation ================================================

namespace detail {

/// Sums of squares of x and y over [0, n) in one pass, each in the order of hitch/optim/detail/norm.hpp.
inline std::array<double, 2> sums_of_squares(const float* x, const float* y, std::size_t n,
                                             const parallel_options& options) {
    const std::size_t blocks = (n + norm_block - 1) / norm_block;
    std::vector<double> sx(blocks, 0.0), sy(blocks, 0.0);
    parallel_options o = options;
    o.align = norm_block;
    parallel_for(
        n,
        [&](std::size_t begin, std::size_t end) {
            run_tiered([&](auto) HITCH_OPTIM_INLINE_LAMBDA {
                for (std::size_t b = begin; b < end; b += norm_block) {
                    std::array<double, norm_lanes> lx{}, ly{};
                    const std::size_t e = std::min(end, b + norm_block);
                    accumulate_squares(x, b, e, lx);
                    accumulate_squares(y, b, e, ly);
                    sx[b / norm_block] = combine_lanes(lx);
                    sy[b / norm_block] = combine_lanes(ly);
                }
            });
        },
        o);
    std::array<double, 2> total{0.0, 0.0};
    for (std::size_t b = 0; b < blocks; ++b) {
        total[0] += sx[b];
        total[1] += sy[b];
    }
    return total;
}

}  // namespace detail

template <lars_base Base>
layer_sums lars<Base>::sums_of(const layer& l, const parallel_options& exec) {
    if (l.flags.exclude_from_adaptation || l.size() == 0) return {0.0, 0.0};
    return detail::sums_of_squares(l.params.data(), l.grads.data(), l.size(), exec);
}

HITCH_OPTIM_STRICT_FP_BEGIN
template <lars_base Base>
float lars<Base>::trust_ratio_from_sums(layer_flags flags, layer_sums sums) const {
    HITCH_OPTIM_STRICT_FP_SCOPE
    if (flags.exclude_from_adaptation) return 1.0f;
    const float wn = detail::norm_from_sum(sums[0]);
    const float gn = detail::norm_from_sum(sums[1]);
    if (!(wn > 0.0f) || !(gn > 0.0f)) return 1.0f;
    const float wd = flags.exclude_from_weight_decay ? 0.0f : options_.weight_decay;
    const float t1 = wd * wn;
    const float t2 = gn + t1;
    const float t3 = t2 + options_.epsilon;
    const float t4 = options_.trust_coefficient * wn;
    return t4 / t3;
}
HITCH_OPTIM_STRICT_FP_END

static_assert(optimizer<lars<momentum>>, "hitch::optim::lars<momentum> must model hitch::optimizer");
static_assert(optimizer<lars<sgd>>, "hitch::optim::lars<sgd> must model hitch::optimizer");
static_assert(optimizer<lars<adam>>, "hitch::optim::lars<adam> must model hitch::optimizer");
static_assert(layerwise_rule<lars<momentum>>, "hitch::optim::lars steps a piece of a layer in two phases");

}  // namespace hitch::optim
