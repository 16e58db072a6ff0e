#pragma once
// data_parallel's optimizer: the whole model's state on every rank (optim::model_optimizer), or, under ZeRO
// (Rajbhandari et al., SC'20; options.zero_stage 1 or 2), only this rank's pieces of it (optim::sharded_optimizer),
// the pieces being this rank's blocks of the gradient buckets. A rule that is neither elementwise nor layer-wise
// (a user's rule without the markers of hitch/optim/split_step.hpp) still trains unsharded; asking it to shard is
// config_error.

#include <cstddef>
#include <istream>
#include <optional>
#include <ostream>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/concepts/device.hpp"
#include "hitch/concepts/optimizer.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/optim/model_optimizer.hpp"
#include "hitch/optim/sharded.hpp"
#include "hitch/optim/split_step.hpp"

namespace hitch::train::detail {

template <optimizer O, device D>
class optimizer_stage {
public:
    static constexpr bool can_shard = optim::shardable_rule<O, D> && host_device<D>;  // ZeRO runs on host devices

    /// Unsharded without `pieces`; sharded over them otherwise.
    optimizer_stage(const typename O::options_type& options, std::vector<hitch::layer> layers, D& dev,
                    const parallel_options& exec, std::optional<std::vector<optim::piece>> pieces) {
        if (!pieces) {
            full_.emplace(options, std::move(layers), dev, exec);
            return;
        }
        if constexpr (can_shard) {
            sharded_.emplace(options, std::move(layers), std::move(*pieces), dev, exec);
        } else {
            throw config_error(hitch::detail::concat(
                "hitch::data_parallel: option zero_stage needs an optimizer that is elementwise or layer-wise; '",
                O::name,
                "' is neither (add `static constexpr bool elementwise = true;` to an elementwise rule, or "
                "norm_sums and apply_with_sums to a layer-wise one: hitch/optim/split_step.hpp)"));
        }
    }

    [[nodiscard]] bool sharded() const noexcept {
        if constexpr (can_shard) return sharded_.has_value();
        return false;
    }

    /// Steps every layer (every piece) but those with skip[k] != 0. Sharded layer-wise rules call
    /// reduce_sums(std::span<double>) once: the caller sums them over the ranks.
    template <class Reduce>
    void step(float lr, std::span<const unsigned char> skip, Reduce&& reduce_sums) {
        if constexpr (can_shard)
            if (sharded_) {
                sharded_->step(lr, reduce_sums, skip);
                return;
            }
        if (skip.empty()) {
            full_->step(lr);
        } else {
            for (std::size_t k = 0; k < full_->size(); ++k)
                if (skip[k] == 0) full_->step(k, lr);
        }
    }

    /// Bytes of optimizer state this rank holds.
    [[nodiscard]] std::size_t state_bytes() const {
        if constexpr (can_shard)
            if (sharded_) return sharded_->state_bytes();
        std::size_t bytes = 0;
        for (std::size_t k = 0; k < full_->size(); ++k)
            for (const tensor_view<float> b : full_->state(k).buffers()) bytes += b.size_bytes();
        return bytes;
    }

    /// Every layer's state tensors (unsharded only: the policies that average state never shard).
    [[nodiscard]] optim::model_optimizer<O, D>& full() { return *full_; }

    void save(std::ostream& out) const {
        if constexpr (can_shard)
            if (sharded_) return sharded_->save(out);
        full_->save(out);
    }
    void load(std::istream& in) {
        if constexpr (can_shard)
            if (sharded_) return sharded_->load(in);
        full_->load(in);
    }

private:
    struct none {};
    std::optional<optim::model_optimizer<O, D>> full_;
    std::optional<std::conditional_t<can_shard, optim::sharded_optimizer<O, D>, none>> sharded_;
};

}  // namespace hitch::train::detail
