#pragma once
// hitch::data_parallel on hitch::cuda::device: include this header in the .cu file that constructs data_parallel with
// a cuda::device (and the .cuh of a codec other than compress::none, e.g. <hitch/cuda/compress/topk.cuh> and
// <hitch/cuda/compress/error_feedback.cuh> for error_feedback<topk>). It brings every optimizer's GPU kernels, the
// mixed-precision kernels, the collectives on GPU buffers (staged and direct) and the gradient machinery
// (gradients.cuh), and specialises hitch::train::device_training for cuda::device. nvcc only.
//
//   hitch::cuda::device gpu;                       // the model's views: tensor_view(p, n, memory_space::cuda)
//   hitch::data_parallel<hitch::optim::adam, hitch::compress::fp16, hitch::sync::hard, hitch::allreduce::ring>::options
//   o; o.compute_stream = my_stream;                  // where backward runs (default: gpu.stream())
//   hitch::data_parallel<...> dp(comm, gpu, layers, o);
//   for (...) { forward(); backward([&](std::size_t i) { dp.gradient_ready(i); }); dp.step(loss); }
//
// docs/data_parallel.md ("On the GPU") says what runs where and what is refused.
#if !defined(__CUDACC__)
#error "hitch/cuda/train/data_parallel.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cuda_runtime.h>

#include "hitch/cuda/allreduce/collectives.cuh"
#include "hitch/cuda/amp/mixed_precision.cuh"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/optim/all.cuh"
#include "hitch/cuda/train/gradients.cuh"
#include "hitch/train/data_parallel.hpp"
#include "hitch/train/device_training.hpp"

namespace hitch::train {

/// data_parallel's machinery on a GPU (see train/device_training.hpp).
template <>
struct device_training<cuda::device> {
    /// Waits for the model's stream and the device's, so the engine reads the parameters as the model wrote them.
    static void begin(cuda::device& dev, void* compute_stream) {
        cuda::detail::check(cudaSetDevice(dev.ordinal()), "cudaSetDevice");
        if (compute_stream != nullptr)
            cuda::detail::check(cudaStreamSynchronize(static_cast<cudaStream_t>(compute_stream)),
                                "cudaStreamSynchronize (compute_stream)");
        dev.synchronize();
    }

    template <compressor X, class S, communicator C, floating_element Param>
    using gradients = cuda::train::gradients<X, S, C, Param>;
};

}  // namespace hitch::train
