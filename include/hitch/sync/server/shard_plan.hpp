#pragma once
// Which server owns which parameters: every element of every layer belongs to exactly one shard, one shard per
// server. By layer, the layers go largest first onto the least loaded shard (the longest-processing-time rule,
// within 4/3 of the best balance); by range, the concatenated parameters are cut into equal ranges.

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <span>
#include <vector>

#include "hitch/core/error.hpp"
#include "hitch/sync/server/options.hpp"

namespace hitch::sync {

/// A contiguous part of one layer.
struct shard_piece {
    std::size_t layer = 0;
    std::size_t offset = 0;
    std::size_t count = 0;
    friend bool operator==(const shard_piece&, const shard_piece&) = default;
};

class shard_plan {
public:
    shard_plan() = default;

    shard_plan(std::span<const std::size_t> layer_sizes, int shards, shard_by by) : shards_(checked(shards)) {
        if (by == shard_by::layer)
            by_layer(layer_sizes);
        else
            by_range(layer_sizes);
        elements_.assign(shards_.size(), 0);
        for (std::size_t s = 0; s < shards_.size(); ++s)
            for (const shard_piece& p : shards_[s]) elements_[s] += p.count;
    }

    [[nodiscard]] std::size_t size() const noexcept { return shards_.size(); }
    /// Shard s's pieces, in layer order.
    [[nodiscard]] std::span<const shard_piece> pieces(std::size_t s) const { return shards_.at(s); }
    [[nodiscard]] std::size_t elements(std::size_t s) const { return elements_.at(s); }

private:
    static std::size_t checked(int shards) {
        if (shards < 1)
            throw config_error(hitch::detail::concat("hitch::sync::shard_plan: ", shards, " shards; at least 1"));
        return static_cast<std::size_t>(shards);
    }

    void by_layer(std::span<const std::size_t> sizes) {
        std::vector<std::size_t> order(sizes.size());
        std::iota(order.begin(), order.end(), std::size_t{0});
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return sizes[a] > sizes[b]; });
        std::vector<std::size_t> load(shards_.size(), 0);
        for (std::size_t k : order) {
            const auto s = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
            load[s] += sizes[k];
            shards_[s].push_back({k, 0, sizes[k]});
        }
        for (auto& pieces : shards_)
            std::sort(pieces.begin(), pieces.end(),
                      [](const shard_piece& a, const shard_piece& b) { return a.layer < b.layer; });
    }

    void by_range(std::span<const std::size_t> sizes) {
        const std::size_t total = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
        const std::size_t n = shards_.size();
        std::size_t layer = 0, offset = 0;
        for (std::size_t s = 0; s < n; ++s) {
            std::size_t want = total * (s + 1) / n - total * s / n;
            while (want > 0) {
                while (offset == sizes[layer]) {
                    ++layer;
                    offset = 0;
                }
                const std::size_t take = std::min(want, sizes[layer] - offset);
                shards_[s].push_back({layer, offset, take});
                offset += take;
                want -= take;
            }
        }
    }

    std::vector<std::vector<shard_piece>> shards_;
    std::vector<std::size_t> elements_;
};

}  // namespace hitch::sync
