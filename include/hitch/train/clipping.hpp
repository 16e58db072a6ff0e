#pragma once
// Gradient clipping by the global norm (Pascanu et al. 2013; torch.nn.utils.clip_grad_norm_): the L2 norm of every
// layer's gradient taken together, and, when it exceeds max_norm, every gradient scaled by
//   coefficient = max_norm / (norm + 1e-6)
// (the 1e-6 as torch has it, so a norm just above the bound leaves it just below). Each layer's sum of squares is
// taken in double in the fixed order of hitch/optim/detail/norm.hpp and the layers' sums are added in layer order, so
// ranks holding the same gradients get the same norm bit for bit, on any number of threads, and need not talk.

#include <cmath>
#include <cstddef>
#include <span>

#include "hitch/core/layer.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/optim/detail/norm.hpp"

namespace hitch::train::detail {

/// Sum of the squares of every gradient of `layers`.
[[nodiscard]] inline double gradient_sum_of_squares(std::span<const hitch::layer> layers,
                                                    const parallel_options& exec) {
    double total = 0.0;
    for (const hitch::layer& l : layers) total += optim::detail::sum_of_squares(l.grads.data(), l.size(), exec);
    return total;
}

/// Scales every gradient of `layers` so the global norm, from `sum_of_squares`, is at most max_norm; returns the
/// norm before clipping. A non-finite norm clips nothing: the caller's non-finite checks decide.
inline double clip_to_norm(std::span<const hitch::layer> layers, double sum_of_squares, double max_norm,
                           const parallel_options& exec) {
    const double norm = std::sqrt(sum_of_squares);
    if (!std::isfinite(norm) || !(norm > max_norm)) return norm;
    const float coefficient = static_cast<float>(max_norm / (norm + 1e-6));
    for (const hitch::layer& l : layers) {
        float* g = l.grads.data();
        parallel_for(
            l.size(),
            [&](std::size_t b, std::size_t e) {
                for (std::size_t i = b; i < e; ++i) g[i] *= coefficient;
            },
            exec);
    }
    return norm;
}

}  // namespace hitch::train::detail
