#pragma once
// The example trainers' shared part: the configuration the command line fills, the data and model a trainer
// hands over, and the training loop, instantiated at compile time for each (optimizer, compressor, sync policy,
// communicator) combination and chosen by name at run time. hitch-mnist and hitch-cifar differ only in their data
// and models.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "nn/model.hpp"
#include "option_values.hpp"

namespace hitch::comm {
class local;
class mpi;
}  // namespace hitch::comm

namespace hitch_examples {

/// Everything the command line sets (see add_options in cli.hpp for the flags and their meaning).
struct train_config {
    std::string example = "mnist";
    std::string model = "mlp";
    std::string optimizer = "momentum";
    std::string compressor = "none";
    std::string sync = "hard";
    std::string allreduce = "automatic";
    std::string lr_schedule = "cosine";
    std::size_t batch_size = 128;  // global: split evenly over the ranks
    std::size_t epochs = 10;
    double lr = 0.1;  // for the global batch
    double warmup_epochs = 0.0;
    double momentum = 0.9;
    double weight_decay = 5e-4;
    double lars_eta = 0.001;
    std::uint64_t seed = 1;
    // compressors and sync policies
    double density = 0.01;
    double threshold_tau = 0.1;      // Fashion-MNIST MLP sweep 1e-4 .. 0.4: best near 0.1-0.2 (docs/benchmarks.md)
    std::size_t onebit_group = 512;  // elements per pair of reconstruction values (Seide et al.: one per column)
    unsigned qsgd_levels = 7;
    double terngrad_clip = 2.5;  // TernGrad's gradient clipping at c standard deviations (the paper: 2.5)
    std::size_t powersgd_rank = 2;
    std::uint64_t local_sgd_period = 8;
    double block_momentum = 0.0;        // local_sgd: BMUF's block momentum (0: plain model averaging)
    double block_lr = 1.0;              // local_sgd: BMUF's block learning rate
    std::string block_nesterov = "on";  // local_sgd: BMUF's Nesterov-like start of each block
    // parameter-server policies (soft, async, ssp, backup, easgd asynchronous)
    std::string server_placement = "colocated";  // or "dedicated": the last --servers ranks only serve
    int dedicated_servers = 1;
    std::string shard_by = "layer";
    bool deterministic = false;
    std::uint32_t soft_c = 1;  // gradients per update (0: as many as workers)
    std::string staleness_scaling = "on";
    std::uint64_t fetch_every = 1;
    std::uint64_t push_every = 1;
    std::uint64_t ssp_bound = 3;
    std::uint64_t easgd_period = 4;
    double easgd_alpha = 0.0;  // 0: 0.9 / workers (the paper's beta = 0.9)
    std::string easgd_form = "asynchronous";
    std::uint32_t backups = 1;
    double bucket_mib = 25.0;
    // the optimizer step
    std::uint64_t accumulate = 1;  // micro-batches (of --batch-size each) per optimizer step
    double clip_grad_norm = 0.0;   // global L2 norm the gradients are scaled down to (0: off)
    unsigned zero = 0;             // ZeRO stage: 0 off, 1 optimizer state sharded, 2 gradients reduce-scattered too
    // files
    std::string checkpoint;
    /// Also checkpoint every this many optimizer steps (0: at the end of each epoch only). Then each save is its own
    /// set, "<checkpoint>.step<S>", and the three newest are kept (after a kill during a save, when one rank may be a
    /// set ahead, at least two are then common to every rank).
    std::size_t checkpoint_every = 0;
    std::string resume;  // a prefix, or "auto": the newest usable set under --checkpoint (none: start afresh)
    /// --resume PREFIX written by another number of workers: "same" (refused), "keep-global-batch" (the batch per
    /// worker becomes batch / q) or "keep-rank-batch" (the batch per worker stays, the global batch and the rate
    /// scale by q / p: the linear rule). run_main sets resume_saved_ranks to p when it differs from q.
    std::string resume_ranks = "same";
    int resume_saved_ranks = 0;
    std::string metrics;
    std::string timeline;
    std::string plot;
    std::string data;
    // execution
    std::string device = "cpu";  // "cuda": the MLP and data_parallel on a GPU (the -cuda program, gpu/)
    int threads = 0;             // ranks as threads (comm::local); 0: MPI ranks
    int blas_threads = 1;
    bool synthetic = false;
    std::size_t synthetic_samples = 8192;
    bool progress_bar = true;
    std::size_t max_steps = 0;   // stop after this many steps (0: run every epoch)
    std::size_t eval_every = 0;  // also evaluate every this many steps (0: at the end of each epoch only)
    // a deliberately slow worker, to see what each sync policy does with a straggler
    int slow_rank = -1;    // the rank that sleeps after every backward pass (-1: none; any_rank: a random one)
    double slow_ms = 0.0;  // milliseconds it sleeps
    /// Report a collective that has waited this many seconds for ranks that have not come (hitch's stall inspector,
    /// on rank 0; 0: off); -1: HITCH_STALL_WARNING_S, else 5.
    double stall_warning_s = -1.0;
    /// --slow-rank any: each step one worker drawn at random (the same draw on every rank) is the straggler.
    static constexpr int any_rank = -2;
};

/// What a run reports; the trainer prints it as its last line.
struct train_result {
    double test_accuracy = 0.0;
    double train_seconds = 0.0;
    double samples_per_s = 0.0;
    std::size_t epochs_run = 0;
    /// What carried the gradients (or, under local SGD, the parameters) between the ranks, in the order of first
    /// use: the all-reduce schedules that ran (`automatic` resolved to its picks), or the compressed exchange
    /// (compressed_ring, sparse_recursive_doubling, ...: hitch::compress::exchange_kind). Empty on one rank.
    std::vector<std::string> exchange;
    /// The exchange each gradient bucket's last step ran (hitch::data_parallel::bucket_exchanges).
    std::vector<std::string> bucket_exchanges;
    /// The sync policy's staleness after each step (data_parallel::staleness()), over every step of every rank:
    /// the mean and the largest.
    double staleness_mean = 0.0;
    std::uint64_t staleness_max = 0;
    /// Gradients of every worker that a backup-workers step dropped (data_parallel::dropped_gradients()).
    std::uint64_t dropped_gradients = 0;
    /// Bytes of optimizer state rank 0 holds (data_parallel::optimizer_state_bytes(): about 1/p of it under --zero).
    std::size_t optimizer_state_bytes = 0;
};

/// A configuration hitch::data_parallel refused (config_error) on every rank alike, which the ranks agreed on:
/// `speaks` on the lowest rank that refused it, which alone prints the line (exit status 2, no rank aborted).
class refused_configuration : public usage_error {
public:
    refused_configuration(const std::string& what, bool speaks) : usage_error(what), speaks_(speaks) {}
    [[nodiscard]] bool speaks() const noexcept { return speaks_; }

private:
    bool speaks_;
};

/// What a trainer tells the command line about itself.
struct example_info {
    std::string program;              // "hitch-mnist"
    std::string example;              // "mnist"
    std::vector<std::string> models;  // {"mlp", "cnn"}
    train_config defaults;
};

/// The data and model a trainer trains.
struct task {
    const data::dataset* train = nullptr;
    const data::dataset* test = nullptr;
    data::normalization norm;
    /// Builds the model for a per-rank batch of `max_batch` from `seed` (identical on every rank).
    std::function<nn::model<float>(std::size_t max_batch, std::uint64_t seed)> build;
};

/// The training loop for one (compressor, sync policy, communicator); the optimizer is chosen at run time
/// (any_optimizer in registry.hpp). Defined in train_impl.hpp, instantiated in instantiate_*.cpp.
template <class Compressor, class SyncPolicy, class Communicator>
train_result train_with(Communicator& comm, const train_config& config, const task& t);

/// Runs the combination `config` names on `comm` (hitch::comm::local or hitch::comm::mpi). Throws
/// std::invalid_argument listing the valid names when one is unknown.
template <class Communicator>
train_result train(Communicator& comm, const train_config& config, const task& t);

/// The GPU's training loops (--device cuda), by communicator. A program built with the GPU part (hitch-mnist-cuda:
/// examples/trainer/gpu/, linked only where CMake finds CUDA) registers them at start-up; in the others
/// gpu_training() stays null and --device cuda re-executes the -cuda program beside them (cli.cpp).
struct gpu_trainer {
    train_result (*local)(hitch::comm::local&, const train_config&, const task&);
    train_result (*mpi)(hitch::comm::mpi&, const train_config&, const task&);
    /// Whether this process sees a CUDA device (asked before MPI starts).
    bool (*available)();
};
const gpu_trainer*& gpu_training() noexcept;

/// The one line refusing --sync `sync` with --device cuda.
std::string gpu_sync_refusal(const std::string& sync);

/// Throws usage_error naming both sides when options that each make sense cannot work together (a policy that
/// exchanges no gradients with a compressor, DGC with a second momentum, MPI's own all-reduce or Hogwild on the
/// wrong kind of ranks, a batch that does not split over the workers of `ranks`, a --slow-rank that is not one of
/// them, dedicated servers that leave no worker; 0: not known yet). train() checks it first.
void check_combination(const train_config& config, int ranks);

/// Optimizer steps per epoch and the micro-batches an epoch uses: with --accumulate K an optimizer step takes K of
/// the `micro_batches` batches each worker has per epoch, and the last (micro_batches mod K) are left out, so that
/// every epoch is whole optimizer steps. Throws usage_error when an epoch has fewer than K batches.
struct epoch_steps {
    std::size_t steps = 0;
    std::size_t micro_batches = 0;
};
epoch_steps steps_of_epoch(const train_config& config, std::size_t micro_batches);

/// Whether --sync runs hitch's parameter server (soft, async, ssp, backup, and easgd in its asynchronous form).
bool uses_server(const train_config& config);

/// The ranks that train: `ranks` less the dedicated server ranks (the last ones).
int worker_count(const train_config& config, int ranks);

/// What the learning rate is multiplied by for --sync: --lr is the rate for the global batch of `workers` local
/// batches, and by the linear scaling rule (Goyal et al. 2017) an update that applies fewer local batches at once
/// gets a proportionally smaller rate: c / workers under soft (c gradients averaged), (workers - b) / workers
/// under backup, 1 / workers under async, ssp and hogwild (one local batch per update). 1 for the policies whose
/// updates average every worker (hard) or step each replica on its own batch and average the replicas (local_sgd,
/// easgd: the average of p replicas each stepped at rate lr is one step at lr on the mean gradient).
double lr_scale(const train_config& config, int workers);

/// The names each flag accepts.
std::vector<std::string> optimizer_names();
std::vector<std::string> compressor_names();
std::vector<std::string> sync_names();
std::vector<std::string> lr_schedule_names();

}  // namespace hitch_examples
