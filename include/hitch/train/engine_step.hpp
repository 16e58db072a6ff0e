#pragma once
// The step internals of data_parallel's engine (train/engine.hpp), defined out of its class: a bucket's intake and
// exchange, the agreement on whether to apply a step, gradient accumulation, unused layers, clipping, ZeRO's sums
// over ranks, buffers, replica checks and restoring a checkpoint. engine.hpp includes this file at its end.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hitch/train/engine.hpp"

namespace hitch::train::detail {

/// Restores everything of this rank's own checkpoint file; validates every section, then calls `before_change`
/// (the ranks' agreement) before it changes anything.
template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
void engine<O, X, P, S, C, D, Param>::load_from(const checkpoint_reader& r,
                                                const std::function<void(const checkpoint_position&)>& before_change) {
    const checkpoint_position saved = read_meta(r, identity());
    const auto params = read_parameters(r, weights_.optimizer_layers());
    std::span<const std::byte> model_params;
    if constexpr (on_host)
        if (weights_.sharded()) model_params = read_model_parameters(r, weights_.model_parameters());
    auto codec_states = [&] {
        if constexpr (on_host)
            return read_codec_states(r, buckets_.codec(), buckets_.size(),
                                     [&](std::size_t b) { return buckets_.make_codec_state(b); });
        else
            return buckets_.read_codec_states(r);  // checked, kept aside until the commit below
    }();
    std::optional<amp::loss_scaler_state> scaler_state;
    if (scaler_) scaler_state = read_scaler(r, options_.scaler);
    P policy = read_sync(r, policy_);
    std::optional<S> schedule = read_schedule(r, options_.schedule);
    if (before_change) before_change(saved);
    {
        auto stream = r.stream("hitch.optimizer");
        optimizer_->load(stream);
    }
    restore_parameters(params, weights_.optimizer_layers(), copies());
    if constexpr (on_host)
        if (weights_.sharded()) restore_model_parameters(model_params, weights_.model_parameters());
    weights_.write_back();
    if constexpr (on_host)
        for (std::size_t b = 0; b < buckets_.size(); ++b) buckets_[b].codec_state = std::move(codec_states[b]);
    else
        buckets_.commit_codec_states(std::move(codec_states));
    if (scaler_state) scaler_->set_state(*scaler_state);
    policy_ = std::move(policy);
    if constexpr (stateful_schedule<S>)
        if (schedule) options_.schedule = std::move(*schedule);
    step_ = saved.step;
    if constexpr (shared_memory_policy<P> && shares_address_space<C> && on_host) shared_.refill(control_, layers32());
}

template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
checkpoint_reader engine<O, X, P, S, C, D, Param>::load_elastic(
    const std::filesystem::path& prefix, int saved,
    const std::function<void(const checkpoint_position&)>& before_change) {
    const std::string who = concat("hitch::data_parallel::load (elastic, ", saved, " ranks to ", size(), "): ");
    if constexpr (!on_host) {
        (void)prefix;
        (void)before_change;
        throw config_error(concat(who, "device training loads only the rank count it saved with"));
    } else {
        if (options_.zero_stage != 0 || optimizer_->sharded())
            throw config_error(concat(who, "the optimizer state is sharded over the ranks (zero_stage ",
                                      options_.zero_stage, "): load it on ", saved, " ranks"));
        std::vector<checkpoint_reader> files;
        std::vector<file_verdict> positions;
        for (int j = 0; j < saved; ++j) {
            files.emplace_back(checkpoint_file(prefix, j, saved));
            checkpoint_identity id = identity();
            id.ranks = saved;
            id.rank = j;
            positions.push_back({read_meta(files.back(), id), 1});
        }
        for (const file_verdict& v : positions)
            if (!(v.position == positions.front().position))
                throw mismatch_error(concat(who, prefix.string(), ": the saved ranks' files are from different saves: ",
                                            describe_positions(positions), "; nothing was loaded on any rank"));
        // What every rank holds alike is loaded from rank 0's file, once the others are found to hold the same.
        std::vector<std::string_view> replicated{"hitch.params", "hitch.optimizer", "hitch.sync"};
        if (scaler_) replicated.push_back("hitch.scaler");
        for (const std::string_view name : replicated)
            for (int j = 1; j < saved; ++j) {
                const auto mine = files[static_cast<std::size_t>(j)].section(name);
                const auto first = files.front().section(name);
                if (!std::equal(mine.begin(), mine.end(), first.begin(), first.end()))
                    throw mismatch_error(concat(
                        who, prefix.string(), ": section '", name, "' of saved rank ", j,
                        " differs from rank 0's; an elastic load needs the state every rank holds alike (a policy "
                        "whose replicas drift, such as local_sgd between averages, cannot be redistributed)"));
            }
        const checkpoint_reader& r = files.front();
        const auto params = read_parameters(r, weights_.optimizer_layers());
        std::vector<std::vector<compress::aggregation_state<X>>> per_bucket(buckets_.size());
        for (const checkpoint_reader& f : files) {
            auto states = read_codec_states(f, buckets_.codec(), buckets_.size(),
                                            [&](std::size_t b) { return buckets_.make_codec_state(b); });
            for (std::size_t b = 0; b < buckets_.size(); ++b) per_bucket[b].push_back(std::move(*states[b]));
        }
        std::vector<compress::aggregation_state<X>> codec_states;
        for (auto& states : per_bucket) codec_states.push_back(redistribute<X>(std::move(states)));
        std::optional<amp::loss_scaler_state> scaler_state;
        if (scaler_) scaler_state = read_scaler(r, options_.scaler);
        P policy = read_sync(r, policy_);
        if (before_change) before_change(positions.front().position);
        {
            auto stream = r.stream("hitch.optimizer");
            optimizer_->load(stream);
        }
        restore_parameters(params, weights_.optimizer_layers(), copies());
        weights_.write_back();
        for (std::size_t b = 0; b < buckets_.size(); ++b) buckets_[b].codec_state = std::move(codec_states[b]);
        if (scaler_state) scaler_->set_state(*scaler_state);
        policy_ = std::move(policy);
        step_ = positions.front().position.step;
        if constexpr (shared_memory_policy<P> && shares_address_space<C>) shared_.refill(control_, layers32());
        return std::move(files[static_cast<std::size_t>(rank() % saved)]);
    }
}

/// Unscales (loss scaling), converts (mixed precision) and checks this rank's gradients of bucket b, and packs
/// them into the bucket; a bucket with a non-finite gradient is zeroed so it pollutes neither the other ranks'
/// sums nor this rank's compressor state.
template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
void engine<O, X, P, S, C, D, Param>::prepare_bucket(std::size_t b, bool pack) {
    auto span = trace(concat("prepare bucket ", b), "pack");
    if constexpr (!on_host) {
        // The device machinery does the same per layer, on the device (its stream waits for the layers' events).
        buckets_.prepare(b, pack, scaler_ ? std::optional<float>(scaler_->inverse_scale()) : std::nullopt,
                         [&](std::size_t k) { return reports_->unused(k); });
        return;
    } else {
        bucket& bk = buckets_[b];
        const bucket_plan& plan = buckets_.plan(b);
        bk.local_bad = false;
        bk.report = {};
        for (std::size_t i = 0; i < plan.layers.size(); ++i) {
            const std::size_t k = plan.layers[i];
            const hitch::layer& l = layers32()[k];
            if (options_.check_gradient_contract && reports_->reported() && !reports_->unused(k) &&
                user_gradient_crc(k) != reports_->crc(k))
                throw config_error(concat("hitch::data_parallel: layer ", k, " ('", l.name, "') changed after ",
                                          "gradient_ready(", k, ") in step ", step_, " on rank ", control_.rank(),
                                          ": a gradient must stay as it is from gradient_ready until it is sent"));
            const intake_verdict v = intake_->take(k, reports_->unused(k));
            bk.local_bad |= v.bad;
            if (bk.report.layer < 0) bk.report = v.report;
            if (pack) std::memcpy(bk.data.data() + plan.offsets[i], l.grads.data(), l.size() * sizeof(float));
        }
        if (pack && bk.local_bad) std::fill(bk.data.begin(), bk.data.end(), 0.0f);
    }
}

template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
void engine<O, X, P, S, C, D, Param>::run_bucket(std::size_t b) {
    prepare_bucket(b, /*pack=*/true);
    const auto start = std::chrono::steady_clock::now();
    {
        auto span = trace(concat("exchange bucket ", b), "comm");
        const seconds_f waited_before = group_.waited();
        try {
            buckets_.exchange(b, options_.schedule);
        } catch (const timeout_error& e) {
            // In the user's words first (the step, the bucket and its layers), then the internal call.
            throw timeout_error(describe_bucket(b), concat("inside ", e.operation()), e.waited(), e.missing());
        }
        // The wait for the other ranks opens the exchange (its agreement round): shown as a span of its own.
        const seconds_f waited = group_.waited() - waited_before;
        if (timeline_ != nullptr && waited.count() > 0.0) {
            span.arg("wait_ms", waited.count() * 1e3);
            timeline_->record(concat("wait for ranks (bucket ", b, ")"), "wait", start,
                              start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(waited), "");
        }
    }
    comm_ns_ += ns(start, std::chrono::steady_clock::now());
    buckets_.unpack_gradients(b);
}

/// CRC32C of layer k's gradient as the user holds it (the low-precision one under mixed precision).
template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
std::uint32_t engine<O, X, P, S, C, D, Param>::user_gradient_crc(std::size_t k) const {
    static_assert(on_host, "the device path refuses check_gradient_contract");
    if constexpr (master_weights<Param, D>::mixed_precision) {
        const auto& g = weights_.user_layers()[k].grads;
        return crc32c_of(std::as_bytes(std::span(g.data(), g.size())));
    } else {
        const auto& g = layers32()[k].grads;
        return crc32c_of(std::as_bytes(std::span(g.data(), g.size())));
    }
}

/// "hitch::data_parallel step 3, bucket 1 of 4 (layers 'fc1.weight', 'fc1.bias')": what a user knows a
/// bucket's exchange by (up to 8 layer names, then how many more).
template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
std::string engine<O, X, P, S, C, D, Param>::describe_bucket(std::size_t b) const {
    const auto& layers = buckets_.plan(b).layers;
    std::string names;
    for (std::size_t i = 0; i < layers.size() && i < 8; ++i)
        names += concat(i == 0 ? "" : ", ", "'", layers32()[layers[i]].name, "'");
    if (layers.size() > 8) names += concat(" and ", layers.size() - 8, " more");
    return concat("hitch::data_parallel step ", step_, ", bucket ", b, " of ", buckets_.size(), " (layer",
                  layers.size() == 1 ? " " : "s ", names, ")");
}

/// Every rank of `with` learns whether any rank's gradients were not finite; returns whether to apply the step.
template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
bool engine<O, X, P, S, C, D, Param>::agree_on_step(C& with) {
    auto span = trace("agree", "comm");
    bool local_bad = false;
    amp::detail::nonfinite_report report{};
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
        local_bad |= buckets_[b].local_bad;
        if (report.layer < 0 && buckets_[b].report.layer >= 0) report = buckets_[b].report;
    }
    // The step's agreement is where every rank meets once its backward pass is done: a rank slow after its
    // backward (its buckets already sent) is waited for here. Its time is counted in wait_ms; over control_ it runs
    // as a call of the group, so the stall inspector sees it too.
    const auto start = std::chrono::steady_clock::now();
    struct counted {
        std::uint64_t& into;
        std::chrono::steady_clock::time_point start;
        ~counted() { into += ns(start, std::chrono::steady_clock::now()); }
    } count{agreement_wait_ns_, start};
    if (scaler_) {
        if (&with != &control_ || with.size() <= 1) return scaler_->update(local_bad);
        bool any_overflow = false;
        agreement_call("loss scale", [&](C& c) { any_overflow = comm::any_of(c, local_bad); });
        return scaler_->apply_agreed(any_overflow);
    }
    std::vector<amp::detail::nonfinite_report> reports;
    if (&with == &control_ && with.size() > 1)
        agreement_call("step", [&](C& c) { reports = comm::allgather_value(c, report); });
    else
        reports = amp::detail::gather_reports(with, report);
    const bool any = std::any_of(reports.begin(), reports.end(), [](const auto& r) { return r.layer >= 0; });
    if (!any) return true;
    if (options_.nonfinite == amp::nonfinite_policy::skip_step) return false;
    throw amp::nonfinite_gradient_error(
        concat("hitch::data_parallel: ",
               amp::detail::describe(reports, step_, true, [&](std::size_t k) { return layers32().at(k).name; })));
}

