#pragma once
// Host replays of the GPU optimizer kernels (include/hitch/cuda/optim/detail/kernels.cuh): the same chunk table
// (multi_tensor.hpp), the same per-element functions (rules.hpp, math.hpp), the same lanes and the same order of the
// per-layer sums, run on the host. The host tests compare these with the CPU kernels bit for bit, so a machine
// without a GPU checks everything in the kernels but the launch itself.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "hitch/core/layer.hpp"
#include "hitch/cuda/optim/math.hpp"
#include "hitch/cuda/optim/multi_tensor.hpp"
#include "hitch/cuda/optim/rules.hpp"
#include "hitch/optim/lamb.hpp"
#include "hitch/optim/lars.hpp"

namespace hitch_test {

namespace co = hitch::cuda::optim;

/// One layer as the GPU sees it: parameters, gradient, up to three state buffers (in the rule's order), flags,
/// and its step count.
struct emulated_layer {
    std::vector<float> w, g;
    std::array<std::vector<float>, 3> s;
    hitch::layer_flags flags{};
    std::uint64_t steps = 0;
};
using emulated_model = std::vector<emulated_layer>;

inline co::chunk_layout layout_of(const emulated_model& m) {
    std::vector<std::size_t> sizes;
    for (const emulated_layer& l : m) sizes.push_back(l.w.size());
    return co::make_chunk_layout(sizes);
}

/// The element-wise kernel over every chunk, with per-layer scalars k and gradient scales.
template <class Rule>
void emulate_elementwise(const Rule& rule, emulated_model& m,
                         const std::vector<typename co::elementwise_rule<Rule>::scalars>& k,
                         const std::vector<float>& scale) {
    using R = co::elementwise_rule<Rule>;
    const int states = R::state_count(rule);
    const co::chunk_layout layout = layout_of(m);
    for (const co::chunk_entry& c : layout.chunks) {
        emulated_layer& l = m[c.tensor];
        const std::uint64_t end = co::chunk_end(l.w.size(), c.index);
        for (std::uint64_t i = co::chunk_begin(c.index); i < end; ++i) {
            float s[3] = {0.0f, 0.0f, 0.0f};
            for (int q = 0; q < states; ++q) s[q] = l.s[static_cast<std::size_t>(q)][i];
            R::apply(l.w[i], l.g[i], s, scale[c.tensor], k[c.tensor]);
            for (int q = 0; q < states; ++q) l.s[static_cast<std::size_t>(q)][i] = s[q];
        }
    }
}

/// model_optimizer<Rule, cuda::device>::step(lr) of an element-wise rule (sgd, momentum, adam, adamw).
template <class Rule>
void emulate_step(const Rule& rule, emulated_model& m, float lr) {
    using R = co::elementwise_rule<Rule>;
    std::vector<typename R::scalars> k;
    for (const emulated_layer& l : m) k.push_back(R::make(rule, lr, R::weight_decay(rule, l.flags), l.steps));
    emulate_elementwise(rule, m, k, std::vector<float>(m.size(), 1.0f));
    for (emulated_layer& l : m) ++l.steps;
}

/// The lane kernel: partial[2c], partial[2c + 1] for every chunk c, each a block's 16 lanes combined pairwise.
/// `element(layer, i, a, b)` adds element i's squares to the lanes a and b.
template <class Skip, class Element>
std::vector<double> emulate_lane_sums(emulated_model& m, const co::chunk_layout& layout, Skip skip, Element element) {
    std::vector<double> partial(2 * layout.chunks.size(), 0.0);
    for (std::size_t c = 0; c < layout.chunks.size(); ++c) {
        const co::chunk_entry e = layout.chunks[c];
        emulated_layer& l = m[e.tensor];
        double a[co::norm_lanes] = {}, b[co::norm_lanes] = {};
        if (!skip(l)) {
            const std::uint64_t begin = co::chunk_begin(e.index), end = co::chunk_end(l.w.size(), e.index);
            for (std::uint64_t i = begin; i < end; ++i) {
                const std::size_t lane = static_cast<std::size_t>((i - begin) % co::norm_lanes);
                element(e.tensor, i, a[lane], b[lane]);
            }
        }
        partial[2 * c] = co::combine_lanes(a);
        partial[2 * c + 1] = co::combine_lanes(b);
    }
    return partial;
}

/// The finish kernel's sums of layer t.
inline std::array<double, 2> emulate_finish(const emulated_model& m, const co::chunk_layout& layout,
                                            const std::vector<double>& partial, std::size_t t) {
    const std::uint64_t blocks = co::chunk_count(m[t].w.size());
    const double* p = partial.data() + 2 * layout.first_chunk[t];
    return {co::add_block_sums(p, blocks, 2), co::add_block_sums(p + 1, blocks, 2)};
}

/// model_optimizer<lars<Base>, cuda::device>::step(lr): norms, trust ratios, the base rule's update.
template <class Base>
void emulate_step(const hitch::optim::lars<Base>& rule, emulated_model& m, float lr) {
    using R = co::elementwise_rule<Base>;
    const co::chunk_layout layout = layout_of(m);
    const auto skip = [](const emulated_layer& l) { return l.flags.exclude_from_adaptation; };
    const std::vector<double> partial =
        emulate_lane_sums(m, layout, skip, [&](std::uint32_t t, std::uint64_t i, double& a, double& b) {
            co::add_square(a, m[t].w[i]);
            co::add_square(b, m[t].g[i]);
        });
    std::vector<typename R::scalars> k;
    std::vector<float> trust;
    for (std::size_t t = 0; t < m.size(); ++t) {
        const emulated_layer& l = m[t];
        const std::array<double, 2> sums =
            skip(l) ? std::array<double, 2>{0.0, 0.0} : emulate_finish(m, layout, partial, t);
        trust.push_back(co::lars_trust(sums[0], sums[1], co::make_lars_scalars(rule, l.flags)));
        k.push_back(R::make(rule.base(), lr, co::lars_weight_decay(rule, l.flags), l.steps));
    }
    emulate_elementwise(rule.base(), m, k, trust);
    for (emulated_layer& l : m) ++l.steps;
}

/// model_optimizer<lamb, cuda::device>::step(lr): moments and sums, rates, update.
inline void emulate_step(const hitch::optim::lamb& rule, emulated_model& m, float lr) {
    const co::chunk_layout layout = layout_of(m);
    std::vector<co::lamb_scalars> k;
    for (const emulated_layer& l : m) k.push_back(co::make_lamb_scalars(rule, l.flags, l.steps));
    const std::vector<double> partial = emulate_lane_sums(
        m, layout, [](const emulated_layer&) { return false; },
        [&](std::uint32_t t, std::uint64_t i, double& a, double& b) {
            emulated_layer& l = m[t];
            const float r = co::lamb_moments_element(l.w[i], l.g[i], l.s[0][i], l.s[1][i], k[t]);
            co::add_square(a, l.w[i]);
            co::add_square(b, r);
        });
    for (const co::chunk_entry& c : layout.chunks) {
        emulated_layer& l = m[c.tensor];
        const std::array<double, 2> sums = emulate_finish(m, layout, partial, c.tensor);
        const float rate = co::lamb_rate(sums[0], sums[1], l.flags.exclude_from_adaptation, lr);
        const std::uint64_t end = co::chunk_end(l.w.size(), c.index);
        for (std::uint64_t i = co::chunk_begin(c.index); i < end; ++i)
            l.w[i] = co::lamb_apply_element(l.w[i], l.s[0][i], l.s[1][i], rate, k[c.tensor]);
    }
    for (emulated_layer& l : m) ++l.steps;
}

}  // namespace hitch_test
