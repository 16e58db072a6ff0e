// hitch-bench-cuda-compress: every dense GPU codec's encode and decode (none, fp16, bf16, onebit, qsgd fixed and
// Elias, terngrad one- and two-pass, and error_feedback of onebit, qsgd and terngrad) on a bucket of 25M gradient-like
// floats, as a fraction of a device-to-device copy of the bucket measured in the same run.
//
//   hitch-bench-cuda-compress [--json] [--n N] [--repeats R] [--device K] [--only a,b] [--no-check]
//
// Times are medians over `repeats` runs, each the mean of 10 calls timed with CUDA events on the device's stream after
// a warm-up; an encode's own read-back (whether the bucket was finite, the size of an Elias message) is part of it.
// GB/s counts the 4 n bytes of the float bucket (read by an encode, rebuilt by a decode); the copy's GB/s counts its
// read and write, 8 n bytes; fraction = GBs / copy_GBs, so an encode that reads the bucket once as fast as the copy
// moves it scores 1. Unless --no-check, each codec's GPU message is first compared with the CPU codec's for the same
// bucket and random counters (the same bytes). --json prints one object per line:
//   {"bench":"cuda_compress","kind":"encode","impl":"fp16","device":"...","n":25000000,"wire_bytes":50000032,
//    "ratio":2.00,"median_ms":...,"GBs":...,"copy_GBs":...,"fraction":...}
// (kind "decode" for the decodes, and {"bench":"cuda_compress","kind":"copy",...} for the copy itself).

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

#include "hitch/compress/bf16.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/terngrad.hpp"
#include "hitch/cuda/compress/bf16.cuh"
#include "hitch/cuda/compress/error_feedback.cuh"
#include "hitch/cuda/compress/fp16.cuh"
#include "hitch/cuda/compress/none.cuh"
#include "hitch/cuda/compress/onebit.cuh"
#include "hitch/cuda/compress/qsgd.cuh"
#include "hitch/cuda/compress/terngrad.cuh"
#include "hitch/cuda/device.hpp"
#include "hitch/device/buffer.hpp"

namespace {

namespace hc = hitch::compress;
using hitch::cuda::device;
using hitch::cuda::compress::device_message;

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "hitch-bench-cuda-compress: %s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

/// Gradient-like values from a counter hash: roughly normal (a sum of four uniforms), with a scale that changes every
/// 65536 elements as layers' gradients do.
__global__ void fill(float* p, std::size_t n, std::uint64_t seed) {
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
        float sum = 0.0f;
        for (std::uint64_t k = 0; k < 4; ++k) {
            std::uint64_t x = seed ^ ((4 * i + k) * 0x9e3779b97f4a7c15ull);
            x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
            x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
            x ^= x >> 31;
            sum += static_cast<float>(x >> 40) / static_cast<float>(1u << 24) - 0.5f;
        }
        const float scale = 1e-3f * static_cast<float>(1 + (i >> 16) % 7);
        p[i] = scale * sum;
    }
}

struct options {
    bool json = false;
    bool verify = true;
    std::size_t n = 25000000;
    int repeats = 7;
    int ordinal = 0;
    std::vector<std::string> only;
};

/// Median over `repeats` of the mean time of 10 calls of f, timed with events on the stream (after one warm-up).
double median_ms(device& dev, int repeats, const std::function<void()>& f) {
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    f();
    dev.synchronize();
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
        check(cudaEventRecord(start, dev.stream()), "cudaEventRecord");
        for (int k = 0; k < 10; ++k) f();
        check(cudaEventRecord(stop, dev.stream()), "cudaEventRecord");
        check(cudaEventSynchronize(stop), "cudaEventSynchronize");
        float ms = 0.0f;
        check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        times.push_back(static_cast<double>(ms) / 10.0);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

struct context {
    device& dev;
    const options& o;
    const std::string& name;
    const hitch::device_buffer<float, device>& bucket;
    const std::vector<float>& host;
    double copy_gbs;
    int failures = 0;
};

void report(context& c, const char* kind, const std::string& impl, std::size_t wire, double ms) {
    const double gbs = 4.0 * static_cast<double>(c.o.n) / (ms * 1e6);
    const double ratio = wire == 0 ? 0.0 : 4.0 * static_cast<double>(c.o.n) / static_cast<double>(wire);
    if (c.o.json)
        std::printf(
            "{\"bench\":\"cuda_compress\",\"kind\":\"%s\",\"impl\":\"%s\",\"device\":\"%s\",\"n\":%zu,"
            "\"wire_bytes\":%zu,\"ratio\":%.2f,\"median_ms\":%.4f,\"GBs\":%.2f,\"copy_GBs\":%.2f,\"fraction\":%.3f}\n",
            kind, impl.c_str(), c.name.c_str(), c.o.n, wire, ratio, ms, gbs, c.copy_gbs, gbs / c.copy_gbs);
    else
        std::printf("%-7s %-16s %13zu %7.2f %10.3f %9.1f %7.3f\n", kind, impl.c_str(), wire, ratio, ms, gbs,
                    gbs / c.copy_gbs);
}

/// Times Codec's GPU encode and decode of the bucket; first checks its message against the CPU codec's.
template <class Codec>
void run(context& c, const std::string& impl, const Codec& codec) {
    if (!c.o.only.empty() && std::find(c.o.only.begin(), c.o.only.end(), impl) == c.o.only.end()) return;
    const hc::device_codec<Codec, device> dc(codec);
    auto state = dc.make_state(c.dev, c.o.n);
    device_message message(c.dev);
    const auto view = c.bucket.view().as_const();
    if (c.o.verify) {
        auto host_state = codec.make_state(c.o.n);
        std::vector<std::byte> expected;
        codec.encode(hitch::tensor_view<const float>(c.host.data(), c.host.size()), host_state, expected);
        dc.encode(c.dev, view, state, message);
        if (message.to_host() != expected) {
            std::fprintf(stderr, "CHECK FAILED %s: the GPU message differs from the CPU codec's\n", impl.c_str());
            ++c.failures;
        }
    }
    std::size_t wire = 0;
    const double encode_ms = median_ms(c.dev, c.o.repeats, [&] { wire = dc.encode(c.dev, view, state, message); });
    report(c, "encode", impl, wire, encode_ms);
    hitch::device_buffer<float, device> out(c.dev, c.o.n);
    const double decode_ms = median_ms(c.dev, c.o.repeats, [&] { dc.decode(c.dev, message.view(), out.view()); });
    report(c, "decode", impl, wire, decode_ms);
}

}  // namespace