/// A micro-batch that is not its window's last: its gradients are added up here, nothing is sent.
template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
step_metrics engine<O, X, P, S, C, D, Param>::accumulate(std::optional<double> loss) {
    const auto start = std::chrono::steady_clock::now();
    const double own_compute_ms = ms(last_step_end_, start);
    compute_ms_ += own_compute_ms;
    if (!window_start_) window_start_ = last_step_end_;
    try {
        settle_reports();
        auto span = trace("accumulate", "compute");
        if constexpr (on_host)
            for (std::size_t k = 0; k < layers32().size(); ++k) intake_->add(k, reports_->unused(k));
        else
            buckets_.accumulate(scaler_ ? std::optional<float>(scaler_->inverse_scale()) : std::nullopt,
                                [&](std::size_t k) { return reports_->unused(k); });
    } catch (...) {
        reset_step();
        end_window();
        if constexpr (!on_host) buckets_.end_step();
        throw;
    }
    intake().micro_batch_done();
    reset_step();
    if constexpr (!on_host) buckets_.end_step();  // the next micro-batch's backward follows what read its gradients
    if (loss) {
        loss_sum_ += *loss;
        ++losses_;
    }
    step_metrics m;
    m.step = step_;
    m.epoch = step_ / options_.steps_per_epoch;
    m.rank = control_.rank();
    m.loss = loss;
    m.lr = options_.learning_rate(step_, options_.steps_per_epoch);
    m.loss_scale = scaler_ ? static_cast<double>(scaler_->scale()) : 1.0;
    m.micro_batches = intake().taken();
    m.accumulated = true;
    last_step_end_ = std::chrono::steady_clock::now();
    m.compute_ms = own_compute_ms;
    if (first_step_) m.elapsed_s = std::chrono::duration<double>(last_step_end_ - *first_step_).count();
    return m;
}

