#pragma once
// Checks every optimizer runs before it touches a layer, so a mistake is a clear config_error and nothing moves.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"

namespace hitch::optim::detail {

using hitch::detail::concat;

/// The layer's views agree with each other and live in `space` (the host unless a device step says otherwise),
/// every state buffer has the layer's size, and the learning rate is finite and not negative.
inline void check_step(std::string_view who, const layer& l, std::initializer_list<std::size_t> state_sizes, float lr,
                       memory_space space = memory_space::host) {
    check_layer(l, space, who);
    std::size_t k = 0;
    for (std::size_t s : state_sizes) {
        if (s != l.size())
            throw config_error(concat(who, ": state buffer ", k, " of layer '", l.name, "' has ", s,
                                      " elements but the layer has ", l.size(),
                                      " (was the state made for another layer?)"));
        ++k;
    }
    if (!(lr >= 0.0f) || !std::isfinite(lr))
        throw config_error(
            concat(who, ": learning rate ", lr, " for layer '", l.name, "' is outside the allowed range [0, inf)"));
}

/// x^t in double, for bias corrections (t counts from 1).
[[nodiscard]] inline double power(double x, std::uint64_t t) noexcept { return std::pow(x, static_cast<double>(t)); }

}  // namespace hitch::optim::detail
