#pragma once
// Independent references for the optimizer tests:
//  - inputs: fixed pseudo-random parameters and a gradient sequence, the same for every implementation;
//  - published update rules, written from the papers in double precision, element by element, one layer at a time;
//  - float operations rounded one at a time (computed in double and rounded to float, which gives the correctly
//    rounded float result for +, -, *, /, sqrt), to check the documented operation order bit for bit whatever the
//    compiler does with the library's kernels.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace hitch_test {

inline std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/// Uniform in [-1, 1), a pure function of (seed, a, b).
inline float uniform(std::uint64_t seed, std::uint64_t a, std::uint64_t b) {
    const std::uint64_t h = splitmix64(seed ^ splitmix64(a * 0x100000001b3ull + b));
    return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ull << 23) - 1.0);
}

inline std::vector<float> initial_params(std::size_t n, std::uint64_t seed) {
    std::vector<float> w(n);
    for (std::size_t i = 0; i < n; ++i) w[i] = 0.5f * uniform(seed, 0xffff, i);
    return w;
}

/// The gradient of step t (t from 0), with a per-layer magnitude so layers differ in norm.
inline void gradient(std::vector<float>& g, std::uint64_t seed, std::uint64_t t, float magnitude = 1.0f) {
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = magnitude * uniform(seed, t, i);
}

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// ---- float operations rounded one at a time -----------------------------------------------------------------------
// Not inlined: GCC narrows (float)((double)a * (double)b) to a float multiply and, with FMA available in GNU mode,
// would fuse it with the caller's next addition, which is exactly what these references must not do.
[[gnu::noinline]] inline float fmul(float a, float b) {
    return static_cast<float>(static_cast<double>(a) * static_cast<double>(b));
}
[[gnu::noinline]] inline float fadd(float a, float b) {
    return static_cast<float>(static_cast<double>(a) + static_cast<double>(b));
}
[[gnu::noinline]] inline float fsub(float a, float b) {
    return static_cast<float>(static_cast<double>(a) - static_cast<double>(b));
}
[[gnu::noinline]] inline float fdiv(float a, float b) {
    return static_cast<float>(static_cast<double>(a) / static_cast<double>(b));
}
[[gnu::noinline]] inline float fsqrt(float a) { return static_cast<float>(std::sqrt(static_cast<double>(a))); }

// ---- published rules in double --------------------------------------------------------------------------------------
inline double l2(const std::vector<double>& x) {
    long double s = 0;
    for (double v : x) s += static_cast<long double>(v) * v;
    return static_cast<double>(std::sqrt(s));
}

/// Robbins-Monro SGD with L2 weight decay.
struct sgd_ref {
    double wd = 0;
    void step(std::vector<double>& w, const std::vector<double>& g, double lr) const {
        for (std::size_t i = 0; i < w.size(); ++i) w[i] -= lr * (g[i] + wd * w[i]);
    }
};

/// Heavy ball / Nesterov (Sutskever et al. 2013 form, as torch.optim.SGD), with dampening.
struct momentum_ref {
    double mu = 0.9, dampening = 0, wd = 0;
    bool nesterov = false;
    std::vector<double> b;
    bool started = false;
    void step(std::vector<double>& w, const std::vector<double>& g, double lr) {
        if (b.size() != w.size()) b.assign(w.size(), 0.0);
        for (std::size_t i = 0; i < w.size(); ++i) {
            const double d = g[i] + wd * w[i];
            b[i] = started ? mu * b[i] + (1 - dampening) * d : d;
            const double step_dir = nesterov ? d + mu * b[i] : b[i];
            w[i] -= lr * step_dir;
        }
        started = true;
    }
};

/// Adam (Kingma and Ba 2015, Algorithm 1 with the bias corrections folded into the step size as in section 2),
/// AMSGrad (Reddi et al. 2018) and decoupled weight decay (Loshchilov and Hutter 2019).
struct adam_ref {
    double b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0;
    bool amsgrad = false, decoupled = false;
    std::vector<double> m, v, vmax;
    std::uint64_t t = 0;
    void step(std::vector<double>& w, const std::vector<double>& g, double lr) {
        if (m.size() != w.size()) m.assign(w.size(), 0.0), v.assign(w.size(), 0.0), vmax.assign(w.size(), 0.0);
        ++t;
        const double bc1 = 1 - std::pow(b1, static_cast<double>(t));
        const double bc2 = 1 - std::pow(b2, static_cast<double>(t));
        for (std::size_t i = 0; i < w.size(); ++i) {
            double d = g[i];
            if (decoupled)
                w[i] *= 1 - lr * wd;
            else
                d += wd * w[i];
            m[i] = b1 * m[i] + (1 - b1) * d;
            v[i] = b2 * v[i] + (1 - b2) * d * d;
            vmax[i] = std::max(vmax[i], v[i]);
            const double vv = amsgrad ? vmax[i] : v[i];
            w[i] -= lr / bc1 * m[i] / (std::sqrt(vv) / std::sqrt(bc2) + eps);
        }
    }
};

