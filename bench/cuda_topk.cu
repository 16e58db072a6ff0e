// hitch-bench-cuda-topk: top-k selection on the GPU (the sparse codecs' radix select, exact and by sampled
// threshold) against a full CUB radix sort of the same bucket in the same run, and every sparse codec's encode
// (threshold, topk, dgc, randomk, powersgd) as a fraction of a device-to-device copy of the bucket. PyTorch's
// torch.topk on the same size and density is measured by bench/cuda_topk_torch.py (the target: top-k at least 2x
// torch.topk's speed).
//
//   hitch-bench-cuda-topk [--json] [--n N] [--density D] [--repeats R] [--device K] [--no-check]
//
// Defaults: n = 25,000,000 gradient-like floats (ResNet-50 has 25,557,032 parameters), density 0.001 (k = 25,000).
// Times are medians over `repeats` runs, each the mean of 10 calls timed with CUDA events on the device's stream
// after a warm-up (a selection's own read-backs included: they are part of every encode).
//   select   hitch.exact     radix select: three histogram passes, the tie scan, one DeviceSelect pass
//            hitch.sampled   sampled threshold, one DeviceSelect pass, the exact selection among the candidates
//            cub.sort        cub::DeviceRadixSort::SortPairsDescending of (|v| bits, index) over the whole bucket,
//                            the k first taken (the indices are then in magnitude order, not sorted)
//   encode   each codec's device_codec::encode of the bucket into a device message (checksummed), GB/s = 4 n bytes
//            of bucket over the time; the copy's GB/s counts its read and write, 8 n bytes; fraction = the ratio, so
//            an encode that reads the bucket once at the speed of the copy scores 1.
// Unless --no-check, the selections are first compared with the CPU's exact top-k of the same values (the same
// indices), and each codec's message with the CPU codec's (the same bytes; PowerSGD: the same size).
// --json prints one object per line:
//   {"bench":"cuda_topk","kind":"select","impl":"hitch.exact","device":"...","n":25000000,"k":25000,
//    "median_ms":...,"speedup_vs_sort":...}
//   {"bench":"cuda_topk","kind":"encode","impl":"topk","device":"...","n":...,"median_ms":...,"GBs":...,
//    "copy_GBs":...,"fraction":...}

#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "hitch/compress/dgc.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/compress/randomk.hpp"
#include "hitch/compress/threshold.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/cuda/compress/dgc.cuh"
#include "hitch/cuda/compress/powersgd.cuh"
#include "hitch/cuda/compress/randomk.cuh"
#include "hitch/cuda/compress/threshold.cuh"
#include "hitch/cuda/compress/topk.cuh"
#include "hitch/cuda/device.hpp"
#include "hitch/device/buffer.hpp"

namespace {

namespace hc = hitch::compress;
namespace cc = hitch::cuda::compress;
namespace sp = hitch::cuda::compress::detail::sparse;
using hitch::cuda::device;

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "hitch-bench-cuda-topk: %s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

/// Gradient-like values from a counter hash: mostly small, 1% twenty times larger, 2% exact zeros.
__global__ void fill(float* p, std::size_t n, std::uint64_t seed) {
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
        std::uint64_t x = seed ^ (i * 0x9e3779b97f4a7c15ull);
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        x ^= x >> 31;
        const float a = static_cast<float>(x >> 40) / static_cast<float>(1u << 24) - 0.5f;  // [-0.5, 0.5)
        const float b = static_cast<float>((x >> 8) & 0xffffu) / 65536.0f;
        const float c = static_cast<float>(x & 0xffu) / 256.0f;
        p[i] = c < 0.02f ? 0.0f : 2e-3f * a * (1.0f + a * a * 8.0f) * (b < 0.01f ? 20.0f : 1.0f);
    }
}

/// (|v| bits, index) for the sort baseline.
__global__ void magnitude_keys(const float* v, std::size_t n, std::uint32_t* keys, std::uint32_t* index) {
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
        keys[i] = sp::magnitude_bits(v[i]);
        index[i] = static_cast<std::uint32_t>(i);
    }
}

