#pragma once
// The training programs the GPU tests of data_parallel run twice, on hitch::cpu and on hitch::cuda::device, with the
// same model, gradients, options and communicator, so the parameters can be compared bit for bit:
//   host_model / gpu_model   layers of given sizes in host or GPU memory (FP32, FP16 or BF16), the same initial
//                            parameters; a step's gradients are full-mantissa values of (rank, step, layer, element),
//                            so a sum taken in another order would show
//   run(...)                 N steps: each layer's gradient written (on the GPU: queued on the model's stream) and
//                            reported with gradient_ready in backward order (or not at all), then step(); returns
//                            the parameters as floats, and the step records

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "hitch/amp/mixed_precision.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/device/cpu.hpp"
#include "hitch/train/metrics.hpp"

namespace hitch_test {

/// Throws (on a rank's thread: comm::run_local hands the first error to the test) unless `ok`.
inline void require(bool ok, const std::string& what) {
    if (!ok) throw std::runtime_error(what);
}

inline void cuda_ok(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// A full-mantissa value in [-1, 1) from a 64-bit key (splitmix64).
inline float rough(std::uint64_t key) {
    key += 0x9e3779b97f4a7c15ull;
    key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ull;
    key = (key ^ (key >> 27)) * 0x94d049bb133111ebull;
    key ^= key >> 31;
    return static_cast<float>(static_cast<double>(key >> 40) / static_cast<double>(1ull << 23) - 1.0);
}
inline float gradient_of(int rank, std::uint64_t step, std::size_t layer, std::size_t i) {
    return rough((static_cast<std::uint64_t>(rank) << 56) ^ (step << 40) ^ (static_cast<std::uint64_t>(layer) << 28) ^
                 i);
}
inline float initial_weight(std::size_t layer, std::size_t i) {
    return 0.5f * rough(0xabcdef0000000000ull ^ (static_cast<std::uint64_t>(layer) << 32) ^ i);
}

/// What a step's gradient is: gradient_of, optionally scaled (loss scaling), with `poison` (rank, step, layer) getting
/// an infinity at element 1.
struct gradient_plan {
    float scale = 1.0f;
    std::optional<std::array<std::uint64_t, 3>> poison;
    /// Layers not produced (not reported, gradients left as they are) at a step: (step, layer) -> true.
    std::function<bool(std::uint64_t, std::size_t)> skipped;
    [[nodiscard]] float value(int rank, std::uint64_t step, std::size_t layer, std::size_t i) const {
        if (poison && (*poison)[0] == static_cast<std::uint64_t>(rank) && (*poison)[1] == step &&
            (*poison)[2] == layer && i == 1)
            return std::numeric_limits<float>::infinity();
        return gradient_of(rank, step, layer, i) * scale;
    }
};

template <class T>
using user_layer_t = std::conditional_t<std::is_same_v<T, float>, hitch::layer, hitch::amp::low_precision_layer<T>>;

/// Layers in host memory.
template <class T>
struct host_model {
    std::vector<std::vector<T>> w, g;
    explicit host_model(const std::vector<std::size_t>& sizes) {
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            w.emplace_back(sizes[k]);
            g.emplace_back(sizes[k]);
            for (std::size_t i = 0; i < sizes[k]; ++i) w[k][i] = T(initial_weight(k, i));
        }
    }
    std::vector<user_layer_t<T>> layers() {
        std::vector<user_layer_t<T>> out;
        for (std::size_t k = 0; k < w.size(); ++k)
            out.push_back({"layer" + std::to_string(k), hitch::view(w[k]), hitch::view(g[k]), {}, 0});
        return out;
    }
    /// Writes layer k's gradient.
    void write_gradient(std::size_t k, const gradient_plan& plan, int rank, std::uint64_t step) {
        for (std::size_t i = 0; i < g[k].size(); ++i) g[k][i] = T(plan.value(rank, step, k, i));
    }
    [[nodiscard]] std::vector<std::vector<float>> parameters() const {
        std::vector<std::vector<float>> out;
        for (const auto& l : w) {
            out.emplace_back();
            for (const T& x : l) out.back().push_back(static_cast<float>(x));
        }
        return out;
    }
    void finish() {}
    [[nodiscard]] std::size_t sizes_count() const noexcept { return w.size(); }
};

/// The same layers in GPU memory; gradients are written on `stream` (the model's stream).
template <class T>
struct gpu_model {
    std::vector<T*> w, g;
    std::vector<std::size_t> sizes;
    std::vector<std::vector<T>> staging;
    cudaStream_t stream;

