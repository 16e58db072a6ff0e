#pragma once
// allreduce::native on cuda::nccl: ncclAllReduce on the communicator's NCCL communicator (cuda::nccl::
// allreduce_native: device buffers in place, host buffers staged through the GPU; min and max keep NaN as hitch's
// other schedules do; average is ncclAvg). With this header, allreduce::automatic on cuda::nccl weighs native among
// its candidates (has_native_allreduce), timing it in its calibration like the schedules. Host code: it names no
// CUDA or NCCL header (hitch/cuda/nccl.hpp includes it).

#include <span>
#include <type_traits>

#include "hitch/allreduce/automatic/native_candidate.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/cuda/nccl/communicator.hpp"

namespace hitch::allreduce {

template <>
struct has_native_allreduce<cuda::nccl> : std::true_type {};

template <>
struct native_allreduce<cuda::nccl> {
    /// Within the call's deadline; past it the communicator is aborted (an NCCL collective cannot be withdrawn).
    template <floating_element T>
    static void run(transport<cuda::nccl>& t, std::span<T> data, reduce_op op) {
        if (t.size() <= 1 || data.empty()) return;
        t.comm().allreduce_native(data, op, t.limit());
    }
};

static_assert(schedule_for<native, cuda::nccl>,
              "hitch::allreduce::native must model hitch::allreduce_schedule on cuda::nccl");

}  // namespace hitch::allreduce
