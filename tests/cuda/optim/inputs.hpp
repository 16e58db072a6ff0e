#pragma once
// Inputs of the GPU optimizer tests (host and GPU): the layer sizes, and the values the kernels must carry through
// exactly as the CPU does (NaN with payloads, infinities, denormals, signed zeros, the extremes).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "reference.hpp"

namespace hitch_test {

inline const std::vector<std::size_t>& edge_sizes() {
    static const std::vector<std::size_t> sizes = {0, 1, 31, 32, 33, 4096, 4097, (std::size_t{1} << 20) + 3};
    return sizes;
}

inline std::vector<float> edge_values() {
    const float inf = std::numeric_limits<float>::infinity();
    float payload_nan = 0.0f;
    const std::uint32_t bits = 0x7fc12345u;
    std::memcpy(&payload_nan, &bits, sizeof bits);
    return {std::numeric_limits<float>::quiet_NaN(),
            -std::numeric_limits<float>::quiet_NaN(),
            payload_nan,
            inf,
            -inf,
            std::numeric_limits<float>::denorm_min(),
            -std::numeric_limits<float>::denorm_min(),
            1e-40f,
            -3e-39f,
            std::numeric_limits<float>::min(),
            0.0f,
            -0.0f,
            std::numeric_limits<float>::max(),
            -std::numeric_limits<float>::max(),
            1e30f,
            -1e-30f};
}

/// Puts the edge values at a spread of positions of x (a different set per salt).
inline void sprinkle(std::vector<float>& x, std::uint64_t salt) {
    if (x.empty()) return;
    const std::vector<float> e = edge_values();
    for (std::size_t j = 0; j < e.size(); ++j)
        x[static_cast<std::size_t>(splitmix64(salt * 131 + j) % x.size())] = e[j];
}

/// Tiny values (denormal results and underflow) at every 97th element.
inline void shrink(std::vector<float>& x, std::uint64_t salt) {
    for (std::size_t i = 0; i < x.size(); i += 97) x[i] *= 1e-38f * static_cast<float>(1 + (salt + i) % 5);
}

/// Whether layer k carries edge values: the layer-wise rules need clean layers too, or every norm would be NaN and
/// every trust ratio 1.
inline bool has_edges(std::size_t k) { return k % 3 == 1; }

}  // namespace hitch_test
