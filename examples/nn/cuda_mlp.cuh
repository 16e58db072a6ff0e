#pragma once
// The toolkit's MLP on a GPU: the layers of an nn::model built by nn::mlp (flatten, then dense and ReLU in turn, a
// dense layer last), with the same parameter names, order, flags and initial values (copied from that host model),
// trained on a CUDA stream:
//   dense forward    y = x W^T (one cuBLAS SGEMM for the batch), then + b (a kernel)
//   ReLU             y = max(x, 0); backward dx = dy where y > 0
//   dense backward   db = sum over the batch of dy (a kernel), dW = dy^T x and dx = dy W (SGEMMs)
//   softmax cross-entropy, fused: one thread per sample (nn::softmax_cross_entropy's formulas)
// backward reports each parameter's gradient as nn::model does (last layer first, bias before weight) once its
// kernels are queued, so data_parallel's events follow the GPU's work. The host waits only to read the batch's loss.
// nvcc only; link CUDA::cublas.
#if !defined(__CUDACC__)
#error "nn/cuda_mlp.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "hitch/core/layer.hpp"
#include "nn/model.hpp"

namespace hitch_examples::nn::gpu {

inline void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string("nn::gpu: ") + what + ": " + cudaGetErrorString(e));
}
inline void check(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw std::runtime_error(std::string("nn::gpu: ") + what + " failed (cuBLAS status " +
                                 std::to_string(static_cast<int>(s)) + ")");
}

namespace kernels {

inline constexpr unsigned threads = 256;
[[nodiscard]] inline unsigned blocks(std::size_t n) {
    return static_cast<unsigned>(std::clamp<std::size_t>((n + threads - 1) / threads, 1, 4096));
}

/// y[b, j] += bias[j] over a batch x n activation.
static __global__ void add_bias(float* y, const float* bias, std::size_t batch, std::size_t n) {
    for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < batch * n; i += gridDim.x * blockDim.x)
        y[i] += bias[i % n];
}

static __global__ void relu_forward(const float* x, float* y, std::size_t n) {
    for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/// dx = dy where the ReLU's output is positive (in place: dy becomes dx).
static __global__ void relu_backward(const float* y, float* dy, std::size_t n) {
    for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        if (!(y[i] > 0.0f)) dy[i] = 0.0f;
}

/// db[j] = sum over the batch of dy[b, j]: a thread per output.
static __global__ void bias_gradient(const float* dy, float* db, std::size_t batch, std::size_t n) {
    for (std::size_t j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (std::size_t b = 0; b < batch; ++b) s += dy[b * n + j];
        db[j] = s;
    }
}

/// Softmax cross-entropy of each sample (a thread per sample): its loss, whether its top logit is its label, and
/// dloss/dlogits for the batch's mean loss.
static __global__ void softmax_cross_entropy(const float* z, const std::int32_t* labels, std::size_t batch,
                                             std::size_t classes, float* gradient, double* loss,
                                             std::uint32_t* correct) {
    const float inv_batch = 1.0f / static_cast<float>(batch);
    for (std::size_t b = blockIdx.x * blockDim.x + threadIdx.x; b < batch; b += gridDim.x * blockDim.x) {
        const float* zb = z + b * classes;
        float* g = gradient + b * classes;
        const std::int32_t label = labels[b];
        std::size_t best = 0;
        for (std::size_t j = 1; j < classes; ++j)
            if (zb[j] > zb[best]) best = j;
        const float top = zb[best];
        float sum = 0.0f;
        for (std::size_t j = 0; j < classes; ++j) sum += (g[j] = expf(zb[j] - top));
        for (std::size_t j = 0; j < classes; ++j) g[j] *= inv_batch / sum;
        g[label] -= inv_batch;
        loss[b] = static_cast<double>(logf(sum) - (zb[label] - top));
        correct[b] = best == static_cast<std::size_t>(label) ? 1u : 0u;
    }
}

}  // namespace kernels

