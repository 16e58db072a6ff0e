// The trainers' main(), compiled once for every trainer (see cli.hpp).
#include "cli.hpp"

#include <mpi.h>

#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "checkpoint_files.hpp"
#include "data/sampler.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/mpi.hpp"
#include "nn/blas.hpp"
#include "options.hpp"
#include "plot.hpp"
#include "summary.hpp"
#include "train.hpp"

namespace hitch_examples {

/// OpenBLAS 0.3.21 does not recognise some AVX-512 CPUs and falls back to slower kernels; it reads its kernel choice
/// (OPENBLAS_CORETYPE) only when it is loaded, so the program restarts itself once with the faster choice set.
/// Runs before MPI starts; an explicit OPENBLAS_CORETYPE is respected, and a failed restart just carries on.
static void prefer_faster_blas_kernels(char** argv) {
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
    if (const auto core = nn::faster_blas_core()) {
        ::setenv("OPENBLAS_CORETYPE", core->c_str(), 1);
        ::execv("/proc/self/exe", argv);
    }
}

namespace detail {

/// --device cuda in a program without the GPU part: runs the -cuda program beside it (hitch-mnist-cuda, built where
/// CMake finds CUDA) with the same arguments, before MPI starts (as prefer_faster_blas_kernels restarts). Returns
/// only when there is none, with the line that says so.
inline std::string run_gpu_program(char** argv, const std::string& program) {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    const std::filesystem::path gpu = (ec ? std::filesystem::path(argv[0]) : self).parent_path() / (program + "-cuda");
    if (std::filesystem::exists(gpu, ec)) {
        ::execv(gpu.c_str(), argv);
        return "--device cuda: cannot run " + gpu.string() + ": " + std::strerror(errno);
    }
    return "--device cuda needs " + gpu.string() + ", " + program +
           "'s GPU part, which is built where CMake finds CUDA and cuBLAS (cmake --build <build> --target " + program +
           "-cuda)";
}

/// --resume PREFIX --resume-ranks R: when PREFIX was written by p workers and this run has q != p, sets
/// resume_saved_ranks = p and, for keep-rank-batch, scales the global batch and the learning rate by q / p (each
/// worker keeps its batch: the linear rule of Goyal et al. 2017). Returns the line saying so (empty: nothing to
/// redistribute); throws usage_error where that cannot be done.
inline std::string plan_elastic_resume(train_config& config, int workers) {
    const auto found = hitch::train::checkpoint_files(config.resume);
    if (found.empty() || found.contains(workers)) return {};  // resume_problem says what is missing, or a plain resume
    const std::string head = "--resume " + config.resume + " --resume-ranks " + config.resume_ranks + ": ";
    if (found.size() > 1) {
        std::string counts;
        for (const auto& [p, ranks] : found) counts += (counts.empty() ? "" : ", ") + std::to_string(p);
        throw usage_error(head + "files of several rank counts (" + counts + ") share this prefix; keep one");
    }
    const int p = found.begin()->first;
    const auto q = static_cast<std::size_t>(workers);
    const std::string refused = "--resume-ranks " + config.resume_ranks + " on " + std::to_string(q) + " workers, " +
                                std::to_string(p) + " wrote it: ";
    if (config.zero != 0)
        throw usage_error(refused + "--zero " + std::to_string(config.zero) + "'s sharded state is not redistributed");
    if (config.sync != "hard" && config.sync != "local_sgd")
        throw usage_error(refused + "--sync " + config.sync +
                          "'s state is on its parameter server (hard or local_sgd)");
    if (config.device == "cuda") throw usage_error(refused + "a GPU run resumes on the ranks that wrote it");
    const std::size_t batch = config.batch_size;
    if (config.resume_ranks == "keep-rank-batch") {
        if (batch % static_cast<std::size_t>(p) != 0)
            throw usage_error(head + "--batch-size " + std::to_string(batch) + " does not split over the " +
                              std::to_string(p) + " workers that wrote the checkpoint: give the batch they ran");
        config.batch_size = batch / static_cast<std::size_t>(p) * q;
        config.lr *= static_cast<double>(q) / static_cast<double>(p);
    }
    config.resume_saved_ranks = p;
    return head + "the checkpoint of " + std::to_string(p) + " workers goes on on " + std::to_string(q) +
           ": global batch " + std::to_string(config.batch_size) + " (" + std::to_string(config.batch_size / q) +
           " a worker), learning rate " + number_text(config.lr);
}

/// The node each MPI rank runs on, as hitch's communicators see it (ranks that share memory, or the nodes of
/// HITCH_EMULATE_NODES): this rank's node, the node count and how many ranks each node runs.
struct placement {
    hitch::node_layout layout;
    int node = 0;