template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
void engine<O, X, P, S, C, D, Param>::end_window() {
    intake().end_window();
    reports_->end_window();
    loss_sum_ = 0.0;
    losses_ = 0;
    window_start_.reset();
}

/// find_unused_layers: the layers no rank (of those this rank agrees with) used in this window, as a mask; empty
/// when there are none. Collective for synchronous policies: one max-all-reduce of a flag per layer.
template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
std::span<const unsigned char> engine<O, X, P, S, C, D, Param>::unused_everywhere() {
    return reports_->unused_everywhere([&](std::span<float> used) {
        if (self_) return;
        auto span = trace("agree on unused layers", "comm");
        const allreduce::call_options call = internal_call();
        allreduce::allreduce(group_, tensor_view<float>(used.data(), used.size()), allreduce::reduce_op::max,
                             allreduce::recursive_doubling{}, call);
    });
}

/// Clips this rank's FP32 gradients to the global norm (clipping.hpp) and remembers the norm for the metrics.
/// Under ZeRO stage 2 a rank holds the averaged gradient of its pieces only: their sums of squares are added up
/// over the ranks.
template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
void engine<O, X, P, S, C, D, Param>::clip_gradients(std::span<const unsigned char> skip) {
    auto span = trace("clip gradients", "compute");
    std::vector<hitch::layer> held;
    if (options_.zero_stage == 2) {
        for (const optim::piece& pc : own_pieces_)
            if (skip.empty() || skip[pc.layer] == 0) {
                // Clipping reads and scales gradients only: the piece's views are both its gradient.
                const tensor_view<float> g = layers32()[pc.layer].grads.subview(pc.begin, pc.size());
                held.push_back({layers32()[pc.layer].name, g, g, {}, 0});
            }
    } else {
        for (std::size_t k = 0; k < layers32().size(); ++k)
            if (skip.empty() || skip[k] == 0) held.push_back(layers32()[k]);
    }
    if constexpr (on_host) {
        double sum = gradient_sum_of_squares(held, options_.execution);
        if (options_.zero_stage == 2) sum_over_ranks(std::span<double>(&sum, 1));
        grad_norm_ = clip_to_norm(held, sum, options_.clip_grad_norm, options_.execution);
    } else {
        // The same sums in the same order (clipping.hpp), the blocks' lane sums on the device.
        grad_norm_ = buckets_.clip_to_norm(held, buckets_.gradient_sum_of_squares(held), options_.clip_grad_norm);
    }
}

