#pragma once
// The training loop's model on a GPU (--device cuda): the toolkit's MLP (nn/cuda_mlp.cuh) on a stream of its own,
// on GPU (the rank's place on its node) mod (the GPUs there are), with hitch::cuda::device as data_parallel's
// device and the model's stream as its compute_stream. The same interface as host_runner (train_impl.hpp). nvcc
// only.
#if !defined(__CUDACC__)
#error "gpu/runner.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/cuda/device.hpp"
#include "nn/cuda_mlp.cuh"
#include "nn/model.hpp"
#include "train.hpp"

namespace hitch_examples {

class gpu_runner {
public:
    using device_type = hitch::cuda::device;

    /// The MLP of `t` for batches of `local_batch`, on the GPU of node-local rank `local_rank`.
    gpu_runner(const task& t, std::size_t local_batch, const train_config& config, int local_rank)
        : host_(t.build(local_batch, config.seed)),
          gpu_(pick_gpu(local_rank)),
          stream_(make_stream(gpu_)),
          mlp_(host_, local_batch, gpu_.ordinal(), stream_.get()) {}

    [[nodiscard]] std::vector<hitch::layer> layers() const { return mlp_.layers(); }
    [[nodiscard]] hitch::cuda::device& device() noexcept { return gpu_; }
    /// data_parallel's events go on the model's stream.
    template <class Options>
    void configure(Options& o) const {
        o.compute_stream = stream_.get();
    }
    double train_batch(const data::batch_loader<float>& loader, const std::function<void(std::size_t)>& ready) {
        return mlp_.train(loader.images(), loader.labels(), correct_, ready);
    }
    [[nodiscard]] std::size_t correct() const noexcept { return correct_; }
    std::size_t evaluate_batch(const data::batch_loader<float>& loader) {
        std::size_t correct = 0;
        (void)mlp_.evaluate(loader.images(), loader.labels(), correct);
        return correct;
    }
    /// The MLP has no buffers.
    [[nodiscard]] const std::vector<nn::buffer<float>>& buffers() const noexcept { return none_; }

private:
    struct stream_deleter {
        void operator()(CUstream_st* s) const noexcept {
            cudaStreamSynchronize(s);
            cudaStreamDestroy(s);
        }
    };
    static int pick_gpu(int local_rank) {
        int count = 0;
        if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
            cudaGetLastError();
            throw usage_error("--device cuda: no CUDA device is present on this node");
        }
        return local_rank % count;
    }
    static std::unique_ptr<CUstream_st, stream_deleter> make_stream(hitch::cuda::device& gpu) {
        hitch::cuda::detail::check(cudaSetDevice(gpu.ordinal()), "cudaSetDevice");
        cudaStream_t s = nullptr;
        hitch::cuda::detail::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
        return std::unique_ptr<CUstream_st, stream_deleter>(s);
    }

    nn::model<float> host_;  // the layers' names, shapes and initial values
    hitch::cuda::device gpu_;
    std::unique_ptr<CUstream_st, stream_deleter> stream_;
    nn::gpu::mlp mlp_;
    std::size_t correct_ = 0;
    std::vector<nn::buffer<float>> none_;
};

}  // namespace hitch_examples
