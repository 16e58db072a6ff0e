#pragma once
// hitch::data_parallel_options: the run-time options of data_parallel (optimizer, codec, sync policy and schedule
// options, learning rate, buckets, loss scaling, checks, sinks) and their validation.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>

#include "hitch/amp/loss_scaler.hpp"
#include "hitch/amp/nonfinite.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/concepts/optimizer.hpp"
#include "hitch/concepts/sync_policy.hpp"
#include "hitch/core/observer.hpp"
#include "hitch/core/options.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/optim/lr/constant.hpp"
#include "hitch/train/timeline.hpp"
#include "hitch/train/tuning.hpp"

namespace hitch {

/// Run-time options of data_parallel; every field is checked at construction (config_error).
template <optimizer O, compressor X, sync_policy P, class S>
struct data_parallel_options {
    /// The optimizer's hyper-parameters (momentum, betas, weight decay, LARS's trust coefficient ...).
    typename O::options_type optimizer{};
    /// The gradient codec, with its options (compress::topk({.density = 0.001}) ...); or set only its options with
    /// compressor_options() below.
    X compressor{};
    /// The sync policy's options (local_sgd's period ...).
    typename P::options_type sync{};
    /// The all-reduce schedule, with its options.
    S schedule{};
    /// Learning rate as a function of (step, steps per epoch); any hitch::lr schedule converts.
    std::function<double(std::uint64_t, std::uint64_t)> learning_rate = lr::constant(lr::constant::options_type{0.01});
    /// Steps per epoch, for the learning-rate schedule and the metrics' epoch.
    std::uint64_t steps_per_epoch = 1;
    /// Bytes of gradients per bucket (DDP's default 25 MiB; train/tuning.hpp).
    std::size_t bucket_bytes = train::tuning::default_bucket_bytes;
    /// Exchange each bucket as soon as gradient_ready completes it (on a worker thread), overlapping backward.
    bool overlap = true;
    /// Micro-batches per optimizer step (gradient accumulation: DDP's no_sync(), Horovod's
    /// backward_passes_per_step, DeepSpeed's gradient_accumulation_steps). Call step() after every micro-batch's
    /// backward: the first K - 1 calls only add this rank's gradients up (no communication), the K-th exchanges and
    /// applies their mean, as one step on the K micro-batches together would. step_index(), the learning-rate
    /// schedule and steps_per_epoch count optimizer steps. Costs one FP32 copy of the gradients.
    std::uint64_t accumulation_steps = 1;
    /// Scale the gradients down to this L2 norm, taken over every layer (torch's clip_grad_norm_), when it is larger:
    /// after loss unscaling and the exchange, before the optimizer; the norm is reported in the metrics. 0: off;
    /// infinity: report the norm without clipping. Under a parameter-server policy a worker clips the gradients it
    /// pushes.
    double clip_grad_norm = 0.0;
    /// A layer that gradient_ready was not called for in a step, while it was for others, counts as a zero gradient
    /// (DDP's find_unused_parameters: a branch not taken) instead of being config_error. A layer no rank used in a
    /// step is left out of the optimizer step (its parameters and state stay as they are). Costs, per step, an
    /// all-reduce of one number per layer, and the unused layers' buckets start only at step().
    bool find_unused_layers = false;
    /// Shard the optimizer across ranks (ZeRO, Rajbhandari et al. SC'20; torch's ZeroRedundancyOptimizer): 0 off;
    /// 1: gradients are exchanged as usual, each rank keeps the optimizer state of, and steps, only its block of every
    /// bucket (1/p of the state), then the parameters are all-gathered; 2: the same, with the gradients
    /// reduce-scattered instead of all-reduced (each rank receives only its block; compress::none only). Needs a
    /// policy that exchanges gradients every step (sync::hard). Every optimizer shards, LARS and LAMB with one extra
    /// all-reduce of two numbers per layer for their norms.
    unsigned zero_stage = 0;
    /// Scale the loss (use scale() as the factor) and skip overflowing steps; FP16 models need it.
    bool loss_scaling = false;
    amp::loss_scaler_options scaler{};
    /// Without loss scaling: what a non-finite gradient does (throw naming the layer and step, or skip).
    amp::nonfinite_policy nonfinite = amp::nonfinite_policy::throw_error;
    /// At construction every rank takes rank 0's parameters (as DDP's constructor broadcasts them), so replicas
    /// started from another seed or another checkpoint agree from the first step. Off: they must already agree
    /// (replica_check_interval finds out when they do not).
    bool broadcast_parameters = true;
    /// Ranks may run out of data at different steps (DDP's Join): every synchronised step counts the ranks that
    /// still train (one small all-reduce), and a rank whose data ran out calls join(), which takes part in the
    /// others' steps with zero gradients until every rank has joined. Off: every rank must take the same steps (a
    /// rank that stops early leaves the others to their deadline).
    bool uneven_inputs = false;
    /// With uneven_inputs: while some ranks have joined, average the gradients over the ranks that still train
    /// (false: the mean over the samples of the step, as one global batch would) or over every rank (true: the
    /// joined ranks' zeros count, as DDP's Join does by default with divide_by_initial_world_size).
    bool join_averages_over_all_ranks = false;
    /// Every this many steps compare a hash of the parameters across ranks (0: never); drift is mismatch_error.
    std::uint64_t replica_check_interval = 0;
    /// Check every collective's arguments across ranks (allreduce::call_options::check).
    bool check_collectives = true;
    /// A debugging check of the gradient contract: a layer's gradient must not change from gradient_ready(i) until
    /// it is sent. On, gradient_ready takes a CRC32C of the gradient and the exchange compares it before packing;
    /// a change is config_error naming the layer and step (on that rank; its peers then time out). Off by default:
    /// it reads every reported gradient once more.
    bool check_gradient_contract = false;
    /// Threads for the optimizer and the gradient passes.
    parallel_options execution{};
    /// On a device with streams (hitch::cuda::device): the stream the model's forward and backward run on, as the
    /// device's own handle (a cudaStream_t). gradient_ready(i) records an event there and the exchange waits for it
    /// on the device, so the host never waits for backward; step() leaves the updated parameters ordered before
    /// what is queued there next. Null: the device's own stream. Host devices have none: it must stay null.
    void* compute_stream = nullptr;
    /// Optional sinks: a timeline of every span, and one JSON line of metrics per step.
    train::timeline* timeline = nullptr;
    std::ostream* metrics = nullptr;
    /// What the library tells this rank while it runs (core/observer.hpp): with `observer.stall` set, a gradient
    /// exchange (or any other collective of the step) that has waited `stall.warning_s` for ranks that have not
    /// come is reported, on rank 0 (or every rank: stall.every_rank), naming them. None by default.
    hitch::observer observer{};
    hitch::stall_options stall{};

    /// The codec's options, without naming its type again: o.compressor_options({.density = 0.01}) builds
    /// `compressor` from them (for error_feedback<topk>, topk's options; a codec of your own needs an options_type
    /// and a constructor from it). The codec checks them: config_error, and `compressor` stays as it was.
    template <class Y = X>
        requires requires { typename Y::options_type; }
    void compressor_options(const typename Y::options_type& codec) {
        compressor = Y(codec);
    }

    void validate() const {
        option_validator check("hitch::data_parallel");
        check
            .require(static_cast<bool>(learning_rate), "learning_rate", "empty",
                     "a schedule (e.g. hitch::lr::constant)")
            .at_least("steps_per_epoch", steps_per_epoch, std::uint64_t{1})
            .closed("bucket_bytes", bucket_bytes, std::size_t{4}, std::size_t{1} << 40)
            .closed("accumulation_steps", accumulation_steps, std::uint64_t{1}, std::uint64_t{1} << 20)
            .non_negative("clip_grad_norm", clip_grad_norm)
            .closed("zero_stage", zero_stage, 0u, 2u);
        stall.validate();
        if (loss_scaling) scaler.validate();
        execution.validate();
    }
};

}  // namespace hitch
