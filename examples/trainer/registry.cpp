// Names -> the combination's training loop. The loops themselves are compiled in instantiate_*.cpp.
#include <stdexcept>
#include <string>
#include <type_traits>

#include "hitch/comm/local.hpp"
#include "hitch/comm/mpi.hpp"
#include "registry.hpp"
#include "schedule_by_name.hpp"

namespace hitch_examples {

std::vector<std::string> optimizer_names() { return {"sgd", "momentum", "nesterov", "adam", "adamw", "lars", "lamb"}; }
std::vector<std::string> compressor_names() {
    return {"none", "fp16", "bf16", "onebit", "threshold", "topk", "dgc", "randomk", "qsgd", "terngrad", "powersgd"};
}
std::vector<std::string> sync_names() {
    return {"hard", "local_sgd", "soft", "async", "ssp", "easgd", "backup", "hogwild"};
}
std::vector<std::string> lr_schedule_names() {
    return {"constant", "step", "multistep", "cosine", "polynomial", "onecycle", "cyclical"};
}

/// The optimizer type the run instantiates. DGC's momentum correction is the optimizer's momentum moved before the
/// sparsification (Lin et al. 2018), so "--optimizer momentum --compressor dgc" runs plain SGD on what DGC sends,
/// with DGC keeping the momentum (see make_compressor); stacking both momenta would square the step and diverge.
std::string optimizer_type_name(const train_config& c) { return c.compressor == "dgc" ? "sgd" : c.optimizer; }

bool uses_server(const train_config& c) {
    return c.sync == "soft" || c.sync == "async" || c.sync == "ssp" || c.sync == "backup" ||
           (c.sync == "easgd" && c.easgd_form == "asynchronous");
}

int worker_count(const train_config& c, int ranks) {
    return uses_server(c) && c.server_placement == "dedicated" ? ranks - c.dedicated_servers : ranks;
}

double lr_scale(const train_config& c, int workers) {
    const double w = static_cast<double>(workers);
    if (c.sync == "soft") return c.soft_c == 0 ? 1.0 : static_cast<double>(c.soft_c) / w;
    if (c.sync == "backup") return (w - static_cast<double>(c.backups)) / w;
    if (c.sync == "async" || c.sync == "ssp" || c.sync == "hogwild") return 1.0 / w;
    return 1.0;
}

epoch_steps steps_of_epoch(const train_config& c, std::size_t micro_batches) {
    if (micro_batches < c.accumulate)
        throw usage_error("--accumulate " + std::to_string(c.accumulate) + " exceeds the " +
                          std::to_string(micro_batches) + " batches each worker has per epoch (--batch-size " +
                          std::to_string(c.batch_size) + " split over the workers)");
    const std::size_t steps = micro_batches / c.accumulate;
    return {steps, steps * c.accumulate};
}

const gpu_trainer*& gpu_training() noexcept {
    static const gpu_trainer* registered = nullptr;
    return registered;
}

std::string gpu_sync_refusal(const std::string& sync) {
    return "--device cuda runs --sync hard or local_sgd (hitch::data_parallel refuses the others on a GPU: their "
           "parameter server or shared parameter array is host code); --sync " +
           sync + " runs with --device cpu";
}

void check_combination(const train_config& c, int ranks) {
    if (c.device == "cuda") {
        if (c.example != "mnist" || c.model != "mlp")
            throw usage_error("--device cuda trains hitch-mnist's --model mlp (its dense layers on cuBLAS); --model " +
                              c.model + " runs with --device cpu");
        if (c.sync != "hard" && c.sync != "local_sgd") throw usage_error(gpu_sync_refusal(c.sync));
    }
    if (c.sync == "local_sgd" && c.compressor != "none")
        throw usage_error("--sync local_sgd averages parameters, not gradients; it takes --compressor none (got '" +
                          c.compressor + "')");
    if (c.sync != "hard" && c.compressor != "none")
        throw usage_error("--sync " + c.sync + " takes --compressor none (got '" + c.compressor +
                          "'): the trainers compress only hard sync's gradient all-reduce");
    if (c.sync == "hogwild" && c.threads == 0)
        throw usage_error(
            "--sync hogwild updates one parameter array shared by the threads of one process: it needs --threads N, "
            "not MPI ranks");
    if (c.server_placement == "dedicated" && !uses_server(c))
        throw usage_error(
            "--server-placement dedicated needs a parameter-server policy (--sync soft, async, ssp, "
            "backup, or easgd with --easgd-form asynchronous), not --sync " +
            c.sync + (c.sync == "easgd" ? " --easgd-form " + c.easgd_form : ""));
    if (c.compressor == "dgc" && c.optimizer != "sgd" && c.optimizer != "momentum" && c.optimizer != "nesterov")
        throw usage_error(
            "--compressor dgc applies momentum itself (momentum correction, Lin et al. 2018); it takes "
            "--optimizer sgd, momentum or nesterov (got '" +
            c.optimizer + "')");
    if (c.threads > 0 && c.allreduce == "native") throw usage_error(std::string(schedule_by_name::native_needs_mpi));
    with_compressor(c.compressor, [&](auto codec) {
        namespace x = hitch::compress;
        constexpr x::aggregation_path path = x::aggregation_path_of<typename decltype(codec)::type>;
        if (!x::exchange_for(path, schedule_by_name::exchange_shape(c.allreduce)))
            throw usage_error("--compressor " + c.compressor + " does not go with --allreduce " + c.allreduce + ": " +
                              c.compressor + " goes with " + std::string(x::schedules_for(path)));
    });
    if (c.checkpoint_every > 0 && c.checkpoint.empty())
        throw usage_error("--checkpoint-every " + std::to_string(c.checkpoint_every) +
                          " needs --checkpoint PREFIX, where the checkpoints go");
    if (c.resume == "auto" && c.checkpoint.empty())
        throw usage_error("--resume auto looks for checkpoints under --checkpoint PREFIX: give it");
    if (c.resume_ranks != "same") {
        if (c.resume.empty() || c.resume == "auto")
            throw usage_error("--resume-ranks " + c.resume_ranks +
                              " redistributes the checkpoint --resume PREFIX names; --resume auto restarts on the "
                              "number of workers that wrote its sets");
    }
    if (c.slow_ms > 0.0 && c.slow_rank == -1)
        throw usage_error("--slow-ms " + detail::number_text(c.slow_ms) +
                          " needs --slow-rank R, the rank to slow down");
    if (ranks > 0 && c.slow_rank >= ranks)
        throw usage_error("--slow-rank " + std::to_string(c.slow_rank) + " is not a rank of this run: it has " +
                          std::to_string(ranks) +
                          (ranks == 1 ? " rank (0)" : " ranks (0 to " + std::to_string(ranks - 1) + ")"));
    if (ranks <= 0) return;
    if (uses_server(c) && c.server_placement == "dedicated" && c.dedicated_servers >= ranks)
        throw usage_error("--servers " + std::to_string(c.dedicated_servers) + " leaves no worker among " +
                          std::to_string(ranks) + " ranks (at most " + std::to_string(ranks - 1) + ")");
    const int workers = worker_count(c, ranks);
    const std::string of_workers =
        workers == ranks ? " ranks"
        : workers + 1 == ranks
            ? " workers (rank " + std::to_string(workers) + " only serves)"
            : " workers (ranks " + std::to_string(workers) + " to " + std::to_string(ranks - 1) + " only serve)";
    if (c.slow_rank >= workers)
        throw usage_error("--slow-rank " + std::to_string(c.slow_rank) +
                          " is a dedicated server rank; slow a worker (0 to " + std::to_string(workers - 1) + ")");
    if (c.sync == "soft" && c.soft_c > static_cast<std::uint32_t>(workers))
        throw usage_error("--soft-c " + std::to_string(c.soft_c) + " exceeds the " + std::to_string(workers) +
                          of_workers + ": an update would wait for gradients that never come");
    if (c.sync == "backup" && c.backups >= static_cast<std::uint32_t>(workers))
        throw usage_error("--backups " + std::to_string(c.backups) + " must be fewer than the " +
                          std::to_string(workers) + of_workers);
    if (c.batch_size % static_cast<std::size_t>(workers) != 0)
        throw usage_error("--batch-size " + std::to_string(c.batch_size) + " does not split evenly over " +
                          std::to_string(workers) + of_workers);
}

template <class C>
train_result train(C& comm, const train_config& c, const task& t) {
    check_combination(c, comm.size());
    if (c.device == "cuda") {
        const gpu_trainer* gpu = gpu_training();
        if (gpu == nullptr)  // run_main re-executes the -cuda program before it gets here
            throw usage_error("--device cuda: this program has no GPU part");
        if constexpr (std::is_same_v<C, hitch::comm::local>)
            return gpu->local(comm, c, t);
        else
            return gpu->mpi(comm, c, t);
    }
    return with_sync(c.sync, [&](auto p) -> train_result {
        using P = typename decltype(p)::type;
        if constexpr (hitch::shared_memory_policy<P> && !hitch::shares_address_space<C>) {
            throw usage_error("--sync hogwild needs --threads N, not MPI ranks");  // check_combination said so
        } else if constexpr (!std::is_same_v<P, hitch::sync::hard>) {
            return train_with<hitch::compress::none, P, C>(comm, c, t);
        } else {
            return with_compressor(c.compressor, [&](auto x) -> train_result {
                return train_with<typename decltype(x)::type, P, C>(comm, c, t);
            });
        }
    });
}

template train_result train<hitch::comm::local>(hitch::comm::local&, const train_config&, const task&);
template train_result train<hitch::comm::mpi>(hitch::comm::mpi&, const train_config&, const task&);

}  // namespace hitch_examples