int main(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "hitch-bench-cuda-compress: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--json") {
            o.json = true;
        } else if (a == "--no-check") {
            o.verify = false;
        } else if (a == "--n") {
            o.n = std::strtoull(value().c_str(), nullptr, 10);
        } else if (a == "--repeats") {
            o.repeats = std::max(1, std::atoi(value().c_str()));
        } else if (a == "--device") {
            o.ordinal = std::atoi(value().c_str());
        } else if (a == "--only") {
            std::string list = value();
            for (std::size_t at = 0; at <= list.size();) {
                const std::size_t comma = std::min(list.find(',', at), list.size());
                o.only.push_back(list.substr(at, comma - at));
                at = comma + 1;
            }
        } else {
            std::fprintf(stderr,
                         "usage: hitch-bench-cuda-compress [--json] [--n N] [--repeats R] [--device K] [--only a,b] "
                         "[--no-check]\n");
            return a == "--help" ? 0 : 2;
        }
    }
    if (!hitch::cuda::available()) {
        std::printf(o.json ? "{\"bench\":\"cuda_compress\",\"skipped\":\"no CUDA device\"}\n"
                           : "hitch-bench-cuda-compress: no CUDA device: skipped\n");
        return 0;
    }
    device dev(o.ordinal);
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, o.ordinal), "cudaGetDeviceProperties");
    const std::string name = prop.name;

    hitch::device_buffer<float, device> bucket(dev, o.n), copy(dev, o.n);
    fill<<<4096, 256, 0, dev.stream()>>>(bucket.data(), o.n, 0x5eed);
    check(cudaGetLastError(), "fill");
    std::vector<float> host(o.n);
    dev.copy_to_host(host.data(), bucket.data(), o.n * sizeof(float));

    const double copy_ms = median_ms(dev, o.repeats, [&] { dev.copy(copy.data(), bucket.data(), o.n * 4); });
    const double copy_gbs = 8.0 * static_cast<double>(o.n) / (copy_ms * 1e6);
    if (o.json)
        std::printf(
            "{\"bench\":\"cuda_compress\",\"kind\":\"copy\",\"device\":\"%s\",\"n\":%zu,\"median_ms\":%.4f,"
            "\"copy_GBs\":%.2f}\n",
            name.c_str(), o.n, copy_ms, copy_gbs);
    else
        std::printf(
            "hitch-bench-cuda-compress: %zu floats on %s; device-to-device copy %.3f ms, %.1f GB/s\n\n"
            "%-7s %-16s %13s %7s %10s %9s %7s\n",
            o.n, name.c_str(), copy_ms, copy_gbs, "kind", "impl", "wire_bytes", "ratio", "median_ms", "GBs",
            "fraction");

    context c{dev, o, name, bucket, host, copy_gbs};
    hc::qsgd_options elias;
    elias.levels = 1;
    elias.coding = hc::qsgd_coding::elias_gamma;
    hc::terngrad_options clipped;
    clipped.clip_sigmas = 2.5;
    hc::onebit_options grouped;
    grouped.group_size = 512;
    run(c, "none", hc::none{});
    run(c, "fp16", hc::fp16{});
    run(c, "bf16", hc::bf16{});
    run(c, "onebit", hc::onebit{});
    run(c, "onebit_g512", hc::onebit(grouped));
    run(c, "qsgd", hc::qsgd{});
    run(c, "qsgd_elias", hc::qsgd(elias));
    run(c, "terngrad", hc::terngrad{});
    run(c, "terngrad_clip", hc::terngrad(clipped));
    run(c, "ef_fp16", hc::error_feedback<hc::fp16>{});
    run(c, "ef_onebit", hc::error_feedback<hc::onebit>{});
    run(c, "ef_qsgd", hc::error_feedback<hc::qsgd>{});
    run(c, "ef_terngrad", hc::error_feedback<hc::terngrad>{});
    return c.failures == 0 ? 0 : 1;
}
