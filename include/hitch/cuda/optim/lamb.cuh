#pragma once
// hitch::optim::lamb on hitch::cuda::device: pass 1 (moments, and the sums of squares of w and r in the order of
// hitch/optim/detail/norm.hpp), the rate lr * ||w|| / ||r||, and pass 2, bit for bit with hitch/optim/lamb.hpp.
// model_optimizer's fused step is three launches for every layer, with no round trip to the host; the two phases of
// a sharded step (norm_sums, apply_with_sums) are here too. nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/optim/lamb.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include "hitch/concepts/optimizer.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/optim/detail/steps.cuh"
#include "hitch/optim/detail/device_step.hpp"
#include "hitch/optim/lamb.hpp"
#include "hitch/optim/split_step.hpp"

namespace hitch::optim {

template <>
struct device_step<lamb, cuda::device> {
    using state_type = lamb::state_type<cuda::device>;
    static void step(const lamb& rule, const layer& l, state_type& s, float lr, const parallel_options& /*exec*/) {
        cuda::optim::detail::lamb_layer_step(rule, l, s, lr);
    }
    [[nodiscard]] static layer_sums norm_sums(const lamb& rule, const layer& piece, state_type& s,
                                              const parallel_options& /*exec*/) {
        return cuda::optim::detail::lamb_norm_sums(rule, piece, s);
    }
    static void apply_with_sums(const lamb& rule, const layer& piece, state_type& s, float lr, layer_sums sums,
                                const parallel_options& /*exec*/) {
        cuda::optim::detail::lamb_apply_with_sums(rule, piece, s, lr, sums);
    }
    using plan = cuda::optim::detail::lamb_plan;
};

static_assert(optimizer_on<lamb, cuda::device>, "hitch::optim::lamb must model hitch::optimizer_on<cuda::device>");
static_assert(layerwise_rule<lamb, cuda::device>,
              "hitch::optim::lamb steps a piece of a layer in two phases on the GPU too");

}  // namespace hitch::optim
