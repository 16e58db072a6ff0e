#pragma once
// Measuring the alpha-beta-gamma constants of a communicator for automatic: a ping-pong for alpha, a 1 MiB
// exchange for beta, a 1 MiB combine for gamma, and two native all-reduces where the communicator has one.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>

#include "hitch/allreduce/automatic/agreement.hpp"
#include "hitch/allreduce/automatic/native_candidate.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/allreduce/tuning.hpp"

namespace hitch::allreduce::detail {

/// The channel of calibration's own messages (apart from every schedule's).
inline constexpr int calibration_channel = 60;

/// Measures the constants (collective over t's communicator); the result is the same on every rank.
template <communicator C>
[[nodiscard]] cost_constants measure_constants(transport<C>& t) {
    using clock = std::chrono::steady_clock;
    const int p = t.size(), me = t.rank();
    cost_constants k;
    if (p <= 1) return k;
    const int partner = (me ^ 1) < p ? (me ^ 1) : -1;
    // Timed on the communicator's clock: virtual time on a simulated cluster.
    const auto seconds_since = [&t](clock::time_point a) {
        return std::chrono::duration<double>(now_on(t.comm()) - a).count();
    };

    // alpha: half the round trip of a tiny message between partners (best of a few runs).
    double alpha = 1.0;
    float token = 0.0f;
    const std::span<const float> out(&token, 1);
    const std::span<float> in(&token, 1);
    if (partner >= 0) {
        for (int attempt = 0; attempt < tuning::constant_attempts; ++attempt) {
            const auto start = now_on(t.comm());
            for (int i = 0; i < tuning::alpha_round_trips; ++i) {
                if (me < partner) {
                    t.template send<float>(partner, calibration_channel, out).wait(t.limit());
                    t.template receive_into<float>(partner, calibration_channel, in).wait(t.limit());
                } else {
                    t.template receive_into<float>(partner, calibration_channel, in).wait(t.limit());
                    t.template send<float>(partner, calibration_channel, out).wait(t.limit());
                }
            }
            alpha = std::min(alpha, seconds_since(start) / (2.0 * tuning::alpha_round_trips));
        }
    }
    // beta: an exchange between partners; gamma: combining as many bytes of floats.
    constexpr std::size_t bytes = tuning::constant_probe_bytes;
    const std::size_t count = bytes / sizeof(float);
    std::span<float> a = t.template scratch<float>(count);
    std::span<float> b = t.template scratch<float>(count);
    std::fill(a.begin(), a.end(), 1.0f);
    std::fill(b.begin(), b.end(), 2.0f);
    double beta = 1.0;
    if (partner >= 0) {
        for (int attempt = 0; attempt < tuning::constant_attempts; ++attempt) {
            const auto start = now_on(t.comm());
            t.exchange_copy(partner, std::span<const float>(a), partner, b, count, calibration_channel + 1);
            beta = std::min(beta, std::max(seconds_since(start) - alpha, 1e-12) / static_cast<double>(bytes));
        }
    }
    double gamma = 1.0;
    for (int attempt = 0; attempt < tuning::constant_attempts; ++attempt) {
        const auto start = now_on(t.comm());
        combine(a.data(), a.data(), b.data(), count, reduce_op::sum);
        gamma = std::min(gamma, std::max(seconds_since(start), 1e-12) / static_cast<double>(bytes));
    }
    if (partner < 0) alpha = beta = 0.0;  // the odd rank out: the maximum over ranks decides
    k.alpha_s = alpha;
    k.beta_s_per_byte = beta;
    k.gamma_s_per_byte = gamma;
    if constexpr (has_native_allreduce<C>::value) {
        const auto time_native = [&](std::size_t n) {
            double best = 1.0;
            for (int attempt = 0; attempt < tuning::constant_attempts; ++attempt) {
                const auto start = now_on(t.comm());
                typename native_for<C>::type{}.run(t, a.subspan(0, n), reduce_op::sum);
                best = std::min(best, seconds_since(start));
            }
            return best;
        };
        const double small = time_native(1);
        const double large = time_native(count);
        k.native_alpha_s = small;
        k.native_beta_s_per_byte = std::max(large - small, 1e-12) / static_cast<double>(bytes);
    }
    k = agree_constants(t.comm(), k);
    k.alpha_s = std::max(k.alpha_s, tuning::min_alpha_s);
    k.beta_s_per_byte = std::max(k.beta_s_per_byte, tuning::min_beta_s_per_byte);
    k.gamma_s_per_byte = std::max(k.gamma_s_per_byte, tuning::min_gamma_s_per_byte);
    return k;
}

}  // namespace hitch::allreduce::detail
