// Names -> the combination's training loop. The loops themselves are compiled in instantiate_*.cpp.
#include <stdexcept>

#include "hitch/comm/local.hpp"
#include "hitch/comm/mpi.hpp"
#include "registry.hpp"
#include "schedule_by_name.hpp"

namespace hitch_examples {

std::vector<std::string> optimizer_names() { return {"sgd", "momentum", "nesterov", "adam", "adamw", "lars", "lamb"}; }
std::vector<std::string> compressor_names() {
    return {"none", "fp16", "bf16", "onebit", "threshold", "topk", "dgc", "randomk", "qsgd", "terngrad", "powersgd"};
}
std::vector<std::string> sync_names() { return {"hard", "local_sgd"}; }
std::vector<std::string> lr_schedule_names() {
    return {"constant", "step", "multistep", "cosine", "polynomial", "onecycle", "cyclical"};
}

/// The optimizer type the run instantiates. DGC's momentum correction is the optimizer's momentum moved before the
/// sparsification (Lin et al. 2018), so "--optimizer momentum --compressor dgc" runs plain SGD on what DGC sends,
/// with DGC keeping the momentum (see make_compressor); stacking both momenta would square the step and diverge.
std::string optimizer_type_name(const train_config& c) { return c.compressor == "dgc" ? "sgd" : c.optimizer; }

void check_combination(const train_config& c, int ranks) {
    if (c.sync == "local_sgd" && c.compressor != "none")
        throw usage_error("--sync local_sgd averages parameters, not gradients; it takes --compressor none (got '" +
                          c.compressor + "')");
    if (c.compressor == "dgc" && c.optimizer != "sgd" && c.optimizer != "momentum" && c.optimizer != "nesterov")
        throw usage_error(
            "--compressor dgc applies momentum itself (momentum correction, Lin et al. 2018); it takes "
            "--optimizer sgd, momentum or nesterov (got '" +
            c.optimizer + "')");
    if (c.threads > 0 && c.allreduce == "native") throw usage_error(std::string(schedule_by_name::native_needs_mpi));
    if (c.slow_ms > 0.0 && c.slow_rank < 0)
        throw usage_error("--slow-ms " + detail::number_text(c.slow_ms) +
                          " needs --slow-rank R, the rank to slow down");
    if (ranks > 0 && c.slow_rank >= ranks)
        throw usage_error("--slow-rank " + std::to_string(c.slow_rank) + " is not a rank of this run: it has " +
                          std::to_string(ranks) +
                          (ranks == 1 ? " rank (0)" : " ranks (0 to " + std::to_string(ranks - 1) + ")"));
    if (ranks > 0 && c.batch_size % static_cast<std::size_t>(ranks) != 0)
        throw usage_error("--batch-size " + std::to_string(c.batch_size) + " does not split evenly over " +
                          std::to_string(ranks) + " ranks");
}

template <class C>
train_result train(C& comm, const train_config& c, const task& t) {
    check_combination(c, comm.size());
    return with_optimizer(optimizer_type_name(c), [&](auto o) {
        using O = typename decltype(o)::type;
        return with_sync(c.sync, [&](auto p) {
            using P = typename decltype(p)::type;
            if constexpr (std::is_same_v<P, hitch::sync::local_sgd>) {
                return train_with<O, hitch::compress::none, P, C>(comm, c, t);
            } else {
                return with_compressor(c.compressor, [&](auto x) -> train_result {
                    using X = typename decltype(x)::type;
                    if constexpr (std::is_same_v<X, hitch::compress::dgc> && !std::is_same_v<O, hitch::optim::sgd>)
                        throw std::logic_error("dgc runs with hitch::optim::sgd only (optimizer_type_name)");
                    else
                        return train_with<O, X, P, C>(comm, c, t);
                });
            }
        });
    });
}

template train_result train<hitch::comm::local>(hitch::comm::local&, const train_config&, const task&);
template train_result train<hitch::comm::mpi>(hitch::comm::mpi&, const train_config&, const task&);

}  // namespace hitch_examples
