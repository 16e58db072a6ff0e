#pragma once
// hitch::data_parallel<Optimizer, Compressor, SyncPolicy, Schedule>: data-parallel training of a model you
// already have. You give it the communicator, the device, the model's layers (parameter and gradient views with
// names) and typed options; per step you call gradient_ready(i) as backward finishes layer i (optional, to
// overlap communication with the rest of backward) and then step().
//
//   using dp_t = hitch::data_parallel<hitch::optim::lars<hitch::optim::momentum>,
//                                     hitch::compress::none, hitch::sync::hard, hitch::allreduce::ring>;
//   dp_t::options opts;
//   opts.learning_rate = hitch::lr::warmup(hitch::lr::polynomial({...}), {...});
//   dp_t dp(comm, device, layers, opts);
//   for (...) { forward(); backward([&](std::size_t i) { dp.gradient_ready(i); }); dp.step(loss); }
//
// One step, as data flows:
//   gradients, layer by layer -> unscale (loss scaler) and check finiteness, on this rank
//     -> fusion buckets (a fixed plan, as DDP's reducer; bucket k starts only after buckets < k)
//     -> compressor encode (per-bucket state: residuals, momentum ...) -> all-reduce or all-gather -> decode
//     -> average over ranks -> sync policy -> optimizer (per layer) -> learning-rate schedule ticks
// Bucket exchanges run on a worker thread while backward continues. Every rank agrees whether the step is
// applied (a gradient overflowed under loss scaling, or was not finite): a skipped step is skipped everywhere
// and leaves parameters and optimizer state bitwise unchanged.
//
// The constructor checks that every rank has the same layers (count, names, sizes, element types, matrix rows,
// flags) and throws mismatch_error naming the ranks and layers that differ; then every rank takes rank 0's
// parameters (options.broadcast_parameters). A layer that never got gradient_ready in a step where
// others did is config_error naming it, at step() (or, with find_unused_layers, a zero gradient). Checkpoints
// (save/load) resume exactly (train/checkpoint.hpp).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/allreduce/automatic.hpp"
#include "hitch/amp/mixed_precision.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/concepts/device.hpp"
#include "hitch/concepts/optimizer.hpp"
#include "hitch/concepts/sync_policy.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/train/checkpoint.hpp"
#include "hitch/train/engine.hpp"
#include "hitch/train/engine_interface.hpp"
#include "hitch/train/metrics.hpp"
#include "hitch/train/options.hpp"

namespace hitch {

/// Data-parallel training with the optimizer, compressor, sync policy and all-reduce schedule as template
/// arguments (see the file comment). Move-only.
template <class Optimizer, class Compressor = compress::none, class SyncPolicy = sync::hard,
          class Schedule = allreduce::automatic>
class data_parallel {
    static_assert(check_optimizer<Optimizer>());
    static_assert(check_compressor<Compressor>());
    static_assert(check_sync_policy<SyncPolicy>());

public:
    using options = data_parallel_options<Optimizer, Compressor, SyncPolicy, Schedule>;
    using optimizer_type = Optimizer;
    using compressor_type = Compressor;
    using sync_policy_type = SyncPolicy;
    using schedule_type = Schedule;

    /// An FP32 model. Collective: every rank of `comm` constructs it with the same layers.
    template <class C, class D, bool = check_communicator<C>() && check_device<D>()>  // before the engine names them
    data_parallel(C& comm, D& dev, std::vector<hitch::layer> layers, const options& opts = {})
        : engine_(std::make_unique<train::detail::engine<Optimizer, Compressor, SyncPolicy, Schedule, C, D, float>>(
              comm, dev, std::move(layers), opts)) {}

    /// An FP16 or BF16 model: data_parallel keeps FP32 master weights and gradients, steps the masters and
    /// writes the rounded low-precision parameters back (Micikevicius et al. 2018).
    template <communicator C, device D, floating_element Low>
        requires(!std::same_as<Low, float> && !std::same_as<Low, double>)
    data_parallel(C& comm, D& dev, std::vector<amp::low_precision_layer<Low>> layers, const options& opts = {})
        : engine_(std::make_unique<train::detail::engine<Optimizer, Compressor, SyncPolicy, Schedule, C, D, Low>>(
              comm, dev, std::move(layers), opts)) {}

    /// Layer i's gradient is final: its bucket joins the exchange as soon as the bucket is complete.
    void gradient_ready(std::size_t layer) { engine_->gradient_ready(layer); }
    /// Finishes the exchange, applies the optimizer as the sync policy says, ticks the schedules. Collective.
    /// With options.accumulation_steps = K, call it after every micro-batch: the first K - 1 calls of a window only
    /// add the gradients up (the record says accumulated) and the K-th steps on their mean.
    train::step_metrics step(std::optional<double> loss = std::nullopt) { return engine_->step(loss); }
    /// Whether the next step() ends an accumulation window (exchanges and applies): DeepSpeed's
    /// is_gradient_accumulation_boundary(). Always true without accumulation.
    [[nodiscard]] bool accumulation_boundary() const { return engine_->accumulation_boundary(); }

