#pragma once
// LAMB, layer-wise adaptive moments (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT
// in 76 minutes", Algorithm 2, with phi the identity):
//
//   m = b1 * m + (1 - b1) * g;   v = b2 * v + (1 - b2) * g^2
//   r = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * w
//   w = w - lr * (||w|| / ||r||) * r                (trust ratio 1 if a norm is 0 or the layer is excluded)
//
// Two passes over the layer: the first updates m and v and accumulates ||w||^2 and ||r||^2 (reads w, g, m, v;
// writes m, v), the second recomputes r from the stored m and v — the same bits — and moves w (reads w, m, v;
// writes w). Storing r instead would move more bytes.
// The passes are norm_sums() and apply_with_sums() (hitch/optim/split_step.hpp), so sharded state runs pass 1 on
// each rank's piece of the layer, sums the norms across ranks, then runs pass 2; step() is both on the whole layer.
//
// Per layer step, in double, rounded once to float: bc1 = 1 - b1^t, bc2 = 1 - b2^t (both 1 without bias
// correction). In float: c1 = 1 - b1, c2 = 1 - b2. Per element, in float, each operation rounded on its own:
//   t1 = b1 * m;  t2 = c1 * g;  m = t1 + t2;   g2 = g * g;  t3 = b2 * v;  t4 = c2 * g2;  v = t3 + t4;
//   vh = v / bc2;  q = sqrt(vh);  mh = m / bc1;  r = q + eps;  r = mh / r;   decay: t5 = wd * w;  r = r + t5
// Norms: sums of squares in double in the order of hitch/optim/detail/norm.hpp, sqrt in double, rounded to float.
// Trust ratio, in float: trust = ||w|| / ||r||; then k = lr * trust and, per element, u = k * r;  w = w - u.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hitch/concepts/optimizer.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/options.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/device/buffer.hpp"
#include "hitch/device/cpu.hpp"
#include "hitch/optim/detail/checks.hpp"
#include "hitch/optim/detail/device_step.hpp"
#include "hitch/optim/detail/norm.hpp"
#include "hitch/optim/detail/sqrt.hpp"
#include "hitch/optim/detail/strict_fp.hpp"
#include "hitch/optim/detail/tiers.hpp"
#include "hitch/optim/split_step.hpp"

namespace hitch::optim {

namespace detail {
struct lamb_scalars;
}  // namespace detail

/// One layer's lamb state on device D.
template <device D>
struct lamb_state {
    device_buffer<float, D> m, v;
    std::uint64_t steps = 0;
    [[nodiscard]] std::array<tensor_view<float>, 2> buffers() const noexcept { return {m.view(), v.view()}; }
};

class lamb {
public:
    struct options_type {
        /// Decay of the first moment, in [0, 1).
        float beta1 = 0.9f;
        /// Decay of the second moment, in [0, 1).
        float beta2 = 0.999f;
        /// Added to the denominator, > 0 (the paper uses 1e-6).
        float epsilon = 1e-6f;
        /// wd >= 0, decoupled: added to the update direction r before the trust ratio.
        float weight_decay = 0.0f;
        /// Divide the moments by 1 - beta^t (Algorithm 2 as published; some implementations leave it out).
        bool bias_correction = true;

        void validate() const {
            option_validator("hitch::optim::lamb")
                .half_open("beta1", beta1, 0.0f, 1.0f)
                .half_open("beta2", beta2, 0.0f, 1.0f)
                .positive("epsilon", epsilon)
                .non_negative("weight_decay", weight_decay);
        }
    };

    template <class D>  // constrained by the state itself (clang 14 cannot take a constrained alias here)
    using state_type = lamb_state<D>;

    lamb() : lamb(options_type{}) {}
    explicit lamb(const options_type& options) : options_(options) { options_.validate(); }

    [[nodiscard]] const options_type& options() const noexcept { return options_; }
    static constexpr std::string_view name = "lamb";

    template <device D>
    [[nodiscard]] state_type<D> make_state(D& dev, std::size_t n) const {
        return {device_buffer<float, D>(dev, n), device_buffer<float, D>(dev, n), 0};
    }

    template <host_device D>
    void step(const layer& l, state_type<D>& s, float lr, const parallel_options& exec = {}) const {
        detail::check_step("hitch::optim::lamb", l, {s.m.size(), s.v.size()}, lr);
        apply_with_sums(l, s, lr, norm_sums(l, s, exec), exec);
    }
    /// The same step on a device the host cannot read, by that device's kernels (optim/detail/device_step.hpp).
    template <device D>
        requires(!host_device<D>)
    void step(const layer& l, state_type<D>& s, float lr, const parallel_options& exec = {}) const {
        device_step<lamb, D>::step(*this, l, s, lr, exec);
    }

