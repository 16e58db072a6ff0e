#pragma once
// hitch::optim::momentum (heavy ball and Nesterov) on hitch::cuda::device: the step of hitch/optim/momentum.hpp on
// the GPU, bit for bit, and model_optimizer<momentum, cuda::device>'s fused step (one launch for every layer).
// nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/optim/momentum.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include "hitch/concepts/optimizer.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/optim/detail/steps.cuh"
#include "hitch/cuda/optim/rules.hpp"
#include "hitch/optim/detail/device_step.hpp"
#include "hitch/optim/momentum.hpp"

namespace hitch::optim {

template <>
struct device_step<momentum, cuda::device> {
    static void step(const momentum& rule, const layer& l, momentum::state_type<cuda::device>& s, float lr,
                     const parallel_options& /*exec*/) {
        using R = cuda::optim::elementwise_rule<momentum>;
        R::check(rule, l, s, lr);
        cuda::optim::detail::elementwise_layer_step(rule, l, s, lr, R::weight_decay(rule, l.flags), 1.0f);
    }
    using plan = cuda::optim::detail::elementwise_plan<momentum>;
};

static_assert(optimizer_on<momentum, cuda::device>,
              "hitch::optim::momentum must model hitch::optimizer_on<cuda::device>");

}  // namespace hitch::optim
