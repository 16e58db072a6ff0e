#pragma once
// The fixed assignment of layers to gradient buckets (as PyTorch DDP's reducer): backward produces gradients from
// the last layer to the first, so bucket 0 holds the last layers. Each bucket holds consecutive layers (in backward
// order) up to bucket_bytes; a layer of bucket_bytes or more gets a bucket of its own; zero-size layers join the
// bucket being filled. Every rank computes the same plan from the same layers, so buckets are exchanged in the same
// order everywhere whatever order gradient_ready calls arrive in.

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "hitch/core/layer.hpp"

namespace hitch::train {

struct bucket_plan {
    /// Layer indices in this bucket, in backward order.
    std::vector<std::size_t> layers;
    /// Offset (in elements) of each layer inside the bucket.
    std::vector<std::size_t> offsets;
    /// Total elements.
    std::size_t elements = 0;
};

/// Plans buckets of at most `bucket_bytes` of `element_bytes`-sized gradients.
[[nodiscard]] inline std::vector<bucket_plan> plan_buckets(std::span<const hitch::layer> layers,
                                                           std::size_t bucket_bytes, std::size_t element_bytes = 4) {
    const std::size_t capacity = std::max<std::size_t>(1, bucket_bytes / element_bytes);
    std::vector<bucket_plan> plan;
    bucket_plan current;
    const auto close = [&] {
        if (!current.layers.empty()) plan.push_back(std::move(current));
        current = {};
    };
    for (std::size_t k = layers.size(); k-- > 0;) {
        const std::size_t n = layers[k].size();
        if (n >= capacity) {
            close();
            current.layers.push_back(k);
            current.offsets.push_back(0);
            current.elements = n;
            close();
            continue;
        }
        if (current.elements + n > capacity) close();
        current.layers.push_back(k);
        current.offsets.push_back(current.elements);
        current.elements += n;
    }
    close();
    return plan;
}

}  // namespace hitch::train