    [[nodiscard]] std::vector<int> ranks_per_node() const {
        std::vector<int> out(static_cast<std::size_t>(layout.nodes), 0);
        for (const int n : layout.node_of_rank) ++out[static_cast<std::size_t>(n)];
        return out;
    }
};
inline placement place_ranks(int rank, int size, bool on_threads) {
    placement out;
    if (on_threads) {
        out.layout.node_of_rank.assign(static_cast<std::size_t>(size), 0);
        out.layout.nodes = 1;
        return out;
    }
    hitch::comm::mpi world;
    out.layout = world.node_layout();
    out.node = out.layout.node_of(rank);
    return out;
}

/// `path` with every "{node}" replaced by `node` (per-node copies of the data or checkpoints at different paths).
inline std::string on_node(std::string path, int node) {
    static constexpr std::string_view key = "{node}";
    for (auto at = path.find(key); at != std::string::npos; at = path.find(key, at))
        path.replace(at, key.size(), std::to_string(node));
    return path;
}

/// Runs `f` on every rank; when it throws on any, the lowest such rank prints its line and every rank learns the
/// exit status (0: none failed). Collective over MPI_COMM_WORLD when `mpi`.
template <class F>
int agree_on_failure(bool mpi, int rank, int size, const std::string& program, F&& f) {
    int status = 0;
    std::string message;
    try {
        f();
    } catch (const usage_error& e) {
        status = exit_usage, message = e.what();
    } catch (const std::exception& e) {
        status = exit_failure, message = e.what();
    }
    if (!mpi) {
        if (status != 0) print_line(program, message);
        return status;
    }
    const int mine = status != 0 ? rank : size;
    int first = size;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == size) return 0;
    if (first == rank)
        print_line(program, size > 1 && rank > 0 ? "rank " + std::to_string(rank) + ": " + message : message);
    MPI_Bcast(&status, 1, MPI_INT, first, MPI_COMM_WORLD);
    return status;
}

}  // namespace detail

