#pragma once
// The plain types of the alpha-beta-gamma cost model (Hockney 1994): the machine constants and a schedule's cost
// for one call. The estimates themselves live beside the schedules (hitch/allreduce/cost.hpp); these types sit in
// core so the schedule concept can name them without depending on any schedule.
//
// Two levels of network: alpha and beta are the constants inside a node (ranks of one machine), inter_alpha and
// inter_beta those between nodes (a message through the nic); 0 means "the same as inside", so constants of one
// level (every caller before the two-level model, and every saved state of it) keep their meaning. An estimate
// counts the terms of each level apart, and seconds() weighs each with its level's constants.

#include "hitch/core/options.hpp"
#include "hitch/core/tuning.hpp"

namespace hitch {

/// The machine constants of the model, in seconds and seconds per byte.
struct cost_constants {
    double alpha_s = tuning::default_alpha_s;                    ///< per-message latency (inside a node)
    double beta_s_per_byte = tuning::default_beta_s_per_byte;    ///< per byte moved between two ranks (1 / bandwidth)
    double gamma_s_per_byte = tuning::default_gamma_s_per_byte;  ///< per byte combined by a reduce op
    /// The communicator's own all-reduce (allreduce::native), fitted as native_alpha + n * native_beta.
    /// Negative when the communicator has none or it was not measured.
    double native_alpha_s = -1.0;
    double native_beta_s_per_byte = -1.0;
    /// Between nodes: the latency and per-byte time of a message that crosses from one node to another. 0: the
    /// same as inside a node (one level of network).
    double inter_alpha_s = 0.0;
    double inter_beta_s_per_byte = 0.0;

    void validate() const {
        option_validator("hitch::allreduce::cost_constants")
            .open_closed("alpha_s", alpha_s, 0.0, 100.0)
            .open_closed("beta_s_per_byte", beta_s_per_byte, 0.0, 1.0)
            .open_closed("gamma_s_per_byte", gamma_s_per_byte, 0.0, 1.0)
            .closed("inter_alpha_s", inter_alpha_s, 0.0, 100.0)
            .closed("inter_beta_s_per_byte", inter_beta_s_per_byte, 0.0, 1.0);
    }
    [[nodiscard]] bool has_native() const noexcept { return native_alpha_s >= 0.0 && native_beta_s_per_byte >= 0.0; }
    /// The latency and per-byte time between nodes (inside-node ones where not given).
    [[nodiscard]] double between_alpha_s() const noexcept { return inter_alpha_s > 0 ? inter_alpha_s : alpha_s; }
    [[nodiscard]] double between_beta_s_per_byte() const noexcept {
        return inter_beta_s_per_byte > 0 ? inter_beta_s_per_byte : beta_s_per_byte;
    }

    friend bool operator==(const cost_constants&, const cost_constants&) = default;
};

/// A schedule's cost for one call: coefficients of alpha, beta and gamma on the critical path (apart for messages
/// inside a node and messages between nodes), and what the busiest rank sends.
struct cost_estimate {
    double latency_terms = 0;          ///< multiplies alpha (sequential message rounds inside a node)
    double bandwidth_bytes = 0;        ///< multiplies beta
    double reduced_bytes = 0;          ///< multiplies gamma
    double sent_messages = 0;          ///< messages sent by the busiest rank
    double sent_bytes = 0;             ///< bytes sent by the busiest rank
    double inter_latency_terms = 0;    ///< multiplies the between-node alpha (rounds that cross nodes)
    double inter_bandwidth_bytes = 0;  ///< multiplies the between-node beta

    [[nodiscard]] double seconds(const cost_constants& k) const noexcept {
        return latency_terms * k.alpha_s + bandwidth_bytes * k.beta_s_per_byte + reduced_bytes * k.gamma_s_per_byte +
               inter_latency_terms * k.between_alpha_s() + inter_bandwidth_bytes * k.between_beta_s_per_byte();
    }
};

}  // namespace hitch
