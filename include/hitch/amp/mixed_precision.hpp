#pragma once
// amp::mixed_precision_optimizer<O, Low, C, D>: FP16 or BF16 model parameters with FP32 master weights
// (Micikevicius et al. 2018, "Mixed Precision Training"). The model computes in Low; the optimizer keeps an FP32
// copy of every parameter and steps that copy, then writes the rounded Low copy back:
//
//   g32 = float(g_low) * (1/S)                 unscale into FP32 (S the loss scale; 1 without scaling)
//   all ranks agree: any inf/NaN anywhere?     yes: skip (nothing changes), S backs off; no: go on
//   O.step(w32, g32, state, lr)                any optimizer, on the FP32 masters (LARS included: convert to
//                                              FP32, apply LARS, convert back, as the large-batch literature does)
//   w_low = Low(w32)                           round to nearest even
//
// Updates too small to change a Low value accumulate in the FP32 master instead of being lost, which is why the
// master copy exists. Without loss scaling (common for BF16, whose range is FP32's) a non-finite gradient follows
// the nonfinite policy instead: throw naming step, rank and layer, or skip on every rank.
//
// On a device the host cannot read (D = hitch::cuda::device), the Low layers and the FP32 masters live on that
// device, the constructors take it, and the conversions, the unscale and the inf/NaN check run there as fused
// launches over every layer (amp/device_amp.hpp; hitch/cuda/amp/mixed_precision.cuh), with the host loops' bits.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hitch/amp/device_amp.hpp"
#include "hitch/amp/loss_scaler.hpp"
#include "hitch/amp/nonfinite.hpp"
#include "hitch/concepts/optimizer.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/device/buffer.hpp"
#include "hitch/device/cpu.hpp"
#include "hitch/optim/model_optimizer.hpp"

namespace hitch::amp {

/// A model layer in low precision: parameters and gradient in Low (hitch::half or hitch::bfloat16).
template <floating_element Low>
struct low_precision_layer {
    std::string name;
    tensor_view<Low> params;
    tensor_view<Low> grads;
    hitch::layer_flags flags{};
    /// Matrix rows for low-rank gradient codecs (see hitch::layer::rows); 0: a vector.
    std::size_t rows = 0;
};

struct mixed_precision_options {
    /// Scale the loss (FP16 needs it; BF16 usually does not).
    bool loss_scaling = true;
    loss_scaler_options scaler{};
    /// Without loss scaling: what a non-finite gradient does.
    nonfinite_policy nonfinite = nonfinite_policy::throw_error;
    parallel_options execution{};

    void validate() const {
        scaler.validate();
        execution.validate();
    }
};

template <class O, floating_element Low, agreement_group C = single_process, class D = cpu>
    requires(!std::same_as<Low, float>)
class mixed_precision_optimizer {
    static_assert(check_optimizer<O, D>());

public:
    using optimizer_options = typename O::options_type;

    mixed_precision_optimizer(const optimizer_options& options, std::vector<low_precision_layer<Low>> layers, C& group,
                              const mixed_precision_options& mp = {})
        requires std::same_as<D, cpu>
        : mp_((mp.validate(), mp)),
          low_(std::move(layers)),
          masters_(make_masters(low_)),
          optimizer_(options, master_layers(), mp_.execution),
          scaler_(group, mp_.scaler),
          guard_(group, {.policy = mp_.nonfinite, .execution = mp_.execution}) {}

    mixed_precision_optimizer(const optimizer_options& options, std::vector<low_precision_layer<Low>> layers,
                              const mixed_precision_options& mp = {})
        requires std::same_as<C, single_process> && std::same_as<D, cpu>
        : mp_((mp.validate(), mp)),
          low_(std::move(layers)),
          masters_(make_masters(low_)),
          optimizer_(options, master_layers(), mp_.execution),
          scaler_(own_, mp_.scaler),
          guard_(own_, {.policy = mp_.nonfinite, .execution = mp_.execution}) {}

