#pragma once
// The trainers' command line (CLI11) and main(): parse, load the data once per process, run on MPI ranks
// (mpiexec -n N) or on threads (--threads N), plot, and print one JSON object as the last line.

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "hitch/comm/local.hpp"
#include "hitch/comm/mpi.hpp"
#include "nn/blas.hpp"
#include "plot.hpp"
#include "schedule_by_name.hpp"
#include "train.hpp"

namespace hitch_examples {

/// Builds the task (data and model) for a configuration; `keep` holds whatever the task points into.
using task_factory = std::function<task(const train_config&, std::shared_ptr<void>& keep)>;

struct example_info {
    std::string program;                  // "hitch-mnist"
    std::string example;                  // "mnist"
    std::vector<std::string> models;      // {"mlp", "cnn"}
    train_config defaults;
};

inline void add_options(CLI::App& app, train_config& c, const example_info& info) {
    const auto names = [](std::vector<std::string> v) { return CLI::IsMember(std::move(v)); };
    app.add_option("--model", c.model, "Model")->check(names(info.models))->capture_default_str();
    app.add_option("--optimizer", c.optimizer, "Optimizer")->check(names(optimizer_names()))->capture_default_str();
    app.add_option("--compressor", c.compressor, "Gradient compressor")
        ->check(names(compressor_names()))
        ->capture_default_str();
    app.add_option("--sync", c.sync, "Synchronisation policy")->check(names(sync_names()))->capture_default_str();
    app.add_option("--allreduce", c.allreduce, "All-reduce schedule")
        ->check(names(schedule_by_name::names()))
        ->capture_default_str();
    app.add_option("--lr-schedule", c.lr_schedule, "Learning-rate schedule")
        ->check(names(lr_schedule_names()))
        ->capture_default_str();
    app.add_option("--batch-size", c.batch_size, "Global batch size (split over the ranks)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    app.add_option("--epochs", c.epochs, "Epochs")->check(CLI::PositiveNumber)->capture_default_str();
    app.add_option("--lr", c.lr, "Peak learning rate for the global batch")->check(CLI::PositiveNumber)->capture_default_str();
    app.add_option("--warmup-epochs", c.warmup_epochs, "Linear warm-up from lr/10 (Goyal et al. 2017)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    app.add_option("--momentum", c.momentum, "Momentum (momentum, nesterov, lars)")->check(CLI::Range(0.0, 0.9999))->capture_default_str();
    app.add_option("--weight-decay", c.weight_decay, "Weight decay")->check(CLI::NonNegativeNumber)->capture_default_str();
    app.add_option("--lars-eta", c.lars_eta, "LARS trust coefficient")->check(CLI::PositiveNumber)->capture_default_str();
    app.add_option("--seed", c.seed, "Seed of the model initialisation and the data order")->capture_default_str();
    app.add_option("--density", c.density, "Fraction sent by topk, dgc, randomk")->check(CLI::Range(1e-6, 1.0))->capture_default_str();
    app.add_option("--tau", c.threshold_tau, "Threshold of Strom's codec")->check(CLI::PositiveNumber)->capture_default_str();
    app.add_option("--onebit-group", c.onebit_group, "Elements per pair of onebit reconstruction values (0: whole bucket)")
        ->check([](const std::string& v) {
            return !v.empty() && v.size() < 12 && v.find_first_not_of("0123456789") == std::string::npos &&
                           std::stoull(v) % 8 == 0
                       ? std::string{}
                       : std::string("must be 0 or a positive multiple of 8");
        })
        ->capture_default_str();
    app.add_option("--terngrad-clip", c.terngrad_clip, "TernGrad clipping at c standard deviations (0: off)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    app.add_option("--qsgd-levels", c.qsgd_levels, "QSGD levels s")->check(CLI::Range(1u, 1u << 20))->capture_default_str();
    app.add_option("--powersgd-rank", c.powersgd_rank, "PowerSGD rank r")->check(CLI::Range(1, 64))->capture_default_str();
    app.add_option("--local-sgd-period", c.local_sgd_period, "Local steps between averages")->check(CLI::PositiveNumber)->capture_default_str();
    app.add_option("--bucket-mib", c.bucket_mib, "Gradient bucket size in MiB")->check(CLI::Range(1e-4, 1024.0))->capture_default_str();
    app.add_option("--checkpoint", c.checkpoint, "Write a checkpoint after every epoch (prefix; one file per rank)");
    app.add_option("--resume", c.resume, "Resume from a checkpoint prefix written by --checkpoint");
    app.add_option("--metrics", c.metrics, "Per-step metrics as JSON lines (rank 0; others append .rank<r>)");
    app.add_option("--timeline", c.timeline, "Chrome trace-event timeline (rank 0; others append .rank<r>)");
    app.add_option("--plot", c.plot, "Draw loss and test accuracy against time and epochs into this PNG");
    app.add_option("--data", c.data, "Directory of the data set")->capture_default_str();
    app.add_option("--threads", c.threads, "Run N ranks as threads of this process (comm::local) instead of MPI")
        ->check(CLI::Range(0, 64));
    app.add_option("--blas-threads", c.blas_threads, "OpenBLAS threads per rank")->check(CLI::Range(1, 64))->capture_default_str();
    app.add_flag("--synthetic", c.synthetic, "Random data of the data set's shape (measures throughput)");
    app.add_option("--synthetic-samples", c.synthetic_samples, "Training samples of --synthetic")->check(CLI::PositiveNumber);
    app.add_option("--max-steps", c.max_steps, "Stop after this many steps (0: all epochs)");
    app.add_flag("!--no-progress-bar", c.progress_bar, "Plain progress lines even on a terminal");
}

/// OpenBLAS 0.3.21 does not recognise some AVX-512 CPUs and falls back to slower kernels; it reads its kernel choice
/// (OPENBLAS_CORETYPE) only when it is loaded, so the program restarts itself once with the faster choice set.
/// Runs before MPI starts; an explicit OPENBLAS_CORETYPE is respected, and a failed restart just carries on.
inline void prefer_faster_blas_kernels(char** argv) {
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
    if (const auto core = nn::faster_blas_core()) {
        ::setenv("OPENBLAS_CORETYPE", core->c_str(), 1);
        ::execv("/proc/self/exe", argv);
    }
}

/// Runs the trainer; returns the process exit status.
inline int run_main(int argc, char** argv, const example_info& info, const task_factory& make_task) {
    prefer_faster_blas_kernels(argv);
    train_config config = info.defaults;
    config.example = info.example;
    CLI::App app{info.program + ": train an example model data-parallel with hitch"};
    add_options(app, config, info);
    std::vector<std::string> compare;
    app.add_option("--plot-compare", compare, "Only draw --plot from these metrics files (no training)")->check(CLI::ExistingFile);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    if (!compare.empty()) {
        if (config.plot.empty()) {
            std::cerr << info.program << ": --plot-compare needs --plot FILE.png\n";
            return 2;
        }
        try {
            plot_metrics(compare, config.plot);
        } catch (const std::exception& e) {
            std::cerr << info.program << ": " << e.what() << '\n';
            return 1;
        }
        std::printf("wrote %s\n", config.plot.c_str());
        return 0;
    }
    if (!config.plot.empty() && config.metrics.empty()) config.metrics = config.plot + ".metrics.jsonl";

    const bool on_threads = config.threads > 0;
    std::unique_ptr<hitch::comm::mpi_environment> env;
    if (!on_threads) env = std::make_unique<hitch::comm::mpi_environment>(argc, argv);
    int world_rank = 0, world_size = 1;
    if (!on_threads) {
        MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
        MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    } else {
        world_size = config.threads;
    }
    nn::set_blas_threads(config.blas_threads);

    try {
        std::shared_ptr<void> keep;
        const task t = make_task(config, keep);
        if (world_rank == 0)
            std::printf("%s: %s on %d %s, %zu training and %zu test samples, optimizer %s, compressor %s, sync %s, "
                        "all-reduce %s, BLAS kernels %s\n",
                        info.program.c_str(), config.model.c_str(), world_size, on_threads ? "threads" : "MPI ranks",
                        t.train->size(), t.test->size(), config.optimizer.c_str(), config.compressor.c_str(),
                        config.sync.c_str(), config.allreduce.c_str(), nn::blas_core().c_str());
        train_result result;
        if (on_threads) {
            result = hitch::comm::run_local(config.threads, [&](hitch::comm::local& comm) {
                train_config mine = config;
                mine.progress_bar = config.progress_bar && comm.rank() == 0;
                return train(comm, mine, t);
            })[0];
        } else {
            hitch::comm::mpi comm;
            result = train(comm, config, t);
        }
        if (world_rank == 0) {
            if (!config.plot.empty()) {
                plot_metrics({config.metrics}, config.plot);
                std::printf("wrote %s\n", config.plot.c_str());
            }
            nlohmann::ordered_json j;
            j["example"] = info.example;
            j["model"] = config.model;
            j["ranks"] = world_size;
            j["optimizer"] = config.optimizer;
            j["compressor"] = config.compressor;
            j["sync"] = config.sync;
            j["allreduce"] = config.allreduce;
            j["epochs"] = result.epochs_run;
            j["batch_size"] = config.batch_size;
            j["test_accuracy"] = result.test_accuracy;
            j["train_seconds"] = result.train_seconds;
            j["samples_per_s"] = result.samples_per_s;
            std::printf("%s\n", j.dump().c_str());
            std::fflush(stdout);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: rank %d: %s\n", info.program.c_str(), world_rank, e.what());
        std::fflush(stderr);
        if (!on_threads && world_size > 1) MPI_Abort(MPI_COMM_WORLD, 1);  // release the other ranks at once
        return 1;
    }
    return 0;
}

}  // namespace hitch_examples
