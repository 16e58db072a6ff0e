#pragma once
// hitch::optim::sgd on hitch::cuda::device: the step of hitch/optim/sgd.hpp on the GPU, bit for bit (the per-element
// math is hitch/cuda/optim/math.hpp's), and model_optimizer<sgd, cuda::device>'s fused step (one launch for every
// layer). nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/optim/sgd.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include "hitch/concepts/optimizer.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/optim/detail/steps.cuh"
#include "hitch/cuda/optim/rules.hpp"
#include "hitch/optim/detail/device_step.hpp"
#include "hitch/optim/sgd.hpp"

namespace hitch::optim {

template <>
struct device_step<sgd, cuda::device> {
    static void step(const sgd& rule, const layer& l, sgd::state_type<cuda::device>& s, float lr,
                     const parallel_options& /*exec*/) {
        using R = cuda::optim::elementwise_rule<sgd>;
        R::check(rule, l, s, lr);
        cuda::optim::detail::elementwise_layer_step(rule, l, s, lr, R::weight_decay(rule, l.flags), 1.0f);
    }
    using plan = cuda::optim::detail::elementwise_plan<sgd>;
};

static_assert(optimizer_on<sgd, cuda::device>, "hitch::optim::sgd must model hitch::optimizer_on<cuda::device>");

}  // namespace hitch::optim
