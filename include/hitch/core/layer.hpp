#pragma once
// hitch::layer: a model, as hitch's optimizers see it, is a list of layers, each a parameter view, a gradient view,
// a name and per-layer flags. The views carry their memory space, so the same type serves host and device
// optimizers. The optimizers update one layer at a time, so the same optimizer serves a whole model on one rank
// (optim::model_optimizer) and the parameter-server shards that each hold some whole layers.

#include <cstddef>
#include <string>
#include <string_view>

#include "hitch/core/error.hpp"
#include "hitch/core/tensor.hpp"

namespace hitch {

/// Per-layer choices. Biases and normalisation parameters (batch-norm gamma and beta) are usually excluded from
/// both LARS/LAMB adaptation and weight decay (Goyal et al. 2017, You et al. 2017); layer_flags::bias_or_norm()
/// sets both.
struct layer_flags {
    /// LARS/LAMB use a trust ratio of 1 for this layer (a plain step of the base rule).
    bool exclude_from_adaptation = false;
    /// No weight decay (L2 or decoupled) for this layer.
    bool exclude_from_weight_decay = false;

    [[nodiscard]] static constexpr layer_flags bias_or_norm() noexcept { return {true, true}; }
    friend constexpr bool operator==(const layer_flags&, const layer_flags&) = default;
};

/// One trainable tensor: its parameters (updated in place), its gradient (read by the optimizers; the loss
/// scaler unscales it in place), its name (used in error messages) and its flags.
struct layer {
    std::string name;
    tensor_view<float> params;
    tensor_view<float> grads;
    layer_flags flags{};
    /// The layer as a matrix for low-rank gradient codecs (PowerSGD): rows x size() / rows, row-major (a dense
    /// layer's weight: outputs x inputs; a convolution's: output channels x the rest). 0: a vector.
    std::size_t rows = 0;

    [[nodiscard]] std::size_t size() const noexcept { return params.size(); }
};

/// Throws config_error unless the layer's views agree in size and live in `space`.
inline void check_layer(const layer& l, memory_space space, std::string_view who) {
    if (l.params.size() != l.grads.size())
        throw config_error(detail::concat(who, ": layer '", l.name, "' has ", l.params.size(), " parameters but ",
                                          l.grads.size(), " gradient elements"));
    if (l.params.space() != space || l.grads.space() != space)
        throw config_error(detail::concat(who, ": layer '", l.name, "' is in ", name(l.params.space()), "/",
                                          name(l.grads.space()), " memory; this optimizer state is in ", name(space),
                                          " memory"));
}

}  // namespace hitch
