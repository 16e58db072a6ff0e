#pragma once
// Runs an optimizer and a reference side by side over several layers for many steps.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "hitch/core/layer.hpp"
#include "hitch/optim/model_optimizer.hpp"
#include "reference.hpp"

namespace hitch_test {

/// A model of float layers with owned storage.
struct float_model {
    std::vector<std::vector<float>> params, grads;
    std::vector<hitch::layer> layers;

    float_model(const std::vector<std::size_t>& sizes, std::uint64_t seed,
                const std::vector<hitch::layer_flags>& flags = {}) {
        params.reserve(sizes.size());
        grads.reserve(sizes.size());
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            params.push_back(initial_params(sizes[k], seed + k));
            grads.emplace_back(sizes[k], 0.0f);
        }
        for (std::size_t k = 0; k < sizes.size(); ++k)
            layers.push_back({"layer" + std::to_string(k), hitch::view(params[k]), hitch::view(grads[k]),
                              k < flags.size() ? flags[k] : hitch::layer_flags{}});
    }
    /// Fills step t's gradients; layer k's magnitude grows with k so layer norms differ.
    void fill_gradients(std::uint64_t seed, std::uint64_t t) {
        for (std::size_t k = 0; k < grads.size(); ++k)
            gradient(grads[k], seed + 1000 * k, t, 0.5f + static_cast<float>(k));
    }
};

/// Steps `opt` and one reference per layer `steps` times with lr(t); returns the largest relative error seen
/// at any step in any layer. `refs[k]` is layer k's reference.
template <class Model, class Ref>
double trajectory_error(Model& opt, float_model& m, std::vector<Ref>& refs, int steps, std::uint64_t seed,
                        const std::function<float(int)>& lr) {
    std::vector<std::vector<double>> w;
    for (auto& p : m.params) w.push_back(widen(p));
    double worst = 0;
    for (int t = 0; t < steps; ++t) {
        m.fill_gradients(seed, static_cast<std::uint64_t>(t));
        const float rate = lr(t);
        opt.step(rate);
        for (std::size_t k = 0; k < refs.size(); ++k) {
            refs[k].step(w[k], widen(m.grads[k]), static_cast<double>(rate));
            worst = std::max(worst, max_relative_error(m.params[k], w[k]));
        }
    }
    return worst;
}

/// All parameters of every layer, concatenated.
inline std::vector<float> all_params(const float_model& m) {
    std::vector<float> out;
    for (const auto& p : m.params) out.insert(out.end(), p.begin(), p.end());
    return out;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (!same_bits(a[i], b[i])) return false;
    return true;
}

/// The state of O after one step on a model of `sizes`, as save() writes it.
template <class O>
std::string saved_state(const typename O::options_type& options, const std::vector<std::size_t>& sizes) {
    float_model m(sizes, 5);
    hitch::optim::model_optimizer<O> opt(options, m.layers);
    m.fill_gradients(1, 0);
    opt.step(0.1f);
    std::stringstream s;
    opt.save(s);
    return s.str();
}

/// The layer sizes the tests sweep: empty, single, odd, a SIMD tail, and one large enough to be split across
/// threads and norm blocks.
inline std::vector<std::size_t> sweep_sizes() { return {0, 1, 7, 33, 1000, 70001}; }

}  // namespace hitch_test
