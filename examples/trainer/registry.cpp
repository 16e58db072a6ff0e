// Names -> the combination's training loop. The loops themselves are compiled in instantiate_*.cpp.
#include <stdexcept>

#include "hitch/comm/local.hpp"
#include "hitch/comm/mpi.hpp"
#include "registry.hpp"

namespace hitch_examples {

std::vector<std::string> optimizer_names() { return {"sgd", "momentum", "nesterov", "adam", "adamw", "lars", "lamb"}; }
std::vector<std::string> compressor_names() {
    return {"none", "fp16", "bf16", "onebit", "threshold", "topk", "dgc", "randomk", "qsgd", "terngrad", "powersgd"};
}
std::vector<std::string> sync_names() { return {"hard", "local_sgd"}; }
std::vector<std::string> lr_schedule_names() {
    return {"constant", "step", "multistep", "cosine", "polynomial", "onecycle", "cyclical"};
}

template <class C>
train_result train(C& comm, const train_config& c, const task& t) {
    return with_optimizer(c.optimizer, [&](auto o) {
        using O = typename decltype(o)::type;
        return with_sync(c.sync, [&](auto p) {
            using P = typename decltype(p)::type;
            if constexpr (std::is_same_v<P, hitch::sync::local_sgd>) {
                if (c.compressor != "none")
                    throw std::invalid_argument("--sync local_sgd averages parameters, not gradients; it takes "
                                                "--compressor none (got '" + c.compressor + "')");
                return train_with<O, hitch::compress::none, P, C>(comm, c, t);
            } else {
                return with_compressor(c.compressor, [&](auto x) {
                    using X = typename decltype(x)::type;
                    return train_with<O, X, P, C>(comm, c, t);
                });
            }
        });
    });
}

template train_result train<hitch::comm::local>(hitch::comm::local&, const train_config&, const task&);
template train_result train<hitch::comm::mpi>(hitch::comm::mpi&, const train_config&, const task&);

}  // namespace hitch_examples
