// The GPU part of the -cuda trainers (--device cuda): the combinations hitch::data_parallel runs on the GPU, by
// name, registered at start-up so the shared command line (cli.cpp, registry.cpp) finds them. Linked only into the
// -cuda programs.
#include <string>
#include <type_traits>

#include "gpu/train_gpu.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/mpi.hpp"
#include "hitch/cuda/device.hpp"
#include "registry.hpp"

namespace hitch_examples {

namespace {

/// The combination `c` names (check_combination has accepted it).
template <class C>
train_result train_gpu(C& comm, const train_config& c, const task& t) {
    return with_sync(c.sync, [&](auto p) -> train_result {
        using P = typename decltype(p)::type;
        if constexpr (std::is_same_v<P, hitch::sync::hard>) {
            return with_compressor(c.compressor, [&](auto x) -> train_result {
                return train_gpu_with<typename decltype(x)::type, P, C>(comm, c, t);
            });
        } else if constexpr (std::is_same_v<P, hitch::sync::local_sgd>) {
            return train_gpu_with<hitch::compress::none, P, C>(comm, c, t);
        } else {
            throw usage_error(gpu_sync_refusal(c.sync));  // check_combination said so
        }
    });
}

const gpu_trainer table{&train_gpu<hitch::comm::local>, &train_gpu<hitch::comm::mpi>, &hitch::cuda::available};
[[maybe_unused]] const bool registered = [] {
    gpu_training() = &table;
    return true;
}();

}  // namespace

}  // namespace hitch_examples