    /// On device `dev` (whose memory holds the Low layers): the FP32 masters and the optimizer state go there too.
    mixed_precision_optimizer(const optimizer_options& options, std::vector<low_precision_layer<Low>> layers, C& group,
                              D& dev, const mixed_precision_options& mp = {})
        requires(!host_device<D>)
        : mp_((mp.validate(), mp)),
          low_(std::move(layers)),
          masters_(make_device_masters(low_, dev)),
          optimizer_(options, master_layers(), dev, mp_.execution),
          scaler_(group, mp_.scaler),
          guard_(group, {.policy = mp_.nonfinite, .execution = mp_.execution}) {
        make_device_plan(dev);
    }
    mixed_precision_optimizer(const optimizer_options& options, std::vector<low_precision_layer<Low>> layers, D& dev,
                              const mixed_precision_options& mp = {})
        requires std::same_as<C, single_process> && (!host_device<D>)
        : mp_((mp.validate(), mp)),
          low_(std::move(layers)),
          masters_(make_device_masters(low_, dev)),
          optimizer_(options, master_layers(), dev, mp_.execution),
          scaler_(own_, mp_.scaler),
          guard_(own_, {.policy = mp_.nonfinite, .execution = mp_.execution}) {
        make_device_plan(dev);
    }

    mixed_precision_optimizer(const mixed_precision_optimizer&) = delete;
    mixed_precision_optimizer& operator=(const mixed_precision_optimizer&) = delete;

    /// The factor to multiply the loss by before the backward pass (1 without loss scaling).
    [[nodiscard]] float loss_scale() const noexcept { return mp_.loss_scaling ? scaler_.scale() : 1.0f; }

    /// One training step after the backward pass (and any gradient all-reduce). Collective when C is a
    /// communicator. Returns whether the step was applied; a skipped step leaves the Low parameters, the FP32
    /// masters and the optimizer state bitwise unchanged.
    bool step(float lr, std::uint64_t step_index) {
        if constexpr (host_device<D>)
            return host_step(lr, step_index);
        else
            return device_step(lr, step_index);
    }

    [[nodiscard]] std::size_t size() const noexcept { return low_.size(); }
    /// Layer k's FP32 master weights.
    [[nodiscard]] tensor_view<float> master(std::size_t k) const { return masters_.at(k).params.view(); }
    /// Layer k's unscaled FP32 gradient of the last step.
    [[nodiscard]] tensor_view<float> master_gradient(std::size_t k) const { return masters_.at(k).grads.view(); }
    [[nodiscard]] const optim::model_optimizer<O, D>& inner() const noexcept { return optimizer_; }
    [[nodiscard]] const loss_scaler<C>& scaler() const noexcept { return scaler_; }
    [[nodiscard]] loss_scaler<C>& scaler() noexcept { return scaler_; }
    [[nodiscard]] std::uint64_t skipped_steps() const noexcept {
        return mp_.loss_scaling ? scaler_.state().skipped_steps : guard_.skipped();
    }

    /// Saves the optimizer state (hitch/optim/state_io.hpp). The FP32 masters are the model's true parameters:
    /// checkpoint them with master(k).
    void save(std::ostream& out) const { optimizer_.save(out); }
    void load(std::istream& in) { optimizer_.load(in); }

private:
    struct master_copy {
        device_buffer<float, D> params, grads;
    };

    /// step() on the host.
    bool host_step(float lr, std::uint64_t step_index) {
        bool overflow = false;
        for (std::size_t k = 0; k < low_.size(); ++k) {
            const tensor_view<const Low> g = low_[k].grads.as_const();
            if (mp_.loss_scaling) {
                overflow |= scaler_.unscale(g, masters_[k].grads.view());
            } else {
                float* out = masters_[k].grads.data();
                parallel_for(
                    g.size(),
                    [&](std::size_t b, std::size_t e) {
                        for (std::size_t i = b; i < e; ++i) out[i] = static_cast<float>(g[i]);
                    },
                    mp_.execution);
            }
        }
        if (mp_.loss_scaling) {
            if (!scaler_.update(overflow)) return false;
        } else if (!guard_.check(optimizer_.layers(), step_index)) {
            return false;
        }
        optimizer_.step(lr);
        for (std::size_t k = 0; k < low_.size(); ++k) {
            const float* w = masters_[k].params.data();
            Low* out = low_[k].params.data();
            parallel_for(
                low_[k].params.size(),
                [&](std::size_t b, std::size_t e) {
                    for (std::size_t i = b; i < e; ++i) out[i] = Low(w[i]);
                },
                mp_.execution);
        }
        return true;
    }

