// Must NOT compile: mixed_precision_optimizer on cuda::device in a file that did not include the GPU's
// mixed-precision kernels (hitch/cuda/amp/mixed_precision.cuh). The error must say which header to include.
#include <vector>

#include "hitch/amp/mixed_precision.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/optim/sgd.hpp"

namespace hitch::optim {
// The optimizer's own kernels are present (a stand-in, so that only the missing amp kernels are reported).
template <>
struct device_step<sgd, cuda::device> {
    static void step(const sgd&, const layer&, sgd::state_type<cuda::device>&, float, const parallel_options&) {}
    using plan = per_layer_plan<sgd, cuda::device>;
};
}  // namespace hitch::optim

int main() {
    hitch::cuda::device dev;
    hitch::amp::mixed_precision_optimizer<hitch::optim::sgd, hitch::half, hitch::amp::single_process,
                                          hitch::cuda::device>
        opt({}, std::vector<hitch::amp::low_precision_layer<hitch::half>>{}, dev);
    opt.step(0.1f, 0);
}