/// Replaces each value by its sum over the ranks (ZeRO's partial norms).
template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
void engine<O, X, P, S, C, D, Param>::sum_over_ranks(std::span<double> values) {
    auto span = trace("sum over ranks", "comm");
    const allreduce::call_options call = internal_call();
    allreduce::allreduce(group_, tensor_view<double>(values.data(), values.size()), allreduce::reduce_op::sum,
                         allreduce::recursive_doubling{}, call);
}

/// Broadcasts and averages the buffers (or, `all_from_root`, gives every rank rank 0's).
template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
void engine<O, X, P, S, C, D, Param>::sync_buffers(bool all_from_root) {
    auto span = trace("buffers", "comm");
    const auto start = std::chrono::steady_clock::now();
    const allreduce::call_options call = internal_call();
    // Buffers in device memory are read once the model's stream has written them.
    if constexpr (!on_host)
        if (buffers_.any_on_device()) buckets_.synchronize_compute();
    buffers_.synchronize(
        group_, call,
        [&](tensor_view<float> v) {
            // The ring, whatever the gradients' schedule: every rank gets the same bits, and a compressed model over
            // comm::mpi needs no native all-reduce for it.
            allreduce::allreduce(group_, v, allreduce::reduce_op::average, allreduce::ring{}, call);
        },
        all_from_root, copies());
    comm_ns_ += ns(start, std::chrono::steady_clock::now());
}

template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
void engine<O, X, P, S, C, D, Param>::check_replicas() {
    auto span = trace("replica check", "comm");
    comm::agree(control_, parameter_hash(),
                concat("hitch::data_parallel: replica check after step ", step_ - 1, ": parameter hashes differ"),
                [](std::ostream& os, std::uint64_t h) { os << "0x" << std::hex << h << std::dec; });
}

}  // namespace hitch::train::detail
