#pragma once
// Which samples each rank trains on. Every epoch has one global permutation of the data set, drawn from
// (seed, epoch), the same on every rank; rank r of p takes its r-th contiguous block of floor(n / p) entries, so
// the ranks see disjoint samples, all ranks take the same number of steps, and the n mod p samples left over
// change from epoch to epoch. The position (epoch, next index within the rank's block) is all the state there is:
// saving it and seeking back to it resumes the exact sequence of batches.

#include <cstdint>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn/random.hpp"

namespace hitch_examples::data {

class sharded_sampler {
public:
    struct position {
        std::uint64_t epoch = 0;
        std::size_t index = 0;  ///< samples of this epoch's block already handed out
        friend bool operator==(const position&, const position&) = default;
    };

    sharded_sampler(std::size_t dataset_size, int rank, int ranks, std::uint64_t seed)
        : size_(dataset_size), rank_(rank), ranks_(ranks), seed_(seed) {
        if (ranks < 1 || rank < 0 || rank >= ranks)
            throw std::invalid_argument("data::sharded_sampler: rank " + std::to_string(rank) + " of " +
                                        std::to_string(ranks) + " ranks");
        if (dataset_size < static_cast<std::size_t>(ranks))
            throw std::invalid_argument("data::sharded_sampler: " + std::to_string(dataset_size) +
                                        " samples cannot give each of " + std::to_string(ranks) + " ranks one");
        permutation_.resize(size_);
        seek({0, 0});
    }

    /// Samples this rank sees per epoch.
    [[nodiscard]] std::size_t shard_size() const { return size_ / static_cast<std::size_t>(ranks_); }
    /// Batches per epoch of up to `batch` samples (the last may be smaller; it is the same size on every rank).
    [[nodiscard]] std::size_t batches_per_epoch(std::size_t batch) const { return (shard_size() + batch - 1) / batch; }

    /// The next up to `batch` sample indices of the current epoch; empty once the epoch is used up (call
    /// next_epoch() then). The span is valid until the next call that changes the position.
    std::span<const std::size_t> next(std::size_t batch) {
        if (batch == 0) throw std::invalid_argument("data::sharded_sampler::next: batch must be positive");
        const std::size_t count = std::min(batch, shard_size() - at_.index);
        const std::span<const std::size_t> out(permutation_.data() + first() + at_.index, count);
        at_.index += count;
        return out;
    }

    [[nodiscard]] bool epoch_done() const { return at_.index == shard_size(); }
    void next_epoch() { seek({at_.epoch + 1, 0}); }

    [[nodiscard]] position tell() const { return at_; }

    /// Moves to `p` exactly as if the sampler had run there from the start.
    void seek(position p) {
        if (p.index > shard_size())
            throw std::out_of_range("data::sharded_sampler::seek: index " + std::to_string(p.index) +
                                    " is past this rank's " + std::to_string(shard_size()) + " samples per epoch");
        if (p.epoch != permuted_epoch_) {
            std::iota(permutation_.begin(), permutation_.end(), std::size_t{0});
            nn::random_source rng(nn::random_source::derive(seed_, p.epoch));
            rng.shuffle(std::span<std::size_t>(permutation_));
            permuted_epoch_ = p.epoch;
        }
        at_ = p;
    }

    /// The whole permutation of the current epoch (every rank's blocks).
    [[nodiscard]] std::span<const std::size_t> epoch_permutation() const { return permutation_; }

private:
    [[nodiscard]] std::size_t first() const { return static_cast<std::size_t>(rank_) * shard_size(); }

    std::size_t size_;
    int rank_, ranks_;
    std::uint64_t seed_;
    std::vector<std::size_t> permutation_;
    std::optional<std::uint64_t> permuted_epoch_;  // the epoch permutation_ holds
    position at_;
};

}  // namespace hitch_examples::data
