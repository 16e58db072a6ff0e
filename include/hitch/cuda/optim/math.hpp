#pragma once
// The per-element math of every optimizer, written once for the GPU kernels (hitch/cuda/optim/*.cuh) and the host
// tests, with the operations of hitch/cuda/detail/hd.hpp in exactly the order the CPU kernels document (the file
// comments of hitch/optim/{sgd,momentum,adam,lars,lamb}.hpp), operand order included, so the bits are the CPU's.
// Branches on per-layer flags (weight decay on or off, first step, Nesterov, AMSGrad) mirror the CPU kernels'
// template switches: "no decay" is not "decay by 0", which would turn -0 gradients into +0.
//
// The per-layer sums of squares (LARS, LAMB) follow hitch/optim/detail/norm.hpp: blocks of norm_block elements;
// lane j of a block adds x[i]^2 (in double) for i = j, j + 16, ... in increasing i; the 16 lanes combine pairwise;
// the block sums are added in block order from 0.0. Squares of floats are exact in double (a fused multiply-add
// gives the same bits), the additions are not, so the order is the definition.
//
// Needs no CUDA header: the host tests compile it with the host compiler.

#include <cstddef>
#include <cstdint>

#include "hitch/cuda/detail/hd.hpp"

namespace hitch::cuda::optim {

/// Elements per block of the sums of squares, and lanes per block (hitch/optim/detail/norm.hpp's; the CUDA
/// headers check that they agree).
inline constexpr std::size_t norm_block = 4096;
inline constexpr std::size_t norm_lanes = 16;

// ---- per-layer scalars of one step (plain data: kernel arguments or rows of a table in device memory) ------------

/// sgd: d = g (+ wd * w);  d = s * d;  w = w - lr * d.
struct sgd_scalars {
    float lr = 0.0f;
    float wd = 0.0f;
    std::uint32_t decay = 0;  // wd != 0 and the layer takes weight decay
};

/// momentum: see hitch/optim/momentum.hpp (c = 1 - dampening, rounded once in float).
struct momentum_scalars {
    float lr = 0.0f;
    float wd = 0.0f;
    float mu = 0.0f;
    float c = 0.0f;
    std::uint32_t decay = 0;
    std::uint32_t first = 0;  // the layer's first step: b = d
    std::uint32_t nesterov = 0;
};

/// adam / adamw: hitch::optim::detail::adam_scalars (less the gradient scale, which the kernels take apart: LARS
/// reads it from device memory) and the switches.
struct adam_scalars {
    float b1 = 0.0f, b2 = 0.0f, c1 = 0.0f, c2 = 0.0f, eps = 0.0f;
    float step_size = 0.0f;     // lr / (1 - b1^t), rounded once from double
    float bc2_sqrt = 0.0f;      // sqrt(1 - b2^t), rounded once from double
    float wd = 0.0f;            // coupled: the L2 coefficient
    float decay_factor = 0.0f;  // decoupled: 1 - lr * wd, rounded once from double
    std::uint32_t decay = 0;
    std::uint32_t decoupled = 0;
    std::uint32_t amsgrad = 0;
};

/// lamb: hitch::optim::detail::lamb_scalars and the decay switch.
struct lamb_scalars {
    float b1 = 0.0f, b2 = 0.0f, c1 = 0.0f, c2 = 0.0f, eps = 0.0f;
    float bc1 = 1.0f, bc2 = 1.0f;  // 1 - b^t, rounded once from double (1 without bias correction)
    float wd = 0.0f;
    std::uint32_t decay = 0;
};

/// lars: the trust ratio's options (the base rule's scalars come separately).
struct lars_scalars {
    float eta = 0.0f;  // trust coefficient
    float wd = 0.0f;   // 0 where the layer is excluded from weight decay
    float eps = 0.0f;
    std::uint32_t exclude = 0;  // excluded from adaptation: trust 1
};

// ---- per-element updates ----------------------------------------------------------------------------------------

/// One sgd element: returns the new w. `scale` is the per-layer gradient scale (1; the trust ratio under lars).
[[nodiscard]] HITCH_HD_INLINE float sgd_element(float w, float g, float scale, const sgd_scalars& k) noexcept {
    float d = g;
    if (k.decay != 0) {
        const float t = hd::mul(k.wd, w);
        d = hd::add(d, t);
    }
    d = hd::mul(scale, d);
    const float u = hd::mul(k.lr, d);
    return hd::sub(w, u);
}

/// One momentum element: w and the velocity b move in place.
HITCH_HD_INLINE void momentum_element(float& w, float g, float& b, float scale, const momentum_scalars& k) noexcept {
    float d = g;
    if (k.decay != 0) {
        const float t = hd::mul(k.wd, w);
        d = hd::add(d, t);
    }
    d = hd::mul(scale, d);
    float v;
    if (k.first != 0) {
        v = d;
    } else {
        const float t1 = hd::mul(k.mu, b);
        const float t2 = hd::mul(k.c, d);
        v = hd::add(t1, t2);
    }
    b = v;
    if (k.nesterov != 0) {
        const float t3 = hd::mul(k.mu, v);
        d = hd::add(d, t3);
    } else {
        d = v;
    }
    const float u = hd::mul(k.lr, d);
    w = hd::sub(w, u);
}

/// One adam / adamw element: w, m, v (and vmax under AMSGrad) move in place.
HITCH_HD_INLINE void adam_element(float& w, float g, float& m, float& v, float& vmax, float scale,
                                  const adam_scalars& k) noexcept {
    float p = w;
    float d = g;
    if (k.decay != 0) {
        if (k.decoupled != 0) {
            p = hd::mul(p, k.decay_factor);
        } else {
            const float t0 = hd::mul(k.wd, p);
            d = hd::add(d, t0);
        }
    }
    d = hd::mul(scale, d);
    const float t1 = hd::mul(k.b1, m);
    const float t2 = hd::mul(k.c1, d);
    const float mi = hd::add(t1, t2);
    m = mi;
    const float d2 = hd::mul(d, d);
    const float t3 = hd::mul(k.b2, v);
    const float t4 = hd::mul(k.c2, d2);
    const float vi = hd::add(t3, t4);
    v = vi;
    float root;
    if (k.amsgrad != 0) {
        const float vm = vmax < vi ? vi : vmax;
        vmax = vm;
        root = hd::sqrt(vm);
    } else {
        root = hd::sqrt(vi);
    }
    float r = hd::div(root, k.bc2_sqrt);
    r = hd::add(r, k.eps);
    float u = hd::div(mi, r);
    u = hd::mul(k.step_size, u);
    w = hd::sub(p, u);
}

/// LAMB's update direction r of one element from the new m and v and the weight (both passes use it, so they
/// agree bit for bit).
[[nodiscard]] HITCH_HD_INLINE float lamb_direction(float m, float v, float w, const lamb_scalars& k) noexcept {
    const float root = hd::sqrt(hd::div(v, k.bc2));
    const float mh = hd::div(m, k.bc1);
    float r = hd::add(root, k.eps);
    r = hd::div(mh, r);
    if (k.decay != 0) {
        const float t5 = hd::mul(k.wd, w);
        r = hd::add(r, t5);
    }
    return r;
}

/// LAMB pass 1 on one element: the moments move in place; returns r.
[[nodiscard]] HITCH_HD_INLINE float lamb_moments_element(float w, float g, float& m, float& v,
                                                         const lamb_scalars& k) noexcept {
    const float t1 = hd::mul(k.b1, m);
    const float t2 = hd::mul(k.c1, g);
    const float mi = hd::add(t1, t2);
    m = mi;
    const float g2 = hd::mul(g, g);
    const float t3 = hd::mul(k.b2, v);
    const float t4 = hd::mul(k.c2, g2);
    const float vi = hd::add(t3, t4);
    v = vi;
    return lamb_direction(mi, vi, w, k);
}

/// LAMB pass 2 on one element: returns the new w (rate = lr * trust).
[[nodiscard]] HITCH_HD_INLINE float lamb_apply_element(float w, float m, float v, float rate,
                                                       const lamb_scalars& k) noexcept {
    const float r = lamb_direction(m, v, w, k);
    const float u = hd::mul(rate, r);
    return hd::sub(w, u);
}

// ---- sums of squares in the defined order -----------------------------------------------------------------------

/// lane = lane + x^2, in double.
HITCH_HD_INLINE void add_square(double& lane, float x) noexcept {
    const double v = static_cast<double>(x);
    lane = hd::add(lane, hd::mul(v, v));
}

/// The 16 lane sums combined pairwise: ((l0 + l1) + (l2 + l3)) + ... ; `lane` is overwritten.
[[nodiscard]] HITCH_HD_INLINE double combine_lanes(double* lane) noexcept {
    for (std::size_t width = norm_lanes / 2; width >= 1; width /= 2)
        for (std::size_t j = 0; j < width; ++j) lane[j] = hd::add(lane[2 * j], lane[2 * j + 1]);
    return lane[0];
}

/// The sum of squares of one block x[0, len) (len <= norm_block), in lane order.
[[nodiscard]] HITCH_HD_INLINE double block_sum_of_squares(const float* x, std::size_t len) noexcept {
    double lane[norm_lanes] = {};
    for (std::size_t i = 0; i < len; ++i) add_square(lane[i % norm_lanes], x[i]);
    return combine_lanes(lane);
}

/// The block sums of a layer added in block order, from 0.0.
[[nodiscard]] HITCH_HD_INLINE double add_block_sums(const double* block_sum, std::size_t blocks,
                                                    std::size_t stride = 1) noexcept {
    double total = 0.0;
    for (std::size_t b = 0; b < blocks; ++b) total = hd::add(total, block_sum[b * stride]);
    return total;
}

/// sqrt of a sum of squares, rounded once to float.
[[nodiscard]] HITCH_HD_INLINE float norm_from_sum(double sum_sq) noexcept {
    return static_cast<float>(hd::sqrt(sum_sq));
}

// ---- trust ratios -----------------------------------------------------------------------------------------------

/// LARS: eta * ||w|| / (||g|| + wd * ||w|| + eps), or 1 (an excluded layer, a norm that is zero or NaN).
[[nodiscard]] HITCH_HD_INLINE float lars_trust(double w_sum, double g_sum, const lars_scalars& k) noexcept {
    if (k.exclude != 0) return 1.0f;
    const float wn = norm_from_sum(w_sum);
    const float gn = norm_from_sum(g_sum);
    if (!(wn > 0.0f) || !(gn > 0.0f)) return 1.0f;
    const float t1 = hd::mul(k.wd, wn);
    const float t2 = hd::add(gn, t1);
    const float t3 = hd::add(t2, k.eps);
    const float t4 = hd::mul(k.eta, wn);
    return hd::div(t4, t3);
}

/// LAMB: lr * ||w|| / ||r||, with a trust ratio of 1 for an excluded layer or a norm that is zero or NaN.
[[nodiscard]] HITCH_HD_INLINE float lamb_rate(double w_sum, double r_sum, bool exclude, float lr) noexcept {
    const float wn = norm_from_sum(w_sum);
    const float rn = norm_from_sum(r_sum);
    const float trust = (exclude || !(wn > 0.0f) || !(rn > 0.0f)) ? 1.0f : hd::div(wn, rn);
    return hd::mul(lr, trust);
}

}  // namespace hitch::cuda::optim