/// Median over `repeats` of the mean time of 10 calls of f (after one warm-up call), in milliseconds.
double time_ms(device& dev, int repeats, const std::function<void()>& f) {
    f();
    dev.synchronize();
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
        check(cudaEventRecord(start, dev.stream()), "cudaEventRecord");
        for (int k = 0; k < 10; ++k) f();
        check(cudaEventRecord(stop, dev.stream()), "cudaEventRecord");
        check(cudaEventSynchronize(stop), "cudaEventSynchronize");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        times.push_back(ms / 10.0);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

struct options {
    bool json = false;
    std::size_t n = 25'000'000;
    double density = 0.001;
    int repeats = 10;
    int device = 0;
    bool check = true;
};

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "hitch-bench-cuda-topk: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--json")
            o.json = true;
        else if (a == "--no-check")
            o.check = false;
        else if (a == "--n")
            o.n = std::stoull(value());
        else if (a == "--density")
            o.density = std::stod(value());
        else if (a == "--repeats")
            o.repeats = std::max(1, std::stoi(value()));
        else if (a == "--device")
            o.device = std::stoi(value());
        else {
            std::fprintf(stderr,
                         "usage: hitch-bench-cuda-topk [--json] [--n N] [--density D] [--repeats R] [--device K] "
                         "[--no-check]\n");
            std::exit(2);
        }
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    const options o = parse(argc, argv);
    if (!hitch::cuda::available()) {
        std::printf(o.json ? "{\"bench\":\"cuda_topk\",\"skipped\":\"no CUDA device\"}\n"
                           : "hitch-bench-cuda-topk: no CUDA device\n");
        return 0;
    }
    device dev(o.device);
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, o.device), "cudaGetDeviceProperties");
    const std::size_t n = o.n;
    const std::size_t k = hc::detail::selected_count(n, o.density);
    hitch::device_buffer<float, device> v(dev, n), copy(dev, n);
    fill<<<1024, 256, 0, dev.stream()>>>(v.data(), n, 7);
    check(cudaGetLastError(), "fill");
    const hitch::tensor_view<const float> bucket(v.data(), n, hitch::memory_space::cuda);
    std::vector<float> host(n);
    dev.copy_to_host(host.data(), v.data(), n * sizeof(float));

    // ---- the copy ----
    const double copy_ms = time_ms(dev, o.repeats, [&] {
        check(cudaMemcpyAsync(copy.data(), v.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, dev.stream()),
              "cudaMemcpyAsync");
    });
    const double copy_gbs = 8.0 * static_cast<double>(n) / (copy_ms * 1e6);

    // ---- selections ----
    sp::select_workspace ws;
    const hc::detail::sampling how{};
    std::vector<std::uint64_t> want;
    if (o.check) {
        hc::detail::sparse_selection sel;
        std::vector<float> scratch;
        if (!hc::detail::topk_exact(host.data(), n, k, sel, scratch)) {
            std::fprintf(stderr, "hitch-bench-cuda-topk: non-finite data\n");
            return 1;
        }
        want = sel.index;
    }
    const auto selected = [&](const sp::selection_result& r) {
        std::vector<std::uint64_t> got(r.count);
        if (r.count != 0) dev.copy_to_host(got.data(), ws.selected.data(), r.count * sizeof(std::uint64_t));
        return got;
    };
    int failures = 0;
    const double exact_ms =
        time_ms(dev, o.repeats, [&] { (void)sp::select_topk(dev, ws, v.data(), n, k, false, 0, how); });
    if (o.check && selected(sp::select_topk(dev, ws, v.data(), n, k, false, 0, how)) != want) {
        std::fprintf(stderr, "hitch-bench-cuda-topk: exact selection differs from the CPU's\n");
        ++failures;
    }
    std::uint64_t key = 1;
    const double sampled_ms =
        time_ms(dev, o.repeats, [&] { (void)sp::select_topk(dev, ws, v.data(), n, k, true, ++key, how); });
    if (o.check && selected(sp::select_topk(dev, ws, v.data(), n, k, true, ++key, how)) != want) {
        std::fprintf(stderr, "hitch-bench-cuda-topk: sampled selection differs from the CPU's\n");
        ++failures;
    }
    // The baseline: sort the whole bucket by magnitude.
    hitch::device_buffer<std::uint32_t, device> keys(dev, n), keys_out(dev, n), index(dev, n), index_out(dev, n);
    std::size_t temp_bytes = 0;
    check(
        cub::DeviceRadixSort::SortPairsDescending(nullptr, temp_bytes, keys.data(), keys_out.data(), index.data(),
                                                  index_out.data(), static_cast<std::int64_t>(n), 0, 31, dev.stream()),
        "cub::DeviceRadixSort");
    hitch::device_buffer<std::byte, device> temp(dev, temp_bytes);
    const double sort_ms = time_ms(dev, o.repeats, [&] {
        magnitude_keys<<<2048, 256, 0, dev.stream()>>>(v.data(), n, keys.data(), index.data());
        check(cub::DeviceRadixSort::SortPairsDescending(temp.data(), temp_bytes, keys.data(), keys_out.data(),
                                                        index.data(), index_out.data(), static_cast<std::int64_t>(n), 0,
                                                        31, dev.stream()),
              "cub::DeviceRadixSort");
    });
    const auto select_line = [&](const char* impl, double ms) {
        if (o.json)
            std::printf(
                "{\"bench\":\"cuda_topk\",\"kind\":\"select\",\"impl\":\"%s\",\"device\":\"%s\",\"n\":%zu,"
                "\"k\":%zu,\"median_ms\":%.4f,\"speedup_vs_sort\":%.3f}\n",
                impl, prop.name, n, k, ms, sort_ms / ms);
        else
            std::printf("select %-14s n %zu k %zu  %9.4f ms  %6.2fx the sort\n", impl, n, k, ms, sort_ms / ms);
    };
    select_line("hitch.exact", exact_ms);
    select_line("hitch.sampled", sampled_ms);
    select_line("cub.sort", sort_ms);

    // ---- every sparse codec's encode ----
    cc::device_message message(dev);
    const auto encode_line = [&](const char* impl, double ms) {
        const double gbs = 4.0 * static_cast<double>(n) / (ms * 1e6);
        if (o.json)
            std::printf(
                "{\"bench\":\"cuda_topk\",\"kind\":\"encode\",\"impl\":\"%s\",\"device\":\"%s\",\"n\":%zu,"
                "\"median_ms\":%.4f,\"GBs\":%.2f,\"copy_GBs\":%.2f,\"fraction\":%.3f}\n",
                impl, prop.name, n, ms, gbs, copy_gbs, gbs / copy_gbs);
        else
            std::printf("encode %-14s n %zu  %9.4f ms  %8.2f GB/s  %.3f of the copy (%.2f GB/s)\n", impl, n, ms, gbs,
                        gbs / copy_gbs, copy_gbs);
    };
    const auto bench_codec = [&](const char* impl, const auto& host_codec, bool same_bytes) {
        using H = std::remove_cvref_t<decltype(host_codec)>;
        const hc::device_codec<H, device> codec(host_codec);
        auto s = codec.make_state(dev, n);
        if (o.check) {
            auto hs = host_codec.make_state(n);
            std::vector<std::byte> hm;
            host_codec.encode(hitch::tensor_view<const float>(host), hs, hm);
            codec.encode(dev, bucket, s, message);
            const auto got = message.to_host();
            if (same_bytes ? got != hm : got.size() != hm.size()) {
                std::fprintf(stderr, "hitch-bench-cuda-topk: %s's message differs from the CPU codec's\n", impl);
                ++failures;
            }
        }
        encode_line(impl, time_ms(dev, o.repeats, [&] { (void)codec.encode(dev, bucket, s, message); }));
    };
    bench_codec("topk.exact", hc::topk({.density = o.density, .method = hc::topk_method::exact}), true);
    bench_codec("topk.sampled", hc::topk({.density = o.density}), true);
    bench_codec("dgc", hc::dgc({.final_density = o.density}), true);
    bench_codec("threshold", hc::threshold({.tau = 5e-3f}), true);
    bench_codec("randomk", hc::randomk({.density = o.density}), true);
    bench_codec("randomk.0.01", hc::randomk({.density = 0.01}), true);
    bench_codec("powersgd.r4", hc::powersgd({.rank = 4}), false);
    return failures == 0 ? 0 : 1;
}
