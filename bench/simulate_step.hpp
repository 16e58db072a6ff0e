#pragma once
// A data-parallel training step of a whole model on a simulated cluster, for hitch-simulate's --model mode: each
// rank computes its forward pass, then its backward pass layer by layer (the step's compute spread over the tensors
// by their multiply-adds, simulate_models.hpp), and exchanges each gradient bucket as soon as all its layers are
// done, on a thread of its own (the exchange overlaps the rest of the backward pass in virtual time), as
// data_parallel does: the same bucket plan (train::plan_buckets), the same launch order, the same exchange worker
// (train::detail::bucket_pipeline), the same averaging all-reduce with its agreement round or, with a compressor, the
// same compress::aggregate, and the same agreement on the step at its end. Parameters and the optimizer are left
// out: they cost no network time.
//
// engine::data_parallel runs hitch::data_parallel itself instead (plain SGD, no compressor): every rank then holds a
// copy of the model, its gradients and its buckets, which bounds p at a few tens for ResNet-50 on a workstation. It
// is what the re-enactment is checked against (docs/scaling.md).
//
// Timing only (simulated_options::timing_only_memory): every rank's buckets lie in one buffer shared by all, and
// messages sent from it carry no bytes, so ResNet-50 at 256 ranks needs one copy of its gradients; the sums are
// then meaningless, the virtual times the same (for codecs, as long as their message sizes do not depend on the
// values: their encoded messages are sent from buffers of their own and keep their bytes).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/amp/nonfinite.hpp"
#include "hitch/comm/agree.hpp"
#include "hitch/comm/simulated.hpp"
#include "hitch/exchange/aggregate.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/backup_workers.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/sync/local_sgd.hpp"
#include "hitch/sync/ssp.hpp"
#include "hitch/train/bucket_pipeline.hpp"
#include "hitch/train/buckets.hpp"
#include "hitch/train/data_parallel.hpp"
#include "simulate_models.hpp"

