#pragma once
// hitch::optim::lars<Base> on hitch::cuda::device, for any base rule with GPU kernels (sgd, momentum, adam, adamw):
// the norms in the order of hitch/optim/detail/norm.hpp, the trust ratio as hitch/optim/lars.hpp takes it, and the
// base rule's update with the trust ratio as its gradient scale, bit for bit. model_optimizer's fused step is three
// launches for every layer (partial sums, trust ratios, update), with no round trip to the host; the two phases of a
// sharded step (norm_sums, apply_with_sums) are here too. nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/optim/lars.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include "hitch/concepts/optimizer.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/optim/adam.cuh"
#include "hitch/cuda/optim/detail/steps.cuh"
#include "hitch/cuda/optim/momentum.cuh"
#include "hitch/cuda/optim/sgd.cuh"
#include "hitch/optim/detail/device_step.hpp"
#include "hitch/optim/lars.hpp"
#include "hitch/optim/split_step.hpp"

namespace hitch::optim {

template <class Base>
struct device_step<lars<Base>, cuda::device> {
    using state_type = typename lars<Base>::template state_type<cuda::device>;
    static void step(const lars<Base>& rule, const layer& l, state_type& s, float lr,
                     const parallel_options& /*exec*/) {
        cuda::optim::detail::lars_layer_step(rule, l, s, lr);
    }
    [[nodiscard]] static layer_sums norm_sums(const lars<Base>& rule, const layer& piece, state_type& s,
                                              const parallel_options& /*exec*/) {
        return cuda::optim::detail::lars_norm_sums(rule, piece, s);
    }
    static void apply_with_sums(const lars<Base>& rule, const layer& piece, state_type& s, float lr, layer_sums sums,
                                const parallel_options& /*exec*/) {
        cuda::optim::detail::lars_apply_with_sums(rule, piece, s, lr, sums);
    }
    using plan = cuda::optim::detail::lars_plan<Base>;
};

static_assert(optimizer_on<lars<momentum>, cuda::device>,
              "hitch::optim::lars<momentum> must model hitch::optimizer_on<cuda::device>");
static_assert(optimizer_on<lars<sgd>, cuda::device>,
              "hitch::optim::lars<sgd> must model hitch::optimizer_on<cuda::device>");
static_assert(optimizer_on<lars<adam>, cuda::device>,
              "hitch::optim::lars<adam> must model hitch::optimizer_on<cuda::device>");
static_assert(layerwise_rule<lars<momentum>, cuda::device>,
              "hitch::optim::lars steps a piece of a layer in two phases on the GPU too");

}  // namespace hitch::optim
