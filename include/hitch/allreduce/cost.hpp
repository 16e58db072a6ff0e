#pragma once
// The alpha-beta-gamma cost model (Hockney 1994; as used by Thakur, Rabenseifner & Gropp 2005): sending a message
// of m bytes costs alpha + m * beta, combining m bytes costs m * gamma. A schedule's cost for p ranks and n bytes is
//
//     T(p, n) = latency_terms * alpha + bandwidth_bytes * beta + reduced_bytes * gamma
//
// where the three coefficients are counted along the critical path. Each schedule also states what the busiest
// rank sends (messages and bytes), which tests check against an instrumented communicator.

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "hitch/allreduce/tuning.hpp"
#include "hitch/core/cost.hpp"
#include "hitch/core/options.hpp"

namespace hitch::allreduce {

using hitch::cost_constants;
using hitch::cost_estimate;

/// The communicator's own all-reduce as measured (cost_constants::native_*), in alpha and beta units so that
/// seconds(k) reproduces native_alpha + n * native_beta.
/// The library's algorithm is not known, so the bytes sent are the least any all-reduce of n bytes over p ranks
/// must send, 2(p-1)/p n (what MPICH's Rabenseifner and ring send; its recursive doubling sends more).
[[nodiscard]] inline cost_estimate native_cost(int p, std::size_t n_bytes, const cost_constants& k) noexcept {
    cost_estimate c;
    if (p > 1) c.sent_bytes = 2.0 * (p - 1) / p * static_cast<double>(n_bytes);
    if (!k.has_native() || k.alpha_s <= 0 || k.beta_s_per_byte <= 0) return c;
    c.latency_terms = k.native_alpha_s / k.alpha_s;
    c.bandwidth_bytes = static_cast<double>(n_bytes) * k.native_beta_s_per_byte / k.beta_s_per_byte;
    return c;
}

namespace detail {

using hitch::detail::concat;

/// floor(log2(p)) for p >= 1.
[[nodiscard]] constexpr int floor_log2(int p) noexcept {
    int l = 0;
    while ((2 << l) <= p) ++l;
    return l;
}
/// The largest power of two <= p (p >= 1).
[[nodiscard]] constexpr int floor_pow2(int p) noexcept { return 1 << floor_log2(p); }
/// ceil(log2(p)) for p >= 1.
[[nodiscard]] constexpr int ceil_log2(int p) noexcept { return floor_pow2(p) == p ? floor_log2(p) : floor_log2(p) + 1; }

/// Number of segments of at most `segment` bytes that `bytes` is cut into (0 for 0 bytes).
[[nodiscard]] constexpr double segments(double bytes, double segment) noexcept {
    if (bytes <= 0) return 0;
    return std::ceil(bytes / segment);
}

}  // namespace detail
}  // namespace hitch::allreduce
