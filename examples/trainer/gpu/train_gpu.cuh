#pragma once
// The training loop on a GPU (--device cuda), once per (compressor, sync policy, communicator) that
// hitch::data_parallel runs there: every compressor with hard sync, and local SGD. The loop is train_impl.hpp's,
// with the GPU's model (gpu/runner.cuh) instead of the host's. Included only by the gpu/instantiate_*.cu files and
// gpu/dispatch.cu. nvcc only.
#if !defined(__CUDACC__)
#error "gpu/train_gpu.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include "gpu/runner.cuh"
#include "hitch/concepts/communicator.hpp"
#include "hitch/cuda/compress/bf16.cuh"
#include "hitch/cuda/compress/dgc.cuh"
#include "hitch/cuda/compress/error_feedback.cuh"
#include "hitch/cuda/compress/fp16.cuh"
#include "hitch/cuda/compress/onebit.cuh"
#include "hitch/cuda/compress/powersgd.cuh"
#include "hitch/cuda/compress/qsgd.cuh"
#include "hitch/cuda/compress/randomk.cuh"
#include "hitch/cuda/compress/terngrad.cuh"
#include "hitch/cuda/compress/threshold.cuh"
#include "hitch/cuda/compress/topk.cuh"
#include "hitch/cuda/train/data_parallel.cuh"
#include "train_impl.hpp"

namespace hitch_examples {

/// The training loop with the GPU's MLP on the GPU of this rank's place on its node.
template <class X, class P, class C>
train_result train_gpu_with(C& comm, const train_config& config, const task& t) {
    const int local_rank = hitch::local_rank(comm);  // collective where the communicator knows its nodes
    return train_loop<X, P, C>(comm, config, t,
                               [&](std::size_t local_batch) { return gpu_runner(t, local_batch, config, local_rank); });
}

}  // namespace hitch_examples

#define HITCH_EXAMPLE_TRAIN_GPU_WITH(X, P)                                                                   \
    template train_result train_gpu_with<X, P, hitch::comm::local>(hitch::comm::local&, const train_config&, \
                                                                   const task&);                             \
    template train_result train_gpu_with<X, P, hitch::comm::mpi>(hitch::comm::mpi&, const train_config&, const task&);
