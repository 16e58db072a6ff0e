// hitch-bench-cuda-optim: one optimizer step on the GPU over ResNet-50's parameter tensors (161 tensors, 25,557,032
// floats, bench/resnet50.hpp), through model_optimizer<O, cuda::device> (the fused multi-tensor step) and, for
// comparison, layer by layer; next to a device-to-device copy of the same number of floats measured in the same run.
//
//   hitch-bench-cuda-optim [--json] [--repeats N] [--device K] [--no-check]
//
// Achieved bandwidth counts the bytes each update must move per parameter:
//   sgd 12 (read w, g; write w)          momentum 20 (read w, g, b; write w, b)
//   adam, adamw 28 (read w, g, m, v; write w, m, v)
//   lars<momentum> 28 (norm pass reads w, g: 8; update pass 20)
//   lamb 40 (pass 1 reads w, g, m, v, writes m, v: 24; pass 2 reads w, m, v, writes w: 16)
// and the copy moves 8 bytes per float (read and write). fraction = GBs / copy_GBs. Each time is the median over
// `repeats` runs of 10 steps, timed with CUDA events on the device's stream after a warm-up.
// Unless --no-check, the adam step is first checked against the CPU kernels (model_optimizer<adam, cpu>) on the
// same tensors: the parameters and moments after two steps must have the same bits.
// --json prints one object per line:
//   {"bench":"cuda_optim","impl":"adam","mode":"fused","device":"NVIDIA H100 80GB HBM3","params":25557032,
//    "tensors":161,"median_ms":...,"GBs":...,"copy_GBs":...,"fraction":...}

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "hitch/cuda/device.hpp"
#include "hitch/cuda/optim/all.cuh"
#include "hitch/device/buffer.hpp"
#include "hitch/optim/model_optimizer.hpp"
#include "resnet50.hpp"

namespace {

namespace optim = hitch::optim;
using hitch::cuda::device;

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "hitch-bench-cuda-optim: %s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

/// Uniform values in [-scale, scale) from a counter hash, on the GPU.
__global__ void fill(float* p, std::size_t n, std::uint64_t seed, float scale) {
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
        std::uint64_t x = seed ^ (i * 0x9e3779b97f4a7c15ull);
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        x ^= x >> 31;
        p[i] = scale * (static_cast<float>(x >> 40) / static_cast<float>(1u << 23) - 1.0f);
    }
}

/// ResNet-50's tensors in GPU memory, one allocation each, as a framework holds them.
struct model {
    std::vector<hitch::device_buffer<float, device>> params, grads;
    std::vector<hitch::layer> layers;
    std::size_t total = 0;

    explicit model(device& dev) {
        for (const auto& t : hitch_bench::resnet50_tensors()) {
            params.emplace_back(dev, t.size());
            grads.emplace_back(dev, t.size());
            total += t.size();
        }
        const auto tensors = hitch_bench::resnet50_tensors();
        for (std::size_t k = 0; k < tensors.size(); ++k) {
            const std::size_t n = tensors[k].size();
            fill<<<256, 256, 0, dev.stream()>>>(params[k].data(), n, 2 * k + 1, 0.05f);
            fill<<<256, 256, 0, dev.stream()>>>(grads[k].data(), n, 2 * k + 2, 1e-3f);
            layers.push_back({tensors[k].name,
                              hitch::tensor_view<float>(params[k].data(), n, hitch::memory_space::cuda),
                              hitch::tensor_view<float>(grads[k].data(), n, hitch::memory_space::cuda),
                              tensors[k].bias_or_norm ? hitch::layer_flags::bias_or_norm() : hitch::layer_flags{}});
        }
        check(cudaGetLastError(), "fill");
        dev.synchronize();
    }
};