/// Device memory of n elements of T, freed with its owner.
template <class T>
class buffer {
public:
    buffer() = default;
    explicit buffer(std::size_t n) : n_(n) {
        check(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc");
        check(cudaMemset(p_, 0, std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMemset");
    }
    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;
    buffer(buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    buffer& operator=(buffer&& o) noexcept {
        std::swap(p_, o.p_);
        std::swap(n_, o.n_);
        return *this;
    }
    ~buffer() {
        if (p_ != nullptr) cudaFree(p_);
    }
    [[nodiscard]] T* data() const noexcept { return p_; }
    [[nodiscard]] std::size_t size() const noexcept { return n_; }

private:
    T* p_ = nullptr;
    std::size_t n_ = 0;
};

/// The MLP on a GPU (see the file comment).
class mlp {
public:
    /// The layers of `host` (an nn::mlp model: parameters fcN.weight, fcN.bias in turn), its initial values copied,
    /// for batches of up to max_batch samples, on `stream` (on GPU `device`).
    mlp(const model<float>& host, std::size_t max_batch, int device, cudaStream_t stream)
        : max_batch_(max_batch), stream_(stream) {
        check(cudaSetDevice(device), "cudaSetDevice");
        const auto& params = host.parameters();
        if (params.empty() || params.size() % 2 != 0)
            throw std::invalid_argument("nn::gpu::mlp: the model is not an MLP (dense weight and bias pairs)");
        inputs_ = host.input_shape().size();
        std::size_t in = inputs_;
        for (std::size_t i = 0; i < params.size(); i += 2) {
            const auto& w = params[i];
            const auto& b = params[i + 1];
            if (w.rows == 0 || w.value.size() != w.rows * in || b.value.size() != w.rows || !b.is_bias_or_norm)
                throw std::invalid_argument("nn::gpu::mlp: parameter " + w.name +
                                            " is not the weight of a dense layer of the MLP");
            dense d;
            d.inputs = in;
            d.outputs = w.rows;
            d.weight_name = w.name;
            d.bias_name = b.name;
            d.w = buffer<float>(w.value.size());
            d.gw = buffer<float>(w.value.size());
            d.b = buffer<float>(b.value.size());
            d.gb = buffer<float>(b.value.size());
            check(cudaMemcpy(d.w.data(), w.value.data(), w.value.size_bytes(), cudaMemcpyHostToDevice), "upload");
            check(cudaMemcpy(d.b.data(), b.value.data(), b.value.size_bytes(), cudaMemcpyHostToDevice), "upload");
            d.y = buffer<float>(max_batch * d.outputs);
            layers_.push_back(std::move(d));
            in = w.rows;
        }
        classes_ = in;
        x_ = buffer<float>(max_batch * inputs_);
        labels_ = buffer<std::int32_t>(max_batch);
        std::size_t widest = inputs_;
        for (const dense& d : layers_) widest = std::max(widest, d.outputs);
        dy_ = buffer<float>(max_batch * widest);
        dx_ = buffer<float>(max_batch * widest);
        loss_ = buffer<double>(max_batch);
        correct_ = buffer<std::uint32_t>(max_batch);
        check(cudaMallocHost(reinterpret_cast<void**>(&host_loss_), max_batch * sizeof(double)), "cudaMallocHost");
        check(cudaMallocHost(reinterpret_cast<void**>(&host_correct_), max_batch * sizeof(std::uint32_t)),
              "cudaMallocHost");
        check(cublasCreate(&blas_), "cublasCreate");
        check(cublasSetStream(blas_, stream_), "cublasSetStream");
    }
    mlp(const mlp&) = delete;
    mlp& operator=(const mlp&) = delete;
    ~mlp() {
        cudaStreamSynchronize(stream_);
        if (blas_ != nullptr) cublasDestroy(blas_);
        cudaFreeHost(host_loss_);
        cudaFreeHost(host_correct_);
    }

    /// The parameters as data_parallel takes them (views of GPU memory), in the host model's order and with its flags.
    [[nodiscard]] std::vector<hitch::layer> layers() const {
        std::vector<hitch::layer> out;
        for (const dense& d : layers_) {
            const std::size_t n = d.inputs * d.outputs;
            out.push_back({d.weight_name,
                           {d.w.data(), n, hitch::memory_space::cuda},
                           {d.gw.data(), n, hitch::memory_space::cuda},
                           hitch::layer_flags{},
                           d.outputs});
            out.push_back({d.bias_name,
                           {d.b.data(), d.outputs, hitch::memory_space::cuda},
                           {d.gb.data(), d.outputs, hitch::memory_space::cuda},
                           hitch::layer_flags::bias_or_norm(),
                           0});
        }
        return out;
    }

    /// One training batch: forward, loss, backward (ready(i) as parameter i's gradient is queued, last first); the
    /// mean loss, and in `correct` the samples whose top logit is their label. Waits for the stream once, for the loss.
    double train(std::span<const float> images, std::span<const std::int32_t> labels, std::size_t& correct,
                 const std::function<void(std::size_t)>& ready) {
        const std::size_t batch = labels.size();
        forward(images, labels, batch);
        loss_kernel(batch);
        backward(batch, ready);
        return read_loss(batch, correct);
    }

    /// The loss and the correct count of a batch, without backward (evaluation).
    double evaluate(std::span<const float> images, std::span<const std::int32_t> labels, std::size_t& correct) {
        const std::size_t batch = labels.size();
        forward(images, labels, batch);
        loss_kernel(batch);
        return read_loss(batch, correct);
    }

    [[nodiscard]] std::size_t classes() const noexcept { return classes_; }

private:
    struct dense {
        std::size_t inputs = 0, outputs = 0;
        std::string weight_name, bias_name;
        buffer<float> w, gw, b, gb;  // w: outputs x inputs, row-major
        buffer<float> y;             // the layer's output (after the ReLU but for the last layer), batch x outputs
    };

    void forward(std::span<const float> images, std::span<const std::int32_t> labels, std::size_t batch) {
        if (batch == 0 || batch > max_batch_ || images.size() < batch * inputs_)
            throw std::invalid_argument("nn::gpu::mlp: a batch of " + std::to_string(batch) + " samples (at most " +
                                        std::to_string(max_batch_) + ")");
        check(
            cudaMemcpyAsync(x_.data(), images.data(), batch * inputs_ * sizeof(float), cudaMemcpyHostToDevice, stream_),
            "upload images");
        check(cudaMemcpyAsync(labels_.data(), labels.data(), batch * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                              stream_),
              "upload labels");
        const float one = 1.0f, zero = 0.0f;
        const float* x = x_.data();
        for (std::size_t l = 0; l < layers_.size(); ++l) {
            dense& d = layers_[l];
            // Row-major y (batch x out) = x (batch x in) W^T: column-major y^T = W x^T, W being in x out there.
            check(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(d.outputs), static_cast<int>(batch),
                              static_cast<int>(d.inputs), &one, d.w.data(), static_cast<int>(d.inputs), x,
                              static_cast<int>(d.inputs), &zero, d.y.data(), static_cast<int>(d.outputs)),
                  "cublasSgemm (forward)");
            kernels::add_bias<<<kernels::blocks(batch * d.outputs), kernels::threads, 0, stream_>>>(
                d.y.data(), d.b.data(), batch, d.outputs);
            if (l + 1 < layers_.size())
                kernels::relu_forward<<<kernels::blocks(batch * d.outputs), kernels::threads, 0, stream_>>>(
                    d.y.data(), d.y.data(), batch * d.outputs);
            check(cudaGetLastError(), "forward kernels");
            x = d.y.data();
        }
    }

    void loss_kernel(std::size_t batch) {
        kernels::softmax_cross_entropy<<<kernels::blocks(batch), kernels::threads, 0, stream_>>>(
            layers_.back().y.data(), labels_.data(), batch, classes_, dy_.data(), loss_.data(), correct_.data());
        check(cudaGetLastError(), "softmax_cross_entropy");
        check(cudaMemcpyAsync(host_loss_, loss_.data(), batch * sizeof(double), cudaMemcpyDeviceToHost, stream_),
              "download losses");
        check(cudaMemcpyAsync(host_correct_, correct_.data(), batch * sizeof(std::uint32_t), cudaMemcpyDeviceToHost,
                              stream_),
              "download correct");
    }

    void backward(std::size_t batch, const std::function<void(std::size_t)>& ready) {
        const float one = 1.0f, zero = 0.0f;
        float* dy = dy_.data();
        float* dx = dx_.data();
        for (std::size_t l = layers_.size(); l-- > 0;) {
            dense& d = layers_[l];
            const float* x = l == 0 ? x_.data() : layers_[l - 1].y.data();
            kernels::bias_gradient<<<kernels::blocks(d.outputs), kernels::threads, 0, stream_>>>(dy, d.gb.data(), batch,
                                                                                                 d.outputs);
            check(cudaGetLastError(), "bias_gradient");
            if (ready) ready(2 * l + 1);
            // Row-major dW (out x in) = dy^T x: column-major dW^T (in x out) = x^T dy.
            check(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(d.inputs), static_cast<int>(d.outputs),
                              static_cast<int>(batch), &one, x, static_cast<int>(d.inputs), dy,
                              static_cast<int>(d.outputs), &zero, d.gw.data(), static_cast<int>(d.inputs)),
                  "cublasSgemm (weight gradient)");
            if (ready) ready(2 * l);
            if (l == 0) break;  // nothing below the first layer needs a gradient
            // Row-major dx (batch x in) = dy W: column-major dx^T (in x batch) = W^T dy^T, W being in x out there.
            check(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(d.inputs), static_cast<int>(batch),
                              static_cast<int>(d.outputs), &one, d.w.data(), static_cast<int>(d.inputs), dy,
                              static_cast<int>(d.outputs), &zero, dx, static_cast<int>(d.inputs)),
                  "cublasSgemm (input gradient)");
            kernels::relu_backward<<<kernels::blocks(batch * d.inputs), kernels::threads, 0, stream_>>>(
                layers_[l - 1].y.data(), dx, batch * d.inputs);
            check(cudaGetLastError(), "relu_backward");
            std::swap(dy, dx);
        }
    }

    double read_loss(std::size_t batch, std::size_t& correct) {
        check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
        double total = 0.0;
        correct = 0;
        for (std::size_t b = 0; b < batch; ++b) {
            total += host_loss_[b];
            correct += host_correct_[b];
        }
        return total / static_cast<double>(batch);
    }

    std::size_t max_batch_, inputs_ = 0, classes_ = 0;
    cudaStream_t stream_;
    cublasHandle_t blas_ = nullptr;
    std::vector<dense> layers_;
    buffer<float> x_, dy_, dx_;
    buffer<std::int32_t> labels_;
    buffer<double> loss_;
    buffer<std::uint32_t> correct_;
    double* host_loss_ = nullptr;
    std::uint32_t* host_correct_ = nullptr;
};

}  // namespace hitch_examples::nn::gpu
