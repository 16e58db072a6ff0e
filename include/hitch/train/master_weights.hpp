#pragma once
// The FP32 layers data_parallel steps. An FP32 model is stepped in place; an FP16 or BF16 model gets FP32 master
// weights and gradients beside it, and the rounded masters are written back to the model after every change
// (Micikevicius et al. 2018, "Mixed Precision Training").

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/amp/mixed_precision.hpp"
#include "hitch/concepts/device.hpp"
#include "hitch/core/crc32c.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/device/buffer.hpp"

namespace hitch::train::detail {

template <floating_element Param, device D>
class master_weights {
public:
    static constexpr bool mixed_precision = !std::is_same_v<Param, float>;
    /// The layers the model hands over: hitch::layer, or amp::low_precision_layer for FP16 and BF16.
    using user_layer = std::conditional_t<mixed_precision, amp::low_precision_layer<Param>, hitch::layer>;

    master_weights(D& dev, std::vector<user_layer> layers) : user_layers_(std::move(layers)) {
        if constexpr (mixed_precision) {
            for (const user_layer& l : user_layers_) {
                masters_.emplace_back(dev, l.params.size());
                grads32_.emplace_back(dev, l.params.size());
                float* w = masters_.back().data();
                for (std::size_t i = 0; i < l.params.size(); ++i) w[i] = static_cast<float>(l.params[i]);
                layers_.push_back(
                    hitch::layer{l.name, masters_.back().view(), grads32_.back().view(), l.flags, l.rows});
            }
        } else {
            layers_ = user_layers_;
        }
    }

    /// The FP32 layers (the masters under mixed precision): what the optimizer and the exchange work on.
    [[nodiscard]] const std::vector<hitch::layer>& layers() const noexcept { return layers_; }
    /// The model's own layers, as handed over.
    [[nodiscard]] const std::vector<user_layer>& user_layers() const noexcept { return user_layers_; }

    /// Bytes of FP32 master parameters held beside the model (0 for an FP32 model, stepped in place).
    [[nodiscard]] std::size_t master_bytes() const noexcept {
        std::size_t n = 0;
        for (const auto& m : masters_) n += m.size() * sizeof(float);
        return n;
    }

    /// Rounds the masters into the model's parameters; nothing to do for an FP32 model.
    void write_back() {
        if constexpr (mixed_precision) {
            for (std::size_t k = 0; k < user_layers_.size(); ++k) {
                const float* w = layers_[k].params.data();
                Param* low = user_layers_[k].params.data();
                for (std::size_t i = 0; i < layers_[k].size(); ++i) low[i] = Param(w[i]);
            }
        }
    }

    /// CRC32C of every parameter's bytes in layer order: the FP32 ones, then the model's own under mixed precision.
    [[nodiscard]] std::uint64_t hash() const {
        crc32c crc;
        for (const hitch::layer& l : layers_)
            crc.update(std::as_bytes(std::span<const float>(l.params.data(), l.size())));
        if constexpr (mixed_precision)
            for (const user_layer& l : user_layers_)
                crc.update(std::as_bytes(std::span<const Param>(l.params.data(), l.params.size())));
        return crc.value();
    }

private:
    std::vector<user_layer> user_layers_;
    std::vector<device_buffer<float, D>> masters_;
    std::vector<device_buffer<float, D>> grads32_;
    std::vector<hitch::layer> layers_;
};

}  // namespace hitch::train::detail