    /// step() on a device: one fused launch per conversion, one flag (or report) back to the host.
    bool device_step(float lr, std::uint64_t step_index) {
        if (mp_.loss_scaling) {
            const bool overflow = device_ops_.unscale(scaler_.inverse_scale());
            if (!scaler_.update(overflow)) return false;
        } else {
            device_ops_.widen_grads();
            if (!guard_.check_found(device_ops_.first_nonfinite(), optimizer_.layers(), step_index)) return false;
        }
        optimizer_.step(lr);
        device_ops_.narrow();
        return true;
    }

    static std::vector<master_copy> make_device_masters(const std::vector<low_precision_layer<Low>>& layers, D& dev) {
        std::vector<master_copy> out;
        out.reserve(layers.size());
        for (const auto& l : layers) {
            if (l.params.size() != l.grads.size())
                throw config_error(hitch::detail::concat("hitch::amp::mixed_precision_optimizer: layer '", l.name,
                                                         "' has ", l.params.size(), " parameters but ", l.grads.size(),
                                                         " gradient elements"));
            if (l.params.space() != D::space || l.grads.space() != D::space)
                throw config_error(hitch::detail::concat("hitch::amp::mixed_precision_optimizer: layer '", l.name,
                                                         "' must be in ", name(D::space), " memory"));
            out.push_back(
                {device_buffer<float, D>(dev, l.params.size()), device_buffer<float, D>(dev, l.params.size())});
        }
        return out;
    }
    void make_device_plan(D& dev) {
        std::vector<tensor_view<Low>> low_params, low_grads;
        std::vector<tensor_view<float>> master_params, master_grads;
        for (std::size_t k = 0; k < low_.size(); ++k) {
            low_params.push_back(low_[k].params);
            low_grads.push_back(low_[k].grads);
            master_params.push_back(masters_[k].params.view());
            master_grads.push_back(masters_[k].grads.view());
        }
        device_ops_ = detail::amp_plan_t<D, Low>(
            dev, std::span<const tensor_view<Low>>(low_params), std::span<const tensor_view<Low>>(low_grads),
            std::span<const tensor_view<float>>(master_params), std::span<const tensor_view<float>>(master_grads));
        device_ops_.widen_params();
    }

    static std::vector<master_copy> make_masters(const std::vector<low_precision_layer<Low>>& layers) {
        std::vector<master_copy> out;
        out.reserve(layers.size());
        for (const auto& l : layers) {
            if (l.params.size() != l.grads.size())
                throw config_error(hitch::detail::concat("hitch::amp::mixed_precision_optimizer: layer '", l.name,
                                                         "' has ", l.params.size(), " parameters but ", l.grads.size(),
                                                         " gradient elements"));
            if (!l.params.on_host() || !l.grads.on_host())
                throw config_error(hitch::detail::concat("hitch::amp::mixed_precision_optimizer: layer '", l.name,
                                                         "' must be in host memory"));
            master_copy m{device_buffer<float, D>(optim::detail::default_cpu(), l.params.size()),
                          device_buffer<float, D>(optim::detail::default_cpu(), l.params.size())};
            for (std::size_t i = 0; i < l.params.size(); ++i) m.params.data()[i] = static_cast<float>(l.params[i]);
            out.push_back(std::move(m));
        }
        return out;
    }
    std::vector<hitch::layer> master_layers() const {
        std::vector<hitch::layer> out;
        for (std::size_t k = 0; k < low_.size(); ++k)
            out.push_back({low_[k].name, masters_[k].params.view(), masters_[k].grads.view(), low_[k].flags});
        return out;
    }

    single_process own_{};
    mixed_precision_options mp_;
    std::vector<low_precision_layer<Low>> low_;
    std::vector<master_copy> masters_;
    optim::model_optimizer<O, D> optimizer_;
    loss_scaler<C> scaler_;
    gradient_guard<C> guard_;
    [[no_unique_address]] detail::amp_plan_t<D, Low> device_ops_{};
};

}  // namespace hitch::amp