namespace hitch_bench {

struct step_settings {
    model_description model;
    double compute_s = 0.2;             // forward + backward per step on one rank
    double backward_share = 2.0 / 3.0;  // of compute_s (backward takes about twice the forward pass)
    std::size_t bucket_bytes = std::size_t{25} << 20;
    bool overlap = true;
    int steps = 2;  // all but the first are timed (the first finds the network idle)
    bool timing_only = true;
    enum class engine_kind { model, data_parallel } engine = engine_kind::model;
    /// data_parallel's sync policy (engine data_parallel; the re-enactment is hard sync): local SGD averages every
    /// 4 steps, SSP lets a worker run 3 steps ahead, backup workers drop the last gradient of each step.
    enum class policy_kind { hard, local_sgd, ssp, backup_workers } policy = policy_kind::hard;
    /// Each rank's compute in each step is scaled by 1 + jitter_cv z, z a standard normal drawn from (rank, step): the
    /// variation of step times a synchronous step waits for the slowest of (at least 0.5).
    double jitter_cv = 0.0;
    /// The parameter-server policies' shards (ssp, backup_workers): whole layers (the default) or equal ranges.
    hitch::sync::shard_by sharding = hitch::sync::shard_by::layer;
    /// Faults of the run (a straggler), and its timeout.
    hitch::comm::simulated_faults faults{};
    double timeout_s = 600.0;
};

struct step_result {
    double step_s = 0;        // the mean of the timed steps, from the first rank's start to the last rank's end
    double rank0_step_s = 0;  // the mean of rank 0's own timed steps (a fast worker, where one rank is slow)
    double exposed_s = 0;     // step_s - compute_s: what the backward pass does not hide
    std::size_t buckets = 0;
};

namespace detail {

/// The factor scaling rank r's compute in step `step` (step_settings::jitter_cv): 1 + cv z, z standard normal
/// (Box-Muller over two seeded uniform draws), at least 0.5.
inline double jitter(const step_settings& s, int rank, int step) {
    if (s.jitter_cv <= 0.0) return 1.0;
    const double u1 = 1.0 - hitch::comm::detail::uniform_draw(0x5eed, rank, static_cast<std::uint64_t>(step), 0);
    const double u2 = hitch::comm::detail::uniform_draw(0x5eed, rank, static_cast<std::uint64_t>(step), 1);
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.141592653589793 * u2);
    return std::max(0.5, 1.0 + s.jitter_cv * z);
}

/// The compute of each tensor's backward pass (in forward order), in seconds.
inline std::vector<double> backward_times(const step_settings& s) {
    const double total = s.model.flops();
    std::vector<double> out;
    for (const auto& t : s.model.tensors) out.push_back(s.compute_s * s.backward_share * t.flops / total);
    return out;
}

/// Layers of the model's sizes over `arena` (only their sizes matter to the bucket plan).
inline std::vector<hitch::layer> layers_over(const model_description& m, float* arena) {
    std::vector<hitch::layer> layers;
    std::size_t at = 0;
    for (const auto& t : m.tensors) {
        layers.push_back(
            {t.name, hitch::tensor_view<float>(arena + at, t.size), hitch::tensor_view<float>(arena + at, t.size)});
        at += t.size;
    }
    return layers;
}

constexpr double step_start_s = 1.0;  // after the groups' setup, on an idle network

/// Where one rank's timed steps began and ended, and its buckets.
struct rank_span {
    double begin = 0, end = 0;
    std::size_t buckets = 0;
};

/// One rank's steps through the re-enactment.
template <class Schedule, class Codec>
rank_span model_rank(hitch::comm::simulated& comm, const step_settings& s, const Schedule& schedule, const Codec& codec,
                     float* shared) {
    namespace ar = hitch::allreduce;
    hitch::comm::simulated control = comm.split(0, comm.rank());
    ar::group<hitch::comm::simulated> g(comm);
    const std::size_t total = s.model.parameters();
    std::vector<float> own;
    if (shared == nullptr) own.assign(total, 1.0f);
    float* arena = shared != nullptr ? shared : own.data();
    const auto layers = layers_over(s.model, arena);
    const auto plan = hitch::train::plan_buckets(layers, s.bucket_bytes);
    std::vector<std::size_t> bucket_of(layers.size()), offset(plan.size() + 1, 0);
    for (std::size_t b = 0; b < plan.size(); ++b) {
        for (std::size_t k : plan[b].layers) bucket_of[k] = b;
        offset[b + 1] = offset[b] + plan[b].elements;
    }
    std::vector<std::optional<hitch::compress::aggregation_state<Codec>>> states(plan.size());
    if constexpr (!std::is_same_v<Codec, hitch::compress::none>)
        for (std::size_t b = 0; b < plan.size(); ++b)
            states[b].emplace(hitch::compress::make_aggregation_state(codec, plan[b].elements));
    ar::call_options o;  // data_parallel's defaults: an agreement round opens each call
    const auto exchange = [&](std::size_t b) {
        const hitch::tensor_view<float> data(arena + offset[b], plan[b].elements);
        if constexpr (std::is_same_v<Codec, hitch::compress::none>) {
            ar::allreduce(g, data, ar::reduce_op::average, schedule, o);
        } else {
            hitch::compress::aggregate_options ao;
            ao.average = true;
            ao.call = o;
            (void)hitch::compress::aggregate(g, codec, *states[b], data, schedule, ao);
        }
    };
    hitch::train::detail::bucket_pipeline<hitch::comm::simulated> pipeline(exchange);
    if (s.overlap) pipeline.start(comm);
    const std::vector<double> backward = backward_times(s);
    std::vector<std::size_t> ready(plan.size(), 0);
    double begin = 0, end = 0;
    comm.advance_to(hitch::seconds_f(step_start_s));
    for (int step = 0; step < s.steps; ++step) {
        if (step <= 1) begin = comm.virtual_time().count();
        const double scale = jitter(s, comm.rank(), step);
        comm.compute(hitch::seconds_f(scale * s.compute_s * (1.0 - s.backward_share)));
        std::size_t launched = 0;
        std::fill(ready.begin(), ready.end(), 0);
        for (std::size_t k = layers.size(); k-- > 0;) {
            comm.compute(hitch::seconds_f(scale * backward[k]));
            ++ready[bucket_of[k]];
            while (launched < plan.size() && ready[launched] == plan[launched].layers.size()) ++launched;
            pipeline.launch_until(launched);
        }
        pipeline.finish();
        (void)hitch::comm::allgather_value(control, hitch::amp::detail::nonfinite_report{});
        pipeline.reset();
        end = comm.virtual_time().count();
    }
    return {begin, end, plan.size()};
}

/// One rank's steps through hitch::data_parallel itself.
template <class Schedule, class Sync = hitch::sync::hard>
rank_span data_parallel_rank(hitch::comm::simulated& comm, const step_settings& s, float* shared) {
    const std::size_t total = s.model.parameters();
    std::vector<float> own_params, own_grads;
    float* params = shared;
    float* grads = shared;
    if (shared == nullptr) {
        own_params.assign(total, 0.5f);
        own_grads.assign(total, 1.0f);
        params = own_params.data();
        grads = own_grads.data();
    }
    std::vector<hitch::layer> layers;
    std::size_t at = 0;
    for (const auto& t : s.model.tensors) {
        layers.push_back(
            {t.name, hitch::tensor_view<float>(params + at, t.size), hitch::tensor_view<float>(grads + at, t.size)});
        at += t.size;
    }
    hitch::cpu dev;
    using engine = hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, Sync, Schedule>;
    typename engine::options o;
    if constexpr (std::is_same_v<Sync, hitch::sync::local_sgd>) o.sync.period = 4;
    if constexpr (std::is_same_v<Sync, hitch::sync::ssp>) {
        o.sync.staleness_bound = 3;
        o.sync.server.sharding = s.sharding;
    }
    if constexpr (std::is_same_v<Sync, hitch::sync::backup_workers>) {
        o.sync.backups = 1;
        o.sync.server.sharding = s.sharding;
    }
    o.overlap = s.overlap;
    o.bucket_bytes = s.bucket_bytes;
    o.broadcast_parameters = false;  // a start from equal parameters, as the re-enactment's
    o.check_gradient_contract = false;
    engine dp(comm, dev, layers, o);
    const std::vector<double> backward = backward_times(s);
    double begin = 0, end = 0;
    comm.advance_to(hitch::seconds_f(step_start_s));
    for (int step = 0; step < s.steps; ++step) {
        if (step <= 1) begin = comm.virtual_time().count();
        const double scale = jitter(s, comm.rank(), step);
        comm.compute(hitch::seconds_f(scale * s.compute_s * (1.0 - s.backward_share)));
        for (std::size_t k = layers.size(); k-- > 0;) {
            comm.compute(hitch::seconds_f(scale * backward[k]));
            dp.gradient_ready(k);
        }
        (void)dp.step();
        end = comm.virtual_time().count();
    }
    return {begin, end, hitch::train::plan_buckets(layers, s.bucket_bytes).size()};
}

}  // namespace detail

