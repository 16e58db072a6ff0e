#pragma once
// The FP32 layers data_parallel steps. An FP32 model is stepped in place; an FP16 or BF16 model gets FP32 master
// weights and gradients beside it, and the rounded masters are written back to the model after every change
// (Micikevicius et al. 2018, "Mixed Precision Training").
//
// Under ZeRO (shard()) an FP16 or BF16 model's FP32 masters are kept for this rank's pieces only, as DeepSpeed
// keeps them: the optimizer steps the pieces, write_back rounds them into the model, and the caller all-gathers the
// model's parameters (model_parameters()) so every rank has every piece. The FP32 layers then carry the FP32
// gradients only: their parameter views have the layers' sizes but no storage, and nothing reads them.

#include <cstddef>
#include <cstdint>
#include <cstring>
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
#include "hitch/optim/sharded.hpp"

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

    /// Keeps the FP32 masters of `pieces` only (at most one per layer); mixed precision only.
    void shard(D& dev, std::span<const optim::piece> pieces)
        requires mixed_precision
    {
        std::vector<device_buffer<float, D>> kept;
        for (const optim::piece& pc : pieces) {
            kept.emplace_back(dev, pc.size());
            std::memcpy(kept.back().data(), masters_[pc.layer].data() + pc.begin, pc.size() * sizeof(float));
        }
        masters_ = std::move(kept);
        pieces_.assign(pieces.begin(), pieces.end());
        piece_layers_.clear();
        for (const hitch::layer& l : layers_) piece_layers_.push_back(hitch::layer{l.name, {}, {}, l.flags, 0});
        for (std::size_t i = 0; i < pieces_.size(); ++i) {
            const optim::piece& pc = pieces_[i];
            const hitch::layer& l = layers_[pc.layer];
            piece_layers_[pc.layer].params = masters_[i].view();
            piece_layers_[pc.layer].grads = l.grads.subview(pc.begin, pc.size());
        }
        for (hitch::layer& l : layers_) l.params = tensor_view<float>(nullptr, l.grads.size());
        sharded_ = true;
    }
    [[nodiscard]] bool sharded() const noexcept { return sharded_; }

    /// The layers the optimizer steps and a checkpoint saves the FP32 parameters of: every layer, or, sharded, each
    /// layer's master piece with its part of the FP32 gradient (empty where this rank holds none).
    [[nodiscard]] std::span<const hitch::layer> optimizer_layers() const noexcept {
        return sharded_ ? std::span<const hitch::layer>(piece_layers_) : std::span<const hitch::layer>(layers_);
    }
    /// Sharded: the optimizer's pieces of optimizer_layers() (each whole; indexed by the model's layer).
    [[nodiscard]] std::vector<optim::piece> optimizer_pieces() const {
        std::vector<optim::piece> out;
        for (const optim::piece& pc : pieces_) out.push_back({pc.layer, 0, pc.size()});
        return out;
    }
    /// The model's own parameter views, by layer (what a sharded run all-gathers).
    [[nodiscard]] std::vector<tensor_view<Param>> model_parameters() const {
        std::vector<tensor_view<Param>> out;
        for (const user_layer& l : user_layers_) out.push_back(l.params);
        return out;
    }

    /// Bytes of FP32 master parameters held beside the model (0 for an FP32 model, stepped in place).
    [[nodiscard]] std::size_t master_bytes() const noexcept {
        std::size_t n = 0;
        for (const auto& m : masters_) n += m.size() * sizeof(float);
        return n;
    }

    /// Rounds the masters into the model's parameters; nothing to do for an FP32 model.
    void write_back() {
        if constexpr (mixed_precision) {
            if (sharded_) {
                for (std::size_t i = 0; i < pieces_.size(); ++i) {
                    const float* w = masters_[i].data();
                    Param* low = user_layers_[pieces_[i].layer].params.data() + pieces_[i].begin;
                    for (std::size_t e = 0; e < pieces_[i].size(); ++e) low[e] = Param(w[e]);
                }
                return;
            }
            for (std::size_t k = 0; k < user_layers_.size(); ++k) {
                const float* w = layers_[k].params.data();
                Param* low = user_layers_[k].params.data();
                for (std::size_t i = 0; i < layers_[k].size(); ++i) low[i] = Param(w[i]);
            }
        }
    }

    /// CRC32C of every parameter's bytes in layer order: the FP32 ones, then the model's own under mixed precision
    /// (sharded: the model's own only, the masters being this rank's alone).
    [[nodiscard]] std::uint64_t hash() const {
        crc32c crc;
        if (!sharded_)
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
    bool sharded_ = false;
    std::vector<optim::piece> pieces_;        // sharded: the pieces masters_ hold, in order
    std::vector<hitch::layer> piece_layers_;  // sharded: per layer, its piece of masters_ with its gradient
};

}  // namespace hitch::train::detail
