#pragma once
// The linear scaling rule (Goyal et al. 2017, section 2.1; Krizhevsky 2014): when the minibatch size is
// multiplied by k, multiply the learning rate by k.
//
//   eta = eta_base * B / B_base
//
// It holds up to about 8k images for ResNet-50 on ImageNet with warm-up (lr::warmup); beyond that, LARS
// (optim::lars) keeps training stable.

#include <cstdint>

#include "hitch/core/options.hpp"

namespace hitch::lr {

/// eta_base * batch / base_batch; config_error for a non-positive rate or batch.
[[nodiscard]] inline double linear_scaling(double base_lr, std::uint64_t batch, std::uint64_t base_batch) {
    option_validator("hitch::lr::linear_scaling")
        .positive("base_lr", base_lr)
        .at_least("batch", batch, std::uint64_t{1})
        .at_least("base_batch", base_batch, std::uint64_t{1});
    return base_lr * static_cast<double>(batch) / static_cast<double>(base_batch);
}

}  // namespace hitch::lr
