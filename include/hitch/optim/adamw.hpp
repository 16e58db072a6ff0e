#pragma once
// AdamW: Adam with decoupled weight decay (Loshchilov and Hutter 2019, "Decoupled Weight Decay Regularization").
// The decay shrinks the weights by lr * wd each step instead of entering the gradient, so it is not rescaled by
// Adam's per-element denominator. The update rule and its float operation order are in hitch/optim/adam.hpp.

#include "hitch/concepts/optimizer.hpp"
#include "hitch/optim/adam.hpp"

namespace hitch::optim {

/// Adam with decoupled weight decay (default wd = 0.01, as torch.optim.AdamW).
using adamw = basic_adam<decoupled_weight_decay>;

static_assert(optimizer<adamw>, "hitch::optim::adamw must model hitch::optimizer");

}  // namespace hitch::optim