/// Median milliseconds of `repeats` runs of 10 calls of fn on the device's stream, after a warm-up.
double time_ms(device& dev, int repeats, const std::function<void()>& fn) {
    fn();
    dev.synchronize();
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    std::vector<double> t;
    for (int r = 0; r < repeats; ++r) {
        check(cudaEventRecord(start, dev.stream()), "cudaEventRecord");
        for (int i = 0; i < 10; ++i) fn();
        check(cudaEventRecord(stop, dev.stream()), "cudaEventRecord");
        check(cudaEventSynchronize(stop), "cudaEventSynchronize");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        t.push_back(static_cast<double>(ms) / 10.0);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

/// Two adam steps on the GPU and on the CPU from the same values: true when parameters and moments match bit for
/// bit (the inputs have no NaN).
bool check_adam(device& dev, model& m) {
    std::vector<std::vector<float>> w(m.layers.size()), g(m.layers.size());
    std::vector<hitch::layer> host_layers;
    for (std::size_t k = 0; k < m.layers.size(); ++k) {
        w[k].resize(m.layers[k].size());
        g[k].resize(m.layers[k].size());
        dev.copy_to_host(w[k].data(), m.layers[k].params.data(), w[k].size() * sizeof(float));
        dev.copy_to_host(g[k].data(), m.layers[k].grads.data(), g[k].size() * sizeof(float));
        host_layers.push_back({m.layers[k].name, hitch::view(w[k]), hitch::view(g[k]), m.layers[k].flags});
    }
    const optim::adam::options_type options{.weight_decay = 1e-4f};
    optim::model_optimizer<optim::adam> cpu(options, host_layers);
    optim::model_optimizer<optim::adam, device> gpu(options, m.layers, dev);
    for (int t = 0; t < 2; ++t) {
        cpu.step(1e-3f);
        gpu.step(1e-3f);
    }
    std::vector<float> back;
    for (std::size_t k = 0; k < m.layers.size(); ++k) {
        const auto same = [&](const float* device_data, const std::vector<float>& host) {
            back.resize(host.size());
            dev.copy_to_host(back.data(), device_data, host.size() * sizeof(float));
            return std::memcmp(back.data(), host.data(), host.size() * sizeof(float)) == 0;
        };
        const auto& hs = cpu.state(k);
        const auto& ds = gpu.state(k);
        const std::vector<float> hm(hs.m.data(), hs.m.data() + hs.m.size()), hv(hs.v.data(), hs.v.data() + hs.v.size());
        if (!same(m.layers[k].params.data(), w[k]) || !same(ds.m.data(), hm) || !same(ds.v.data(), hv)) return false;
    }
    return true;
}

struct row {
    std::string impl, mode;
    double ms, bytes_per_param;
};

}  // namespace

int main(int argc, char** argv) {
    bool json = false, verify = true;
    int repeats = 20, ordinal = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--json") {
            json = true;
        } else if (a == "--no-check") {
            verify = false;
        } else if (a == "--repeats" && i + 1 < argc) {
            repeats = std::max(1, std::atoi(argv[++i]));
        } else if (a == "--device" && i + 1 < argc) {
            ordinal = std::atoi(argv[++i]);
        } else {
            std::fprintf(stderr, "usage: hitch-bench-cuda-optim [--json] [--repeats N] [--device K] [--no-check]\n");
            return 2;
        }
    }
    if (!hitch::cuda::available()) {
        std::printf(json ? "{\"bench\":\"cuda_optim\",\"skipped\":\"no CUDA device\"}\n" : "no CUDA device: skipped\n");
        return 0;
    }
    device dev(ordinal);
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
    model m(dev);

    if (verify) {
        const bool ok = check_adam(dev, m);
        std::printf(json ? "{\"bench\":\"cuda_optim\",\"check\":\"adam against the CPU kernels\",\"bitwise\":%s}\n"
                         : "check: adam on the GPU against the CPU kernels: %s\n",
                    ok ? (json ? "true" : "same bits") : (json ? "false" : "DIFFERENT"));
        if (!ok) return 1;
    }

    // The copy bound: one device-to-device copy of as many floats as the model has.
    hitch::device_buffer<float, device> src(dev, m.total), dst(dev, m.total);
    const double copy_ms = time_ms(dev, repeats, [&] { dev.copy(dst.data(), src.data(), m.total * sizeof(float)); });
    const double copy_gbs = 8.0 * static_cast<double>(m.total) / (copy_ms * 1e6);

    std::vector<row> rows;
    const auto run = [&]<class O>(const std::string& impl, const typename O::options_type& options, double bytes) {
        optim::model_optimizer<O, device> opt(options, m.layers, dev);
        rows.push_back({impl, "fused", time_ms(dev, repeats, [&] { opt.step(1e-4f); }), bytes});
        rows.push_back({impl, "per_layer",
                        time_ms(dev, repeats,
                                [&] {
                                    for (std::size_t k = 0; k < opt.size(); ++k) opt.step(k, 1e-4f);
                                }),
                        bytes});
    };
    run.operator()<optim::sgd>("sgd", {.weight_decay = 1e-4f}, 12);
    run.operator()<optim::momentum>("momentum", {.momentum = 0.9f, .weight_decay = 1e-4f}, 20);
    run.operator()<optim::adam>("adam", {.weight_decay = 1e-4f}, 28);
    run.operator()<optim::adamw>("adamw", {}, 28);
    run.operator()<optim::lars<optim::momentum>>("lars<momentum>", {.weight_decay = 5e-5f}, 28);
    run.operator()<optim::lamb>("lamb", {.weight_decay = 1e-2f}, 40);

    if (!json)
        std::printf("%s, %zu tensors, %zu parameters; device-to-device copy %.3f ms = %.1f GB/s\n", prop.name,
                    m.layers.size(), m.total, copy_ms, copy_gbs);
    for (const row& r : rows) {
        const double gbs = r.bytes_per_param * static_cast<double>(m.total) / (r.ms * 1e6);
        if (json)
            std::printf(
                "{\"bench\":\"cuda_optim\",\"impl\":\"%s\",\"mode\":\"%s\",\"device\":\"%s\",\"params\":%zu,"
                "\"tensors\":%zu,\"median_ms\":%.4f,\"GBs\":%.1f,\"copy_GBs\":%.1f,\"fraction\":%.3f}\n",
                r.impl.c_str(), r.mode.c_str(), prop.name, m.total, m.layers.size(), r.ms, gbs, copy_gbs,
                gbs / copy_gbs);
        else
            std::printf("%-16s %-10s %8.3f ms  %7.1f GB/s  %.3f of the copy\n", r.impl.c_str(), r.mode.c_str(), r.ms,
                        gbs, gbs / copy_gbs);
    }
    return 0;
}
