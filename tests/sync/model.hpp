#pragma once
// A quadratic model for the sync-policy tests: rank r's loss is 0.5 |w - t_r|^2 plus a step-dependent tilt, so
// its gradient depends on the parameters it is computed on (staleness changes the result) and a serial reference
// can recompute it from any parameter vector.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hitch/core/layer.hpp"

namespace hitch_test {

struct quad_model {
    std::vector<std::vector<float>> w, g;
    std::vector<std::size_t> sizes;
    int rank;
    bool differ;

    /// `differ`: each rank starts from other parameters (else every rank from the same ones).
    quad_model(const std::vector<std::size_t>& layer_sizes, int r, bool differ_ = false)
        : sizes(layer_sizes), rank(r), differ(differ_) {
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            w.emplace_back(sizes[k]);
            g.emplace_back(sizes[k]);
            for (std::size_t i = 0; i < sizes[k]; ++i) w[k][i] = initial(k, i);
        }
    }
    [[nodiscard]] float initial(std::size_t k, std::size_t i) const {
        const std::size_t r = differ ? static_cast<std::size_t>(rank) : 0;
        return static_cast<float>((i * 7 + k * 3 + r * 5) % 11) * 0.125f - 0.5f;
    }
    [[nodiscard]] float target(std::size_t k, std::size_t i) const {
        return static_cast<float>((i * 5 + k + static_cast<std::size_t>(rank) * 3) % 9) * 0.25f - 1.0f;
    }
    [[nodiscard]] float grad(float x, std::size_t k, std::size_t i, int step) const {
        const float tilt = static_cast<float>((static_cast<std::size_t>(step) * 3 + i + k) % 5) * 0.0625f - 0.125f;
        return 0.5f * (x - target(k, i)) + tilt;
    }
    std::vector<hitch::layer> layers() {
        std::vector<hitch::layer> out;
        for (std::size_t k = 0; k < w.size(); ++k)
            out.push_back({"layer" + std::to_string(k), hitch::view(w[k]), hitch::view(g[k])});
        return out;
    }
    void gradients(int step) {
        for (std::size_t k = 0; k < w.size(); ++k)
            for (std::size_t i = 0; i < w[k].size(); ++i) g[k][i] = grad(w[k][i], k, i, step);
    }
    [[nodiscard]] std::vector<float> flat() const {
        std::vector<float> out;
        for (const auto& l : w) out.insert(out.end(), l.begin(), l.end());
        return out;
    }
    /// The gradient at flattened parameters x.
    [[nodiscard]] std::vector<float> gradient_at(const std::vector<float>& x, int step) const {
        std::vector<float> out;
        std::size_t at = 0;
        for (std::size_t k = 0; k < sizes.size(); ++k)
            for (std::size_t i = 0; i < sizes[k]; ++i) out.push_back(grad(x[at++], k, i, step));
        return out;
    }
};

}  // namespace hitch_test