    /// Registers buffers: state that is not a parameter but must agree across ranks, such as batch-norm running
    /// statistics (train/buffers.hpp). Every rank takes rank 0's values now; after every synchronised step each
    /// buffer gets rank 0's values (buffer_sync::broadcast, DDP's broadcast_buffers) or the mean over ranks
    /// (buffer_sync::average). Collective: every rank registers the same names, sizes and kinds, or mismatch_error
    /// names the differences. Between steps only; asynchronous sync policies refuse it (config_error).
    void register_buffers(std::vector<train::buffer> buffers) { engine_->register_buffers(std::move(buffers)); }

    /// Writes a checkpoint to "<prefix>.rank<r>-of-<p>" (each rank its own file, atomically), with sections of
    /// your own (data position, RNG state ...; names must not start with "hitch.").
    void save(const std::filesystem::path& prefix,
              const std::vector<std::pair<std::string, std::vector<std::byte>>>& extra = {}) {
        engine_->save(prefix, extra);
    }
    /// Restores a checkpoint written by save() under the same configuration; returns the reader so you can read
    /// your own sections. A corrupt file is corrupt_message_error, another configuration mismatch_error; either
    /// way nothing changes. Under a shared-memory policy (sync::hogwild) it is collective: rank 0's loaded
    /// parameters refill the shared array. With how.elastic, a checkpoint of another rank count loads too
    /// (train/elastic.hpp says what becomes of each part of the state; train::saved_ranks(prefix) tells its rank
    /// count, for the caller's choice of batch and learning rate); rank r gets the reader of saved rank r mod p.
    train::checkpoint_reader load(const std::filesystem::path& prefix, const train::load_options& how = {}) {
        return engine_->load(prefix, how);
    }
    [[nodiscard]] std::filesystem::path checkpoint_path(const std::filesystem::path& prefix) const {
        return engine_->checkpoint_path(prefix);
    }

    /// The learning rate the next step will use.
    [[nodiscard]] double learning_rate() const { return engine_->learning_rate(); }
    /// Multiply the loss by this before backward (1 without loss scaling).
    [[nodiscard]] float loss_scale() const { return engine_->loss_scale(); }
    /// Steps taken so far (applied or skipped).
    [[nodiscard]] std::uint64_t step_index() const { return engine_->step_index(); }
    [[nodiscard]] std::uint64_t staleness() const { return engine_->staleness(); }
    /// How many applied steps had each staleness (index: staleness in steps or parameter versions; the last
    /// entry also counts everything staler). Trailing zeros are trimmed.
    [[nodiscard]] std::vector<std::uint64_t> staleness_histogram() const { return engine_->staleness_histogram(); }
    /// This rank's gradients that a backup-workers step dropped.
    [[nodiscard]] std::uint64_t dropped_gradients() const { return engine_->dropped_gradients(); }
    /// Parameter-server policies with dedicated servers: this rank only serves; call serve() instead of training.
    [[nodiscard]] bool serves_only() const { return engine_->serves_only(); }
    /// Ranks that train (the ranks less the dedicated servers).
    [[nodiscard]] int worker_count() const { return engine_->worker_count(); }
    /// A dedicated server rank: serves until every worker has finished.
    void serve() { engine_->serve(); }
    /// A worker is done training: the parameter servers stop counting it (and a co-located server serves the
    /// other workers until they finish too). Also done by the destructor; call it to see its errors.
    void finish() { engine_->finish(); }
    /// This rank's data ran out (options.uneven_inputs): takes part in the other ranks' steps with zero gradients,
    /// applying the same updates, until every rank has called join(); then every rank is at the same step with the
    /// same parameters. Call it at an accumulation boundary, on every rank (the last to run out too).
    void join() { engine_->join(); }
    [[nodiscard]] int rank() const { return engine_->rank(); }
    [[nodiscard]] int size() const { return engine_->size(); }
    /// This rank's place among the ranks of its node and how many run there (Horovod's local_rank() and
    /// local_size()), from the communicator's node layout; a communicator without one counts as a node per rank.
    [[nodiscard]] int local_rank() const { return engine_->nodes().local_rank(rank()); }
    [[nodiscard]] int local_size() const { return engine_->nodes().local_size(rank()); }
    /// Nodes (machines) the ranks run on.
    [[nodiscard]] int node_count() const { return engine_->nodes().nodes; }
    [[nodiscard]] std::size_t bucket_count() const { return engine_->bucket_count(); }
    /// The exchange that carried each bucket's last step (compress::exchange_kind's names: "allreduce" for an
    /// all-reduce of the gradients or of an additive codec's elements, "sparse_recursive_doubling", ...); empty for
    /// a bucket not exchanged yet, or reduce-scattered under ZeRO stage 2.
    [[nodiscard]] std::vector<std::string_view> bucket_exchanges() const { return engine_->bucket_exchanges(); }
    /// Bytes of optimizer state this rank holds (about 1/p of the whole under options.zero_stage).
    [[nodiscard]] std::size_t optimizer_state_bytes() const { return engine_->optimizer_state_bytes(); }
    /// Bytes of FP32 master parameters this rank holds beside an FP16 or BF16 model (0 for an FP32 model).
    [[nodiscard]] std::size_t master_weight_bytes() const { return engine_->master_weight_bytes(); }
    /// CRC32C of the parameters (equal on every rank under hard sync).
    [[nodiscard]] std::uint64_t parameter_hash() const { return engine_->parameter_hash(); }

private:
    std::unique_ptr<train::detail::engine_base> engine_;
};

}  // namespace hitch
