#pragma once
// The trainers' command line: every option, what it accepts, and where it lands in train_config. Values are read
// by option_values.hpp, so each refusal is one line naming the option, the value and what is accepted.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_options.hpp"
#include "schedule_by_name.hpp"
#include "train.hpp"

namespace hitch_examples {

/// Registers every option of a trainer; `c` must outlive the parse.
inline void add_options(CLI::App& app, train_config& c, const example_info& info) {
    using detail::add_name, detail::add_real, detail::add_whole;
    using r = real_range;
    add_name(app, "--model", c.model, "Model", info.models);
    add_name(app, "--optimizer", c.optimizer, "Optimizer", optimizer_names());
    add_name(app, "--compressor", c.compressor, "Gradient compressor", compressor_names());
    add_name(app, "--sync", c.sync, "Synchronisation policy", sync_names());
    add_name(app, "--allreduce", c.allreduce, "All-reduce schedule", schedule_by_name::names());
    add_name(app, "--lr-schedule", c.lr_schedule, "Learning-rate schedule", lr_schedule_names());
    add_whole<std::size_t>(app, "--batch-size", c.batch_size, "Global batch size (split over the ranks)", 1,
                           std::size_t{1} << 20);
    add_whole<std::size_t>(app, "--epochs", c.epochs, "Epochs", 1, 1000000);
    add_real(app, "--lr", c.lr, "Peak learning rate for the global batch", r::positive());
    add_real(app, "--warmup-epochs", c.warmup_epochs, "Linear warm-up from lr/10 (Goyal et al. 2017)",
             r::non_negative());
    add_real(app, "--momentum", c.momentum, "Momentum (momentum, nesterov, lars)", r::closed(0.0, 0.9999));
    add_real(app, "--weight-decay", c.weight_decay, "Weight decay", r::non_negative());
    add_real(app, "--lars-eta", c.lars_eta, "LARS trust coefficient", r::positive());
    add_whole<std::uint64_t>(app, "--seed", c.seed, "Seed of the model initialisation and the data order", 0);
    add_real(app, "--density", c.density, "Fraction sent by topk, dgc, randomk", r::closed(1e-6, 1.0));
    add_real(app, "--tau", c.threshold_tau, "Threshold of Strom's codec", r::positive());
    app.add_option_function<std::string>(
           "--onebit-group",
           [&c](const std::string& v) {
               std::size_t n = 1;  // refused below unless it reads as a whole number in range
               try {
                   n = parse_whole<std::size_t>("--onebit-group", v, 0, std::size_t{1} << 30);
               } catch (const usage_error&) {
                   if (double x = 0; !detail::read_real(detail::trimmed(v), x)) throw;  // "not a number"
               }
               if (n % 8 != 0)
                   throw usage_error("--onebit-group must be 0 or a positive multiple of 8 up to 1073741824, got " +
                                     detail::shown(detail::trimmed(v)));
               c.onebit_group = n;
           },
           "Elements per pair of onebit reconstruction values (0: whole bucket)")
        ->type_name("INT")
        ->default_str(std::to_string(c.onebit_group));
    add_real(app, "--terngrad-clip", c.terngrad_clip, "TernGrad clipping at c standard deviations (0: off)",
             r::non_negative());
    add_whole<unsigned>(app, "--qsgd-levels", c.qsgd_levels, "QSGD levels s", 1, 1u << 20);
    add_whole<std::size_t>(app, "--powersgd-rank", c.powersgd_rank, "PowerSGD rank r", 1, 64);
    add_whole<std::uint64_t>(app, "--local-sgd-period", c.local_sgd_period, "Local steps between averages", 1);
    add_real(app, "--block-momentum", c.block_momentum, "local_sgd: BMUF block momentum (0: plain averaging)",
             r::closed(0.0, 0.9999));
    add_real(app, "--block-lr", c.block_lr, "local_sgd: BMUF block learning rate", r::closed(1e-6, 1000.0));
    add_name(app, "--block-nesterov", c.block_nesterov, "local_sgd: BMUF Nesterov-like block start", {"on", "off"});
    add_name(app, "--server-placement", c.server_placement,
             "Parameter server: on every rank (colocated) or on the last --servers ranks (dedicated)",
             {"colocated", "dedicated"});
    add_whole<int>(app, "--servers", c.dedicated_servers, "Dedicated server ranks (--server-placement dedicated)", 1,
                   1 << 20);
    add_name(app, "--shard-by", c.shard_by, "Parameter server shards: whole layers or equal byte ranges",
             {"layer", "range"});
    app.add_flag("--deterministic", c.deterministic,
                 "Parameter server: take the workers' requests in a fixed order (reproducible runs)");
    add_whole<std::uint32_t>(app, "--soft-c", c.soft_c, "soft: gradients averaged into one update (0: all workers)", 0,
                             1u << 20);
    add_name(app, "--staleness-scaling", c.staleness_scaling, "soft: scale each gradient by 1 / its staleness",
             {"on", "off"});
    add_whole<std::uint64_t>(app, "--fetch-every", c.fetch_every, "async: pull the parameters every N steps", 1,
                             std::uint64_t{1} << 32);
    add_whole<std::uint64_t>(app, "--push-every", c.push_every, "async: push the summed gradients every N steps", 1,
                             std::uint64_t{1} << 32);
    add_whole<std::uint64_t>(app, "--ssp-bound", c.ssp_bound, "ssp: clocks a worker may run ahead of the slowest", 0,
                             std::uint64_t{1} << 40);
    add_whole<std::uint64_t>(app, "--easgd-period", c.easgd_period, "easgd: local steps between elastic exchanges", 1,
                             std::uint64_t{1} << 32);
    add_real(app, "--easgd-alpha", c.easgd_alpha, "easgd: elasticity (0: 0.9 / workers)", r::closed(0.0, 0.99));
    add_name(app, "--easgd-form", c.easgd_form, "easgd: with a parameter server, or all ranks at once",
             {"asynchronous", "synchronous"});
    add_whole<std::uint32_t>(app, "--backups", c.backups, "backup: gradients per step that may be dropped", 0,
                             1u << 20);
    add_whole<std::uint64_t>(app, "--accumulate", c.accumulate,
                             "Micro-batches of --batch-size per optimizer step (gradient accumulation)", 1,
                             std::uint64_t{1} << 20);
    add_real(app, "--clip-grad-norm", c.clip_grad_norm,
             "Scale the gradients down to this global L2 norm before the optimizer (0: off)", r::non_negative());
    add_whole<unsigned>(app, "--zero", c.zero,
                        "ZeRO: 1 shards the optimizer state over the ranks, 2 also reduce-scatters the gradients", 0,
                        2);
    add_real(app, "--bucket-mib", c.bucket_mib, "Gradient bucket size in MiB", r::closed(1e-4, 1024.0));
    app.add_option("--checkpoint", c.checkpoint,
                   "Write a checkpoint after every epoch (prefix; one file per rank; {node}: the rank's node)");
    add_whole<std::size_t>(app, "--checkpoint-every", c.checkpoint_every,
                           "Also checkpoint every N optimizer steps, to <checkpoint>.step<S>, keeping the three newest",
                           0, std::size_t{1} << 40);
    app.add_option("--resume", c.resume,
                   "Resume from a checkpoint prefix written by --checkpoint ({node} as there); auto: from the newest "
                   "usable checkpoint under --checkpoint, or from the start when there is none");
    add_name(app, "--resume-ranks", c.resume_ranks,
             "--resume PREFIX written by another number of workers: same (refused), keep-global-batch, or "
             "keep-rank-batch (global batch and learning rate scaled by the linear rule)",
             {"same", "keep-global-batch", "keep-rank-batch"});
    app.add_option("--metrics", c.metrics, "Per-step metrics as JSON lines (rank 0; others append .rank<r>)");
    app.add_option("--timeline", c.timeline, "Chrome trace-event timeline (rank 0; others append .rank<r>)");
    app.add_option("--plot", c.plot, "Draw loss and test accuracy against time and epochs into this PNG");
    app.add_option("--data", c.data, "Directory of the data set ({node}: the rank's node, for per-node copies)")
        ->capture_default_str();
    add_name(app, "--device", c.device,
             "Where the model and data_parallel run: cpu, or cuda (--model mlp on a GPU, by the -cuda program built "
             "where CMake finds CUDA)",
             {"cpu", "cuda"});
    add_whole<int>(app, "--threads", c.threads, "Run N ranks as threads of this process (comm::local) instead of MPI",
                   0, 64);
    add_whole<int>(app, "--blas-threads", c.blas_threads, "OpenBLAS threads per rank", 1, 64);
    app.add_flag("--synthetic", c.synthetic, "Random data of the data set's shape (measures throughput)");
    add_whole<std::size_t>(app, "--synthetic-samples", c.synthetic_samples, "Training samples of --synthetic", 1,
                           std::size_t{1} << 24);
    add_whole<std::size_t>(app, "--max-steps", c.max_steps, "Stop after this many steps (0: all epochs)", 0);
    add_whole<std::size_t>(app, "--eval-every", c.eval_every,
                           "Also measure test accuracy every N steps (0: at the end of each epoch only)", 0);
    app.add_flag("!--no-progress-bar", c.progress_bar, "Plain progress lines even on a terminal");
    app.add_option_function<std::string>(
           "--slow-rank",
           [&c](const std::string& v) {
               if (detail::trimmed(v) == "-1") {
                   c.slow_rank = -1;
                   return;
               }
               if (detail::trimmed(v) == "any") {
                   c.slow_rank = train_config::any_rank;
                   return;
               }
               try {
                   c.slow_rank = parse_whole<int>("--slow-rank", v, 0, std::numeric_limits<int>::max());
               } catch (const usage_error&) {
                   if (double x = 0; !detail::read_real(detail::trimmed(v), x)) throw;  // "not a number"
                   throw usage_error("--slow-rank must be -1 (none), any, or a rank, a whole number >= 0, got " +
                                     detail::shown(detail::trimmed(v)));
               }
           },
           "Make this rank a straggler: it sleeps --slow-ms after every backward pass (-1: none; any: each step "
           "one worker drawn at random, a transient straggler)")
        ->type_name("INT")
        ->default_str(std::to_string(c.slow_rank));
    add_real(app, "--slow-ms", c.slow_ms, "Milliseconds --slow-rank sleeps in every step", r::closed(0.0, 3600000.0));
    add_real(app, "--stall-warning", c.stall_warning_s,
             "Report a collective that has waited this many seconds for ranks that have not come (rank 0 prints one "
             "line naming them; 0: off)",
             r::closed(0.0, 1e9))
        ->default_str("5, or HITCH_STALL_WARNING_S");
}

}  // namespace hitch_examples
