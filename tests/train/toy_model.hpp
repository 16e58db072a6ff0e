#pragma once
// The small model data_parallel's tests train: layers of given sizes whose gradients are exactly representable
// (multiples of 1/8 in [-1, 1]), so sums over ranks and micro-batches are exact in float.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hitch/core/layer.hpp"
#include "hitch/core/tensor.hpp"

namespace hitch_test {

/// Rank `rank`'s gradient of element i of layer `layer` at step (or micro-batch) `step`.
inline float grad_value(int rank, std::uint64_t step, std::size_t layer, std::size_t i) {
    return static_cast<float>(
               (rank * 7 + static_cast<int>(step) * 3 + static_cast<int>(layer) * 5 + static_cast<int>(i % 1009)) % 17 -
               8) /
           8.0f;
}

struct toy_model {
    std::vector<std::vector<float>> w, g;
    explicit toy_model(const std::vector<std::size_t>& sizes) {
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            w.emplace_back(sizes[k]);
            g.emplace_back(sizes[k]);
            for (std::size_t i = 0; i < sizes[k]; ++i) w[k][i] = static_cast<float>(i % 13) * 0.25f - 1.0f;
        }
    }
    std::vector<hitch::layer> layers() {
        std::vector<hitch::layer> out;
        for (std::size_t k = 0; k < w.size(); ++k)
            out.push_back({"layer" + std::to_string(k), hitch::view(w[k]), hitch::view(g[k])});
        return out;
    }
    void fill_grads(int rank, std::uint64_t step) {
        for (std::size_t k = 0; k < g.size(); ++k)
            for (std::size_t i = 0; i < g[k].size(); ++i) g[k][i] = grad_value(rank, step, k, i);
    }
};

}  // namespace hitch_test
