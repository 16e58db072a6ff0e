#pragma once
// hitch::allreduce::automatic_profile: the measured times of automatic's candidates at the probe sizes, and how a
// prediction is corrected by them (the measured-to-modelled ratio, interpolated in log(n) between probes).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/tuning.hpp"

namespace hitch::allreduce {

/// Measured times of the candidates at the probe sizes: how far each schedule's model is off on this
/// communicator. Agreed by all ranks (the maximum over ranks of every time), so the same on every rank.
struct automatic_profile {
    static constexpr int probes = tuning::probes;              // 4 KiB, 16 KiB, ... 64 MiB
    static constexpr int first_probes = tuning::first_probes;  // measured by the first call: up to 16 MiB
    static constexpr int candidates = 8;  // recursive_doubling, ring, rabenseifner, binary_tree, double_binary_tree,
                                          // parameter_server, hierarchical (by node), native
    std::array<double, probes> bytes{};
    std::array<std::array<double, probes>, candidates> seconds{};  // 0: not measured (native unavailable)
    std::int32_t measured = 0;                                     // probes measured: bytes[0, measured)
    /// 1 when the calibration budget ended the probes early: the model is held beyond the last measured probe
    /// and no later call measures more. (An int, not a bool: the struct has no padding, so ranks compare bytes.)
    std::int32_t stopped_by_budget = 0;

    [[nodiscard]] static constexpr std::size_t probe_bytes(int i) noexcept {
        return tuning::probe_first_bytes << (tuning::probe_growth_log2 * i);
    }
    /// True when a call of n_bytes should first time the candidates at larger probes.
    [[nodiscard]] bool outgrown_by(std::size_t n_bytes) const noexcept {
        return stopped_by_budget == 0 && measured > 0 &&
               measured<probes&& static_cast<double>(n_bytes)> bytes[static_cast<std::size_t>(measured - 1)];
    }
    /// The probes a call of n_bytes needs measured: up to the first probe at least as large (at most all).
    [[nodiscard]] int probes_for(std::size_t n_bytes) const noexcept {
        int upto = std::max<int>(measured, 1);
        while (upto < probes && probe_bytes(upto - 1) < n_bytes) ++upto;
        return upto;
    }
};
static_assert(std::is_trivially_copyable_v<automatic_profile> &&
                  sizeof(automatic_profile) ==
                      sizeof(double) * automatic_profile::probes * (1 + automatic_profile::candidates) + 8,
              "automatic_profile is compared and sent as bytes: it must have no padding");

namespace detail {

/// Measured over modelled time for candidate `c` at n bytes, `model(bytes)` being its modelled seconds:
/// interpolated in log(n) between the two probes around n, held constant beyond the first and last probe. 1 when
/// the candidate was not measured.
template <class Model>
[[nodiscard]] double measured_ratio(const automatic_profile& prof, int c, std::size_t n, Model&& model) {
    const auto& times = prof.seconds[static_cast<std::size_t>(c)];
    const auto ratio_at = [&](std::size_t i) {
        const double modelled = model(static_cast<std::size_t>(prof.bytes[i]));
        return modelled > 0 && times[i] > 0 ? times[i] / modelled : 1.0;
    };
    const double x = static_cast<double>(std::max<std::size_t>(n, 1));
    const std::size_t last = static_cast<std::size_t>(std::max<int>(prof.measured, 1)) - 1;
    if (x <= prof.bytes[0]) return ratio_at(0);
    if (x >= prof.bytes[last]) return ratio_at(last);
    std::size_t i = 0;
    while (prof.bytes[i + 1] < x) ++i;
    const double w = std::log(x / prof.bytes[i]) / std::log(prof.bytes[i + 1] / prof.bytes[i]);
    return std::exp((1 - w) * std::log(ratio_at(i)) + w * std::log(ratio_at(i + 1)));
}

}  // namespace detail
}  // namespace hitch::allreduce
