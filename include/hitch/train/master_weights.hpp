#pragma once
// The FP32 layers data_parallel steps. An FP32 model is stepped in place; an FP16 or BF16 model gets FP32 master
// weights and gradients beside it, and the rounded masters are written back to the model after every change
// (Micikevicius et al. 2018, "Mixed Precision Training").
//
// On a device the host cannot read (a GPU) the masters live in its memory, and the widening at construction and the
// write-back run there, by the device's mixed-precision kernels (amp::device_amp<D>, queued on the device's stream)
// with the host loops' bits; hash() copies the parameters to the host.
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

#include "hitch/amp/device_amp.hpp"
#include "hitch/amp/mixed_precision.hpp"
#include "hitch/concepts/device.hpp"
#include "hitch/core/crc32c.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/device/buffer.hpp"
#include "hitch/optim/sharded.hpp"

namespace hitch::train::detail {

/// The mixed-precision kernels master_weights keeps: none for an FP32 model or a host device.
template <class D, class Param, bool Mixed>
struct master_plan {
    using type = amp::detail::no_amp_plan;
};
template <class D, class Param>
struct master_plan<D, Param, true> {
    using type = amp::detail::amp_plan_t<D, Param>;
};

template <floating_element Param, device D>
class master_weights {
public:
    static constexpr bool mixed_precision = !std::is_same_v<Param, float>;
    /// The layers the model hands over: hitch::layer, or amp::low_precision_layer for FP16 and BF16.
    using user_layer = std::conditional_t<mixed_precision, amp::low_precision_layer<Param>, hitch::layer>;

    master_weights(D& dev, std::vector<user_layer> layers) : device_(&dev), user_layers_(std::move(layers)) {
        if constexpr (mixed_precision) {
            for (const user_layer& l : user_layers_) {
                masters_.emplace_back(dev, l.params.size());
                grads32_.emplace_back(dev, l.params.size());
                if constexpr (host_device<D>) {
                    float* w = masters_.back().data();
                    for (std::size_t i = 0; i < l.params.size(); ++i) w[i] = static_cast<float>(l.params[i]);
                }
                layers_.push_back(
                    hitch::layer{l.name, masters_.back().view(), grads32_.back().view(), l.flags, l.rows});
            }
            if constexpr (!host_device<D>) {
                std::vector<tensor_view<Param>> low_w, low_g;
                std::vector<tensor_view<float>> w, g;
                for (std::size_t k = 0; k < user_layers_.size(); ++k) {
                    low_w.push_back(user_layers_[k].params);
                    low_g.push_back(user_layers_[k].grads);
                    w.push_back(layers_[k].params);
                    g.push_back(layers_[k].grads);
                }
                plan_ = plan_type(dev, std::span<const tensor_view<Param>>(low_w),
                                  std::span<const tensor_view<Param>>(low_g), std::span<const tensor_view<float>>(w),
                                  std::span<const tensor_view<float>>(g));
                plan_.widen_params();
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
        requires(mixed_precision && host_device<D>)
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

    /// Rounds the masters into the model's parameters; nothing to do for an FP32 model. On a device the host cannot
    /// read, queued on the device's stream.
    void write_back() {
        if constexpr (mixed_precision && !host_device<D>) {
            plan_.narrow();
        } else if constexpr (mixed_precision) {
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
            for (const hitch::layer& l : layers_) crc.update(std::as_bytes(host_copy(l.params)));
        if constexpr (mixed_precision)
            for (const user_layer& l : user_layers_) crc.update(std::as_bytes(host_copy(l.params)));
        return crc.value();
    }

    /// The device the layers live on.
    [[nodiscard]] D& device() const noexcept { return *device_; }

private:
    /// The values of `v` as the host reads them: the view itself on a host device, else a copy (waits for the
    /// device's stream).
    template <class T>
    [[nodiscard]] std::span<const T> host_copy(const tensor_view<T>& v) const {
        if constexpr (host_device<D>) {
            return std::span<const T>(v.data(), v.size());
        } else {
            auto& scratch = scratch_bytes_;
            scratch.resize(v.size() * sizeof(T));
            if (v.size() != 0) device_->copy_to_host(scratch.data(), v.data(), v.size() * sizeof(T));
            return std::span<const T>(reinterpret_cast<const T*>(scratch.data()), v.size());
        }
    }

    using plan_type = typename master_plan<D, Param, mixed_precision>::type;

    D* device_;
    std::vector<user_layer> user_layers_;
    std::vector<device_buffer<float, D>> masters_;
    std::vector<device_buffer<float, D>> grads32_;
    std::vector<hitch::layer> layers_;
    bool sharded_ = false;
    std::vector<optim::piece> pieces_;              // sharded: the pieces masters_ hold, in order
    std::vector<hitch::layer> piece_layers_;        // sharded: per layer, its piece of masters_ with its gradient
    [[no_unique_address]] plan_type plan_{};        // a device's mixed-precision kernels over every layer
    mutable std::vector<std::byte> scratch_bytes_;  // hash(): a layer's values copied from a device
};

}  // namespace hitch::train::detail