/// Runs the trainer; returns the process exit status.
int run_main(int argc, char** argv, const example_info& info, const task_factory& make_task) {
    prefer_faster_blas_kernels(argv);
    train_config config = info.defaults;
    config.example = info.example;
    CLI::App app{info.program + ": train an example model data-parallel with hitch"};
    add_options(app, config, info);
    std::vector<std::string> compare;
    app.add_option("--plot-compare", compare, "Only draw --plot from these metrics files (no training)")
        ->check(CLI::ExistingFile);
    const bool speaks = launcher_rank() == 0;  // every rank finds the same mistake on the command line
    try {
        app.parse(argc, argv);
        check_combination(config, config.threads);  // 0 ranks: not known before MPI starts
        if (!compare.empty() && config.plot.empty()) throw usage_error("--plot-compare needs --plot FILE.png");
        if (config.device == "cuda" && gpu_training() == nullptr)
            throw usage_error(detail::run_gpu_program(argv, info.program));
        if (config.device == "cuda" && !gpu_training()->available())
            throw usage_error("--device cuda: no CUDA device is present on this node");
    } catch (const CLI::CallForHelp& e) {
        return speaks ? app.exit(e) : 0;
    } catch (const CLI::CallForAllHelp& e) {
        return speaks ? app.exit(e) : 0;
    } catch (const CLI::ParseError& e) {
        if (speaks) print_line(info.program, std::string(e.what()) + " (--help lists the options)");
        return exit_usage;
    } catch (const usage_error& e) {
        if (speaks) print_line(info.program, e.what());
        return exit_usage;
    }
    if (!compare.empty()) {
        try {
            plot_metrics(compare, config.plot);
        } catch (const std::exception& e) {
            print_line(info.program, e.what());
            return exit_failure;
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
    const detail::placement where = detail::place_ranks(world_rank, world_size, on_threads);
    for (std::string* path : {&config.data, &config.checkpoint, &config.resume})
        *path = detail::on_node(*path, where.node);
    nn::set_blas_threads(config.blas_threads);

    std::shared_ptr<void> keep;
    task t;
    std::string elastic_line;  // --resume-ranks: how the checkpoint is redistributed
    const int status = detail::agree_on_failure(!on_threads, world_rank, world_size, info.program, [&] {
        // The batch --resume-ranks keep-rank-batch sets is the one every check below sees.
        if (config.resume_ranks != "same" && !config.resume.empty() && config.resume != "auto")
            elastic_line = detail::plan_elastic_resume(config, worker_count(config, world_size));
        check_combination(config, world_size);
        if (!config.resume.empty() && config.resume != "auto" && config.resume_saved_ranks == 0)
            if (const std::string problem =
                    resume_problem("--resume", config.resume, world_size, worker_count(config, world_size),
                                   where.layout.ranks_on(where.node));
                !problem.empty())
                throw usage_error(problem);
        t = make_task(config, keep);
        // Every worker has as many batches per epoch (data::sharded_sampler); --accumulate must not exceed them.
        const int workers = worker_count(config, world_size);
        const data::sharded_sampler sampler(t.train->size(), 0, workers, config.seed);
        (void)steps_of_epoch(config, sampler.batches_per_epoch(config.batch_size / static_cast<std::size_t>(workers)));
    });
    if (status != 0) return status;

    try {
        if (world_rank == 0 && !elastic_line.empty()) std::printf("%s\n", elastic_line.c_str());
        if (world_rank == 0) {
            const auto sync_opts = sync_options_json(config);
            const std::string sync = config.sync + (sync_opts.empty() ? "" : " " + sync_opts.dump());
            const int workers = worker_count(config, world_size);
            const std::string servers =
                workers == world_size ? "" : " (" + std::to_string(world_size - workers) + " of them servers only)";
            const std::string slow =
                config.slow_rank == -1 ? ""
                : config.slow_rank == train_config::any_rank
                    ? ", a random worker slowed by " + detail::number_text(config.slow_ms) + " ms each step"
                    : ", rank " + std::to_string(config.slow_rank) + " slowed by " +
                          detail::number_text(config.slow_ms) + " ms a step";
            std::printf(
                "%s: %s on %d %s%s, %zu training and %zu test samples, optimizer %s, compressor %s, sync %s, "
                "all-reduce %s, BLAS kernels %s%s\n",
                info.program.c_str(), config.model.c_str(), world_size, on_threads ? "threads" : "MPI ranks",
                servers.c_str(), t.train->size(), t.test->size(), config.optimizer.c_str(), config.compressor.c_str(),
                sync.c_str(), config.allreduce.c_str(), nn::blas_core().c_str(), slow.c_str());
        }
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
            const std::string line =
                summary_line(info.example, config, world_size, where.layout.nodes, where.ranks_per_node(), result);
            // The metrics file ends with the same line, so that it says what produced it (docs/metrics.md).
            if (!config.metrics.empty()) {
                std::ofstream metrics(config.metrics, std::ios::app);
                metrics << line << '\n';
                if (!metrics.flush()) throw std::runtime_error("--metrics: cannot write " + config.metrics);
            }
            if (!config.plot.empty()) {
                plot_metrics({config.metrics}, config.plot);
                std::printf("wrote %s\n", config.plot.c_str());
            }
            std::printf("%s\n", line.c_str());
            std::fflush(stdout);
        }
    } catch (const refused_configuration& e) {
        // Every rank has it and leaves through MPI_Finalize; on threads the one error rethrown is any rank's.
        if (on_threads || e.speaks()) print_line(info.program, e.what());
        return exit_usage;
    } catch (const std::exception& e) {
        print_line(info.program, on_threads ? e.what() : "rank " + std::to_string(world_rank) + ": " + e.what());
        if (!on_threads && world_size > 1) {
            // MPI_Abort ends the launcher's readers of this process's output with it: give them a moment.
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
            MPI_Abort(MPI_COMM_WORLD, exit_failure);  // release the other ranks at once
        }
        return exit_failure;
    }
    return 0;
}

}  // namespace hitch_examples
