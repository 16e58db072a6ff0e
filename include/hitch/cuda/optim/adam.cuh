#pragma once
// hitch::optim::adam and adamw (AMSGrad included) on hitch::cuda::device: the step of hitch/optim/adam.hpp on the
// GPU, bit for bit, and model_optimizer<adam, cuda::device>'s fused step (one launch for every layer). The per-layer
// scalars (the bias corrections, in double) are the host rule's own (basic_adam::scalars). nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/optim/adam.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include "hitch/concepts/optimizer.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/optim/detail/steps.cuh"
#include "hitch/cuda/optim/rules.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/adamw.hpp"
#include "hitch/optim/detail/device_step.hpp"

namespace hitch::optim {

template <class WeightDecay>
struct device_step<basic_adam<WeightDecay>, cuda::device> {
    using rule_type = basic_adam<WeightDecay>;
    static void step(const rule_type& rule, const layer& l, typename rule_type::template state_type<cuda::device>& s,
                     float lr, const parallel_options& /*exec*/) {
        using R = cuda::optim::elementwise_rule<rule_type>;
        R::check(rule, l, s, lr);
        cuda::optim::detail::elementwise_layer_step(rule, l, s, lr, R::weight_decay(rule, l.flags), 1.0f);
    }
    using plan = cuda::optim::detail::elementwise_plan<rule_type>;
};

static_assert(optimizer_on<adam, cuda::device>, "hitch::optim::adam must model hitch::optimizer_on<cuda::device>");
static_assert(optimizer_on<adamw, cuda::device>, "hitch::optim::adamw must model hitch::optimizer_on<cuda::device>");

}  // namespace hitch::optim