/// Simulates s.steps training steps on p ranks and returns the mean time of all but the first.
template <class Schedule, class Codec = hitch::compress::none>
step_result simulate_step(int p, const hitch::comm::simulated_network& net, const step_settings& s,
                          const Schedule& schedule, const Codec& codec = {}) {
    hitch::comm::simulated_options options;
    options.timeout_s = s.timeout_s;
    options.faults = s.faults;
    std::vector<float> shared;
    if (s.timing_only) {
        shared.assign(s.model.parameters(), 1.0f);
        options.timing_only_memory.push_back(std::as_bytes(std::span<const float>(shared)));
    }
    float* const shared_data = s.timing_only ? shared.data() : nullptr;
    std::vector<detail::rank_span> spans(static_cast<std::size_t>(p));
    const auto report = hitch::comm::simulate(
        p, net,
        [&](hitch::comm::simulated& comm) {
            auto& span = spans[static_cast<std::size_t>(comm.rank())];
            if (s.engine == step_settings::engine_kind::data_parallel) {
                using kind = step_settings::policy_kind;
                if constexpr (!std::is_same_v<Codec, hitch::compress::none>)
                    throw hitch::config_error("hitch-simulate: --engine data_parallel runs without a compressor");
                else if (s.policy == kind::hard)
                    span = detail::data_parallel_rank<Schedule>(comm, s, shared_data);
                else if constexpr (!std::is_same_v<Schedule, hitch::allreduce::ring>)
                    throw hitch::config_error("hitch-simulate: --policy other than hard runs with --schedule ring");
                else if (s.policy == kind::local_sgd)
                    span = detail::data_parallel_rank<Schedule, hitch::sync::local_sgd>(comm, s, shared_data);
                else if (s.policy == kind::ssp)
                    span = detail::data_parallel_rank<Schedule, hitch::sync::ssp>(comm, s, shared_data);
                else
                    span = detail::data_parallel_rank<Schedule, hitch::sync::backup_workers>(comm, s, shared_data);
            } else {
                span = detail::model_rank(comm, s, schedule, codec, shared_data);
            }
            return 0;
        },
        options);
    if (auto e = report.first_error()) std::rethrow_exception(e);
    step_result r;
    double first_begin = spans.front().begin, last_end = 0;
    for (const auto& span : spans) {
        first_begin = std::min(first_begin, span.begin);
        last_end = std::max(last_end, span.end);
    }
    r.step_s = (last_end - first_begin) / std::max(1, s.steps - 1);
    r.rank0_step_s = (spans.front().end - spans.front().begin) / std::max(1, s.steps - 1);
    r.exposed_s = std::max(0.0, r.step_s - s.compute_s);  // (per-layer compute is rounded to picoseconds)
    r.buckets = spans.front().buckets;
    return r;
}

}  // namespace hitch_bench