    gpu_model(const std::vector<std::size_t>& n, cudaStream_t s) : sizes(n), stream(s) {
        for (std::size_t k = 0; k < n.size(); ++k) {
            T* pw = nullptr;
            T* pg = nullptr;
            cuda_ok(cudaMalloc(reinterpret_cast<void**>(&pw), std::max<std::size_t>(n[k], 1) * sizeof(T)),
                    "cudaMalloc");
            cuda_ok(cudaMalloc(reinterpret_cast<void**>(&pg), std::max<std::size_t>(n[k], 1) * sizeof(T)),
                    "cudaMalloc");
            std::vector<T> init(n[k]);
            for (std::size_t i = 0; i < n[k]; ++i) init[i] = T(initial_weight(k, i));
            if (n[k] != 0) cuda_ok(cudaMemcpy(pw, init.data(), n[k] * sizeof(T), cudaMemcpyHostToDevice), "upload");
            cuda_ok(cudaMemset(pg, 0, std::max<std::size_t>(n[k], 1) * sizeof(T)), "cudaMemset");
            w.push_back(pw);
            g.push_back(pg);
            staging.emplace_back(n[k]);
        }
    }
    gpu_model(const gpu_model&) = delete;
    gpu_model& operator=(const gpu_model&) = delete;
    ~gpu_model() {
        cudaDeviceSynchronize();
        for (T* p : w) cudaFree(p);
        for (T* p : g) cudaFree(p);
    }
    std::vector<user_layer_t<T>> layers() {
        std::vector<user_layer_t<T>> out;
        for (std::size_t k = 0; k < w.size(); ++k)
            out.push_back({"layer" + std::to_string(k),
                           hitch::tensor_view<T>(w[k], sizes[k], hitch::memory_space::cuda),
                           hitch::tensor_view<T>(g[k], sizes[k], hitch::memory_space::cuda),
                           {},
                           0});
        return out;
    }
    /// Queues layer k's gradient on the model's stream (the host buffer may be reused at once: it is pageable).
    void write_gradient(std::size_t k, const gradient_plan& plan, int rank, std::uint64_t step) {
        for (std::size_t i = 0; i < sizes[k]; ++i) staging[k][i] = T(plan.value(rank, step, k, i));
        if (sizes[k] != 0)
            cuda_ok(cudaMemcpyAsync(g[k], staging[k].data(), sizes[k] * sizeof(T), cudaMemcpyHostToDevice, stream),
                    "cudaMemcpyAsync");
    }
    [[nodiscard]] std::vector<std::vector<float>> parameters() const {
        cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        std::vector<std::vector<float>> out;
        for (std::size_t k = 0; k < w.size(); ++k) {
            std::vector<T> v(sizes[k]);
            if (sizes[k] != 0)
                cuda_ok(cudaMemcpy(v.data(), w[k], sizes[k] * sizeof(T), cudaMemcpyDeviceToHost), "download");
            out.emplace_back();
            for (const T& x : v) out.back().push_back(static_cast<float>(x));
        }
        return out;
    }
    void finish() { cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); }
    [[nodiscard]] std::size_t sizes_count() const noexcept { return w.size(); }
};

/// A stream of the test's own for the model (options.compute_stream), or the device's.
class model_stream {
public:
    model_stream(hitch::cuda::device& gpu, bool own) : gpu_(gpu) {
        if (own) cuda_ok(cudaStreamCreateWithFlags(&own_, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    model_stream(const model_stream&) = delete;
    model_stream& operator=(const model_stream&) = delete;
    ~model_stream() {
        if (own_ != nullptr) {
            cudaStreamSynchronize(own_);
            cudaStreamDestroy(own_);
        }
    }
    [[nodiscard]] cudaStream_t get() const noexcept { return own_ != nullptr ? own_ : gpu_.stream(); }
    /// What options.compute_stream takes: the test's stream, or null (the device's).
    [[nodiscard]] void* option() const noexcept { return own_; }

private:
    hitch::cuda::device& gpu_;
    cudaStream_t own_ = nullptr;
};

/// How the steps report their layers.
enum class reporting { backward, none };

/// `steps` steps of `dp` on `model` (rank `rank`), starting at step `first`; the records of the steps.
template <class DP, class Model>
std::vector<hitch::train::step_metrics> run_steps(DP& dp, Model& model, int rank, std::uint64_t first,
                                                  std::uint64_t steps, const gradient_plan& plan,
                                                  reporting report = reporting::backward,
                                                  std::uint64_t micro_batches = 1) {
    std::vector<hitch::train::step_metrics> records;
    const std::size_t layers = model.sizes_count();
    for (std::uint64_t s = first; s < first + steps; ++s)
        for (std::uint64_t m = 0; m < micro_batches; ++m) {
            const std::uint64_t key = s * micro_batches + m;
            for (std::size_t k = layers; k-- > 0;) {
                if (plan.skipped && plan.skipped(key, k)) continue;
                model.write_gradient(k, plan, rank, key);
                if (report == reporting::backward) dp.gradient_ready(k);
            }
            records.push_back(dp.step(0.25));
        }
    model.finish();
    return records;
}

/// The first (layer, element) where two models' parameters differ in their bits, as text ("" when none).
inline std::string first_difference(const std::vector<std::vector<float>>& a,
                                    const std::vector<std::vector<float>>& b) {
    if (a.size() != b.size()) return "different layer counts";
    for (std::size_t k = 0; k < a.size(); ++k) {
        if (a[k].size() != b[k].size()) return "layer " + std::to_string(k) + ": different sizes";
        for (std::size_t i = 0; i < a[k].size(); ++i)
            if (std::memcmp(&a[k][i], &b[k][i], sizeof(float)) != 0)
                return "layer " + std::to_string(k) + " element " + std::to_string(i) + ": " + std::to_string(a[k][i]) +
                       " against " + std::to_string(b[k][i]);
    }
    return {};
}

}  // namespace hitch_test
