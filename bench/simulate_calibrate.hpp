#pragma once
// hitch-simulate --compare-local: how well the simulator predicts a real run on this machine. For each buffer size
// n it measures the alpha-beta-gamma constants of comm::local's message path (threads of this process,
// call_options::shared_memory off, as between machines) the way automatic's calibration does
// (allreduce/automatic/constants.hpp: a ping-pong of one float for alpha, an exchange both ways at once for beta, a
// combine for gamma), with the probes at the call's own largest message (n/2) rather than automatic's fixed 1 MiB,
// so the caches they run in are those of the call. It then times the schedule on comm::local and predicts it on a
// single switch with those constants: the network alone (gamma 0), and with the combines charged
// (simulated_options::combine_s_per_byte = gamma). Both are back-to-back calls, timed per call, so the start of one
// call is not a barrier's wake-up but the end of the previous one, in both.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/simulated.hpp"

namespace hitch_bench {

namespace calibrate_detail {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// The median of `v` (taken by value: sorted here).
inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/// Calls timed back to back: enough that a run of them lasts a few milliseconds at every size.
inline int calls_for(std::size_t bytes) {
    return static_cast<int>(std::clamp<std::size_t>((std::size_t{64} << 20) / std::max<std::size_t>(bytes, 1), 4, 256));
}

}  // namespace calibrate_detail

/// alpha, beta and gamma of comm::local's message path between two threads, with `probe_bytes` messages: alpha is
/// half a round trip of one float (8 round trips, best of 5), beta an exchange of probe_bytes each way at once less
/// alpha, per byte (best of 5), gamma a combine of probe_bytes of floats into others, per byte (best of 5): the
/// measurements of automatic's calibration.
inline hitch::cost_constants measure_local_constants(std::size_t probe_bytes) {
    using calibrate_detail::seconds_since;
    constexpr int attempts = 5, round_trips = 8;
    const std::size_t count = std::max<std::size_t>(probe_bytes / sizeof(float), 1);
    const auto per_rank = hitch::comm::run_local(2, [&](hitch::comm::local& comm) {
        const int peer = 1 - comm.rank();
        float token = 0.0f;
        double alpha = 1.0;
        for (int a = 0; a < attempts; ++a) {
            comm.barrier();
            const auto start = std::chrono::steady_clock::now();
            for (int i = 0; i < round_trips; ++i) {
                if (comm.rank() == 0) {
                    comm.send(std::span<const float>(&token, 1), peer, 1);
                    comm.recv(std::span<float>(&token, 1), peer, 1);
                } else {
                    comm.recv(std::span<float>(&token, 1), peer, 1);
                    comm.send(std::span<const float>(&token, 1), peer, 1);
                }
            }
            alpha = std::min(alpha, seconds_since(start) / (2.0 * round_trips));
        }
        std::vector<float> out(count, 1.0f), in(count, 2.0f);
        double beta = 1.0;
        for (int a = 0; a < attempts + 1; ++a) {  // the first touches the buffers
            comm.barrier();
            const auto start = std::chrono::steady_clock::now();
            auto sent = comm.isend(std::span<const float>(out), peer, 2);
            auto got = comm.irecv(std::span<float>(in), peer, 2);
            got.wait();
            sent.wait();
            if (a > 0)
                beta =
                    std::min(beta, std::max(seconds_since(start) - alpha, 1e-12) / (4.0 * static_cast<double>(count)));
        }
        double gamma = 1.0;
        for (int a = 0; a < attempts; ++a) {
            const auto start = std::chrono::steady_clock::now();
            hitch::allreduce::combine(in.data(), in.data(), out.data(), count, hitch::allreduce::reduce_op::sum);
            gamma = std::min(gamma, std::max(seconds_since(start), 1e-12) / (4.0 * static_cast<double>(count)));
        }
        return hitch::cost_constants{alpha, beta, gamma};
    });
    // The slower of the two, as automatic's agreement takes the maximum.
    hitch::cost_constants k{0.0, 0.0, 0.0};
    for (const auto& r : per_rank) {
        k.alpha_s = std::max(k.alpha_s, r.alpha_s);
        k.beta_s_per_byte = std::max(k.beta_s_per_byte, r.beta_s_per_byte);
        k.gamma_s_per_byte = std::max(k.gamma_s_per_byte, r.gamma_s_per_byte);
    }
    return k;
}

/// Seconds one call of `schedule` over n bytes takes on p threads of comm::local (the message path): each of 7
/// rounds times calls_for(n) calls back to back after a barrier; a round's time per call is its slowest rank's;
/// the median round.
template <class Schedule>
double time_local(const Schedule& schedule, int p, std::size_t bytes) {
    namespace ar = hitch::allreduce;
    const std::size_t count = bytes / sizeof(float);
    const int calls = calibrate_detail::calls_for(bytes);
    constexpr int rounds = 7;
    ar::call_options o;
    o.check = false;
    o.shared_memory = false;  // messages, as between machines
    const auto per_rank = hitch::comm::run_local(p, [&](hitch::comm::local& comm) {
        ar::group g(comm);
        std::vector<float> data(count, 1.0f);
        ar::allreduce(g, hitch::view(data), ar::reduce_op::sum, schedule, o);  // warm-up: buffers and scratch
        std::vector<double> per_call;
        for (int r = 0; r < rounds; ++r) {
            comm.barrier();
            const auto start = std::chrono::steady_clock::now();
            for (int c = 0; c < calls; ++c) ar::allreduce(g, hitch::view(data), ar::reduce_op::sum, schedule, o);
            per_call.push_back(calibrate_detail::seconds_since(start) / calls);
        }
        return per_call;
    });
    std::vector<double> slowest(rounds, 0.0);
    for (const auto& mine : per_rank)
        for (std::size_t r = 0; r < slowest.size(); ++r) slowest[r] = std::max(slowest[r], mine[r]);
    return calibrate_detail::median(slowest);
}

/// Virtual seconds per call of the same back-to-back calls on a single switch of `k`'s alpha and beta, combines
/// charged at `gamma_s_per_byte` (0: not at all). Exact and repeatable.
template <class Schedule>
double time_simulated(const Schedule& schedule, int p, std::size_t bytes, const hitch::cost_constants& k,
                      double gamma_s_per_byte) {
    namespace ar = hitch::allreduce;
    const std::size_t count = bytes / sizeof(float);
    const int calls = calibrate_detail::calls_for(bytes);
    hitch::comm::simulated_options options;
    options.combine_s_per_byte = gamma_s_per_byte;
    ar::call_options o;
    o.check = false;
    o.shared_memory = false;
    const auto net = hitch::comm::simulated_network::single_switch({k.alpha_s, 1.0 / k.beta_s_per_byte});
    const auto ends = hitch::comm::run_simulated(
        p, net,
        [&](hitch::comm::simulated& comm) {
            ar::group g(comm);
            std::vector<float> data(count, 1.0f);
            comm.advance_to(hitch::seconds_f(1.0));  // after the group's setup, on an idle network
            for (int c = 0; c < calls; ++c) ar::allreduce(g, hitch::view(data), ar::reduce_op::sum, schedule, o);
            return comm.virtual_time().count() - 1.0;
        },
        options);
    return *std::max_element(ends.begin(), ends.end()) / calls;
}

/// One JSON line: the schedule measured on comm::local and predicted from constants measured there.
template <class Schedule>
void compare_local(const std::string& name, const Schedule& schedule, int p, std::size_t bytes,
                   const hitch::cost_constants& k) {
    const double real = time_local(schedule, p, bytes);
    const double network = time_simulated(schedule, p, bytes, k, 0.0);
    const double with_gamma = time_simulated(schedule, p, bytes, k, k.gamma_s_per_byte);
    std::printf(
        "{\"bench\":\"simulate_vs_local\",\"schedule\":\"%s\",\"p\":%d,\"bytes\":%zu,\"calls\":%d,\"alpha_s\":%.4g,"
        "\"beta_s_per_byte\":%.4g,\"gamma_s_per_byte\":%.4g,\"measured_s\":%.6g,\"predicted_network_s\":%.6g,"
        "\"predicted_s\":%.6g,\"error_network\":%.3f,\"error\":%.3f}\n",
        name.c_str(), p, bytes, calibrate_detail::calls_for(bytes), k.alpha_s, k.beta_s_per_byte, k.gamma_s_per_byte,
        real, network, with_gamma, network / real - 1, with_gamma / real - 1);
    std::fflush(stdout);
}

}  // namespace hitch_bench