    /// Phase 1 of a step split across the pieces of a layer (optim/split_step.hpp): pass 1 on the piece (m and
    /// v move) and its ||w||^2 and ||r||^2.
    template <host_device D>
    [[nodiscard]] layer_sums norm_sums(const layer& piece, state_type<D>& s, const parallel_options& exec = {}) const;
    /// Phase 2: pass 2 on the piece with the trust ratio of the whole layer's `sums`; counts the step.
    template <host_device D>
    void apply_with_sums(const layer& piece, state_type<D>& s, float lr, layer_sums sums,
                         const parallel_options& exec = {}) const;
    /// The two phases on a device the host cannot read (phase 1 returns the sums to the host).
    template <device D>
        requires(!host_device<D>)
    [[nodiscard]] layer_sums norm_sums(const layer& piece, state_type<D>& s, const parallel_options& exec = {}) const {
        return device_step<lamb, D>::norm_sums(*this, piece, s, exec);
    }
    template <device D>
        requires(!host_device<D>)
    void apply_with_sums(const layer& piece, state_type<D>& s, float lr, layer_sums sums,
                         const parallel_options& exec = {}) const {
        device_step<lamb, D>::apply_with_sums(*this, piece, s, lr, sums, exec);
    }

    /// The scalars of step t (from 1) of a layer with these flags, as every device's kernels take them.
    [[nodiscard]] detail::lamb_scalars scalars(layer_flags flags, std::uint64_t t) const;

private:
    options_type options_;
};

// ================================================ implementation ================================================

HITCH_OPTIM_STRICT_FP_BEGIN
namespace detail {

struct lamb_scalars {
    float b1, b2, c1, c2, eps, bc1, bc2, wd;
};

/// r for one element from m, the square root of v / bc2, and w (shared by both passes, so they agree bit for bit).
template <bool Decay>
HITCH_OPTIM_KERNEL float lamb_direction(float m, float root, float w, const lamb_scalars& k) {
    HITCH_OPTIM_STRICT_FP_SCOPE
    const float mh = m / k.bc1;
    float r = root + k.eps;
    r = mh / r;
    if constexpr (Decay) {
        const float t5 = k.wd * w;
        r = r + t5;
    }
    return r;
}

/// Pass 1 over [b, e) (whole norm blocks but the last): moments, and per-block sums of w^2 and r^2. Works in
/// tiles so the square roots vectorise (detail/sqrt.hpp); tiles start on multiples of 16 inside a block, so
/// element i of a tile goes to lane i % 16.
template <hitch::isa Tier, bool Decay>
HITCH_OPTIM_KERNEL void lamb_moments(const float* __restrict w, const float* __restrict g, float* __restrict m,
                                     float* __restrict v, std::size_t b, std::size_t e, const lamb_scalars& k,
                                     double* sw, double* sr) {
    HITCH_OPTIM_STRICT_FP_SCOPE
    alignas(64) float root[sqrt_tile];
    alignas(64) float dir[sqrt_tile];
    for (std::size_t blk = b; blk < e; blk += norm_block) {
        const std::size_t blk_end = std::min(e, blk + norm_block);
        std::array<double, norm_lanes> lw{}, lr{};
        for (std::size_t base = blk; base < blk_end; base += sqrt_tile) {
            const std::size_t len = std::min(sqrt_tile, blk_end - base);
            const float* __restrict wt = w + base;
            const float* __restrict gt = g + base;
            float* __restrict mt = m + base;
            float* __restrict vt = v + base;
            for (std::size_t i = 0; i < len; ++i) {
                const float t1 = k.b1 * mt[i];
                const float t2 = k.c1 * gt[i];
                mt[i] = t1 + t2;
                const float g2 = gt[i] * gt[i];
                const float t3 = k.b2 * vt[i];
                const float t4 = k.c2 * g2;
                const float vi = t3 + t4;
                vt[i] = vi;
                root[i] = vi / k.bc2;
            }
            sqrt_in_place<Tier>(root, len);
            for (std::size_t i = 0; i < len; ++i) dir[i] = lamb_direction<Decay>(mt[i], root[i], wt[i], k);
            std::size_t i = 0;
            for (; i + norm_lanes <= len; i += norm_lanes)
                for (std::size_t j = 0; j < norm_lanes; ++j) {
                    const double x = static_cast<double>(wt[i + j]);
                    const double y = static_cast<double>(dir[i + j]);
                    lw[j] += x * x;
                    lr[j] += y * y;
                }
            for (std::size_t j = 0; i < len; ++i, ++j) {
                const double x = static_cast<double>(wt[i]);
                const double y = static_cast<double>(dir[i]);
                lw[j] += x * x;
                lr[j] += y * y;
            }
        }
        sw[blk / norm_block] = combine_lanes(lw);
        sr[blk / norm_block] = combine_lanes(lr);
    }
}

/// Pass 2 over [0, n): w = w - rate * r, with r recomputed from the stored m and v.
template <hitch::isa Tier, bool Decay>
HITCH_OPTIM_KERNEL void lamb_apply(float* __restrict w, const float* __restrict m, const float* __restrict v,
                                   std::size_t n, const lamb_scalars& k, float rate) {
    HITCH_OPTIM_STRICT_FP_SCOPE
    alignas(64) float root[sqrt_tile];
    for (std::size_t base = 0; base < n; base += sqrt_tile) {
        const std::size_t len = std::min(sqrt_tile, n - base);
        float* __restrict wt = w + base;
        const float* __restrict mt = m + base;
        const float* __restrict vt = v + base;
        for (std::size_t i = 0; i < len; ++i) root[i] = vt[i] / k.bc2;
        sqrt_in_place<Tier>(root, len);
        for (std::size_t i = 0; i < len; ++i) {
            const float r = lamb_direction<Decay>(mt[i], root[i], wt[i], k);
            const float u = rate * r;
            wt[i] = wt[i] - u;
        }
    }
}

}  // namespace detail

inline detail::lamb_scalars lamb::scalars(layer_flags flags, std::uint64_t t) const {
    HITCH_OPTIM_STRICT_FP_SCOPE
    detail::lamb_scalars k{};
    k.b1 = options_.beta1;
    k.b2 = options_.beta2;
    k.c1 = 1.0f - options_.beta1;
    k.c2 = 1.0f - options_.beta2;
    k.eps = options_.epsilon;
    k.bc1 = options_.bias_correction ? static_cast<float>(1.0 - detail::power(options_.beta1, t)) : 1.0f;
    k.bc2 = options_.bias_correction ? static_cast<float>(1.0 - detail::power(options_.beta2, t)) : 1.0f;
    k.wd = flags.exclude_from_weight_decay ? 0.0f : options_.weight_decay;
    return k;
}

template <host_device D>
layer_sums lamb::norm_sums(const layer& piece, state_type<D>& s, const parallel_options& exec) const {
    HITCH_OPTIM_STRICT_FP_SCOPE
    detail::check_step("hitch::optim::lamb", piece, {s.m.size(), s.v.size()}, 0.0f);
    const detail::lamb_scalars k = scalars(piece.flags, s.steps + 1);
    const bool decay = k.wd != 0.0f;
    const std::size_t n = piece.size();
    const float* w = piece.params.data();
    const float* g = piece.grads.data();
    float* m = s.m.data();
    float* v = s.v.data();

    const std::size_t blocks = (n + detail::norm_block - 1) / detail::norm_block;
    std::vector<double> sw(blocks, 0.0), sr(blocks, 0.0);
    parallel_options pass1 = exec;
    pass1.align = detail::norm_block;
    parallel_for(
        n,
        [&](std::size_t b, std::size_t e) {
            detail::run_tiered([&](auto tier) HITCH_OPTIM_INLINE_LAMBDA {
                constexpr hitch::isa T = decltype(tier)::value;
                if (decay)
                    detail::lamb_moments<T, true>(w, g, m, v, b, e, k, sw.data(), sr.data());
                else
                    detail::lamb_moments<T, false>(w, g, m, v, b, e, k, sw.data(), sr.data());
            });
        },
        pass1);
    layer_sums sums{0.0, 0.0};
    for (std::size_t b = 0; b < blocks; ++b) {
        sums[0] += sw[b];
        sums[1] += sr[b];
    }
    return sums;
}

template <host_device D>
void lamb::apply_with_sums(const layer& piece, state_type<D>& s, float lr, layer_sums sums,
                           const parallel_options& exec) const {
    HITCH_OPTIM_STRICT_FP_SCOPE
    detail::check_step("hitch::optim::lamb", piece, {s.m.size(), s.v.size()}, lr);
    const std::uint64_t t = s.steps + 1;
    const detail::lamb_scalars k = scalars(piece.flags, t);
    const bool decay = k.wd != 0.0f;
    const std::size_t n = piece.size();
    float* w = piece.params.data();
    const float* m = s.m.data();
    const float* v = s.v.data();
    const float wn = detail::norm_from_sum(sums[0]);
    const float rn = detail::norm_from_sum(sums[1]);
    const float trust = (piece.flags.exclude_from_adaptation || !(wn > 0.0f) || !(rn > 0.0f)) ? 1.0f : wn / rn;
    const float rate = lr * trust;
    parallel_for(
        n,
        [&](std::size_t b, std::size_t e) {
            detail::run_tiered([&](auto tier) HITCH_OPTIM_INLINE_LAMBDA {
                constexpr hitch::isa T = decltype(tier)::value;
                if (decay)
                    detail::lamb_apply<T, true>(w + b, m + b, v + b, e - b, k, rate);
                else
                    detail::lamb_apply<T, false>(w + b, m + b, v + b, e - b, k, rate);
            });
        },
        exec);
    s.steps = t;
}
HITCH_OPTIM_STRICT_FP_END

static_assert(optimizer<lamb>, "hitch::optim::lamb must model hitch::optimizer");
static_assert(layerwise_rule<lamb>, "hitch::optim::lamb steps a piece of a layer in two phases");

}  // namespace hitch::optim