/// LARS (You, Gitman and Ginsburg 2017, Algorithm 1): v = m v + gamma * lambda * (g + beta w); w = w - v, with
/// local rate lambda = eta ||w|| / (||g|| + beta ||w|| + eps), 1 where a norm is zero or the layer is excluded.
struct lars_ref {
    double eta = 0.001, beta = 0, mu = 0.9, eps = 0;
    bool exclude_adaptation = false, exclude_decay = false;
    std::vector<double> v;
    void step(std::vector<double>& w, const std::vector<double>& g, double lr) {
        if (v.size() != w.size()) v.assign(w.size(), 0.0);
        const double wd = exclude_decay ? 0.0 : beta;
        const double wn = l2(w), gn = l2(g);
        const double local = (exclude_adaptation || wn == 0 || gn == 0) ? 1.0 : eta * wn / (gn + wd * wn + eps);
        for (std::size_t i = 0; i < w.size(); ++i) {
            v[i] = mu * v[i] + lr * local * (g[i] + wd * w[i]);
            w[i] -= v[i];
        }
    }
};

/// LAMB (You et al. 2019, Algorithm 2 with bias correction, phi = identity).
struct lamb_ref {
    double b1 = 0.9, b2 = 0.999, eps = 1e-6, wd = 0;
    bool exclude_adaptation = false, exclude_decay = false, bias_correction = true;
    std::vector<double> m, v;
    std::uint64_t t = 0;
    void step(std::vector<double>& w, const std::vector<double>& g, double lr) {
        if (m.size() != w.size()) m.assign(w.size(), 0.0), v.assign(w.size(), 0.0);
        ++t;
        const double bc1 = bias_correction ? 1 - std::pow(b1, static_cast<double>(t)) : 1.0;
        const double bc2 = bias_correction ? 1 - std::pow(b2, static_cast<double>(t)) : 1.0;
        const double lambda = exclude_decay ? 0.0 : wd;
        std::vector<double> r(w.size());
        for (std::size_t i = 0; i < w.size(); ++i) {
            m[i] = b1 * m[i] + (1 - b1) * g[i];
            v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
            r[i] = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps) + lambda * w[i];
        }
        const double wn = l2(w), rn = l2(r);
        const double trust = (exclude_adaptation || wn == 0 || rn == 0) ? 1.0 : wn / rn;
        for (std::size_t i = 0; i < w.size(); ++i) w[i] -= lr * trust * r[i];
    }
};

/// ||x|| in the order hitch/optim/detail/norm.hpp documents (blocks of 4096, 16 lanes combined pairwise, blocks in
/// order), rounded to float: the norm LARS and LAMB must use, replayed independently.
inline float documented_norm(const std::vector<float>& x) {
    double total = 0;
    for (std::size_t b = 0; b < x.size(); b += 4096) {
        double lane[16] = {};
        for (std::size_t i = b; i < std::min(x.size(), b + 4096); ++i)
            lane[(i - b) % 16] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
        for (std::size_t width = 8; width >= 1; width /= 2)
            for (std::size_t j = 0; j < width; ++j) lane[j] = lane[2 * j] + lane[2 * j + 1];
        total += lane[0];
    }
    return static_cast<float>(std::sqrt(total));
}

inline std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

/// max over i of |a_i - b_i| / max(1, max_j |b_j|): float rounding is relative to the layer's largest weights.
inline double max_relative_error(const std::vector<float>& a, const std::vector<double>& b) {
    double scale = 1.0, e = 0;
    for (double x : b) scale = std::max(scale, std::abs(x));
    for (std::size_t i = 0; i < a.size(); ++i) e = std::max(e, std::abs(static_cast<double>(a[i]) - b[i]));
    return e / scale;
}

}  // namespace hitch_test
