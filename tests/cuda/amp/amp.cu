// Mixed precision on the GPU against the CPU: the conversion functions run on the GPU on every 16-bit pattern and
// the float boundary patterns; amp::mixed_precision_optimizer<O, Low, single_process, cuda::device> against the CPU
// one over several steps (a skipped step included); the loss scaler's overflow check on GPU gradients; the gradient
// guard's report from the GPU. A NaN matches any NaN where the optimizer's arithmetic made it (the GPU's NaN is
// canonical); the conversions themselves are compared bit for bit. Skips (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "hitch/amp/loss_scaler.hpp"
#include "hitch/amp/mixed_precision.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/cuda/amp/convert.hpp"
#include "hitch/cuda/amp/mixed_precision.cuh"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/optim/all.cuh"
#include "hitch/device/buffer.hpp"
#include "hitch/optim/model_optimizer.hpp"
#include "reference.hpp"

namespace {

namespace ca = hitch::cuda::amp;
using hitch::cuda::device;

__global__ void convert_patterns(const std::uint16_t* in16, float* half_out, float* bf16_out, std::size_t n16,
                                 const float* in32, std::uint16_t* to_half, std::uint16_t* to_bf16, std::size_t n32) {
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n16; i += stride) {
        half_out[i] = ca::half_bits_to_float(in16[i]);
        bf16_out[i] = ca::bfloat16_bits_to_float(in16[i]);
    }
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n32; i += stride) {
        to_half[i] = ca::float_to_half_bits(in32[i]);
        to_bf16[i] = ca::float_to_bfloat16_bits(in32[i]);
    }
}

template <class T>
std::vector<T> download(device& d, const hitch::device_buffer<T, device>& b) {
    std::vector<T> out(b.size());
    d.copy_to_host(out.data(), b.data(), b.size() * sizeof(T));
    return out;
}
template <class T>
hitch::device_buffer<T, device> upload(device& d, const std::vector<T>& v) {
    hitch::device_buffer<T, device> b(d, v.size());
    d.copy_from_host(b.data(), v.data(), v.size() * sizeof(T));
    return b;
}

bool same_or_nan(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }

template <class Low>
bool same_or_nan(Low a, Low b) {
    const float x = static_cast<float>(a), y = static_cast<float>(b);
    return a.bits() == b.bits() || (x != x && y != y);
}

}  // namespace

TEST_CASE("the 16-bit conversions give the same bits on the GPU as hitch::half and hitch::bfloat16", "[cuda][amp]") {
    device dev;
    std::vector<std::uint16_t> in16(65536);
    for (std::uint32_t b = 0; b < 65536; ++b) in16[b] = static_cast<std::uint16_t>(b);
    std::vector<float> in32;
    for (std::uint32_t sign = 0; sign < 2; ++sign)
        for (std::uint32_t e = 0; e < 256; ++e)
            for (std::uint32_t k = 0; k < 23; ++k)
                for (const std::uint32_t m : {1u << k, (1u << k) - 1u, (1u << k) + 1u, 3u << k, (3u << k) - 1u,
                                              static_cast<std::uint32_t>(hitch_test::splitmix64(e * 23 + k))})
                    in32.push_back(hitch::cuda::hd::from_bits((sign << 31) | (e << 23) | (m & 0x7fffffu)));
    auto d16 = upload(dev, in16);
    auto d32 = upload(dev, in32);
    hitch::device_buffer<float, device> half_out(dev, in16.size()), bf16_out(dev, in16.size());
    hitch::device_buffer<std::uint16_t, device> to_half(dev, in32.size()), to_bf16(dev, in32.size());
    convert_patterns<<<256, 256, 0, dev.stream()>>>(d16.data(), half_out.data(), bf16_out.data(), in16.size(),
                                                    d32.data(), to_half.data(), to_bf16.data(), in32.size());
    REQUIRE(cudaGetLastError() == cudaSuccess);
    const auto h = download(dev, half_out), b = download(dev, bf16_out);
    for (std::size_t i = 0; i < in16.size(); ++i) {
        INFO("pattern " << i);
        const float hf = static_cast<float>(hitch::half::from_bits(in16[i]));
        REQUIRE(std::memcmp(&h[i], &hf, sizeof(float)) == 0);
        const float bf = static_cast<float>(hitch::bfloat16::from_bits(in16[i]));
        REQUIRE(std::memcmp(&b[i], &bf, sizeof(float)) == 0);
    }
    const auto th = download(dev, to_half), tb = download(dev, to_bf16);
    for (std::size_t i = 0; i < in32.size(); ++i) {
        INFO("float bits " << hitch::cuda::hd::bits(in32[i]));
        REQUIRE(th[i] == hitch::half(in32[i]).bits());
        REQUIRE(tb[i] == hitch::bfloat16(in32[i]).bits());
    }
}

namespace {

/// A model in Low precision on the host and its copy on the GPU.
template <class Low>
struct low_model {
    std::vector<std::vector<Low>> w, g;
    std::vector<hitch::device_buffer<Low, device>> dw, dg;
    std::vector<hitch::amp::low_precision_layer<Low>> host_layers, device_layers;

    low_model(device& dev, const std::vector<std::size_t>& sizes) {
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            w.emplace_back();
            for (std::size_t i = 0; i < sizes[k]; ++i) w.back().push_back(Low(0.5f * hitch_test::uniform(21, k, i)));
            g.emplace_back(sizes[k]);
            dw.push_back(upload(dev, w[k]));
            dg.emplace_back(dev, sizes[k]);
        }
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            const hitch::layer_flags flags = k == 1 ? hitch::layer_flags::bias_or_norm() : hitch::layer_flags{};
            host_layers.push_back({"l" + std::to_string(k), hitch::tensor_view<Low>(w[k].data(), sizes[k]),
                                   hitch::tensor_view<Low>(g[k].data(), sizes[k]), flags});
            device_layers.push_back(
                {"l" + std::to_string(k), hitch::tensor_view<Low>(dw[k].data(), sizes[k], hitch::memory_space::cuda),
                 hitch::tensor_view<Low>(dg[k].data(), sizes[k], hitch::memory_space::cuda), flags});
        }
    }
    void set_gradients(device& dev, int t, float scale) {
        for (std::size_t k = 0; k < g.size(); ++k) {
            for (std::size_t i = 0; i < g[k].size(); ++i)
                g[k][i] = Low(scale * 1e-3f * hitch_test::uniform(30 + static_cast<std::uint64_t>(t), k, i));
            if (t == 2 && k == 2 && !g[k].empty()) g[k].back() = Low(std::numeric_limits<float>::infinity());
            if (t == 3 && k == 0 && !g[k].empty()) g[k].front() = Low(std::numeric_limits<float>::quiet_NaN());
            dev.copy_from_host(dg[k].data(), g[k].data(), g[k].size() * sizeof(Low));
        }
    }
};

template <class O, class Low>
void check_mixed(const typename O::options_type& options, bool scaling) {
    device dev;
    const std::vector<std::size_t> sizes = {1, 33, (std::size_t{1} << 20) + 3, 0, 4097};
    low_model<Low> model(dev, sizes);
    hitch::amp::mixed_precision_options mp;
    mp.loss_scaling = scaling;
    mp.scaler.initial_scale = 1024.0f;
    mp.nonfinite = hitch::amp::nonfinite_policy::skip_step;
    hitch::amp::mixed_precision_optimizer<O, Low> cpu(options, model.host_layers, mp);
    hitch::amp::mixed_precision_optimizer<O, Low, hitch::amp::single_process, device> gpu(options, model.device_layers,
                                                                                          dev, mp);
    for (std::size_t k = 0; k < sizes.size(); ++k) {  // the masters start as float(w_low)
        std::vector<float> m(sizes[k]);
        dev.copy_to_host(m.data(), gpu.master(k).data(), m.size() * sizeof(float));
        REQUIRE((m.empty() || std::memcmp(m.data(), cpu.master(k).data(), m.size() * sizeof(float)) == 0));
    }
    for (int t = 0; t < 6; ++t) {
        model.set_gradients(dev, t, cpu.loss_scale());
        const bool a = cpu.step(0.01f, static_cast<std::uint64_t>(t));
        const bool b = gpu.step(0.01f, static_cast<std::uint64_t>(t));
        REQUIRE(a == b);
        CHECK(a == (t != 2 && t != 3));
        REQUIRE(cpu.skipped_steps() == gpu.skipped_steps());
        REQUIRE(cpu.loss_scale() == gpu.loss_scale());
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            INFO("step " << t << ", layer " << k);
            std::vector<Low> low(sizes[k]);
            dev.copy_to_host(low.data(), model.dw[k].data(), low.size() * sizeof(Low));
            for (std::size_t i = 0; i < low.size(); ++i) REQUIRE(same_or_nan(low[i], model.w[k][i]));
            std::vector<float> m(sizes[k]);
            dev.copy_to_host(m.data(), gpu.master(k).data(), m.size() * sizeof(float));
            for (std::size_t i = 0; i < m.size(); ++i) REQUIRE(same_or_nan(m[i], cpu.master(k)[i]));
        }
    }
    std::stringstream a, b;
    cpu.save(a);
    gpu.save(b);
    CHECK(a.str().size() == b.str().size());
}

}  // namespace

TEST_CASE("mixed precision on the GPU is the CPU's, skipped steps included", "[cuda][amp]") {
    check_mixed<hitch::optim::adam, hitch::half>({.weight_decay = 1e-4f}, true);
    check_mixed<hitch::optim::lamb, hitch::half>({.weight_decay = 1e-2f}, true);
    check_mixed<hitch::optim::lars<hitch::optim::momentum>, hitch::bfloat16>({.weight_decay = 1e-4f}, true);
    check_mixed<hitch::optim::adamw, hitch::bfloat16>({}, false);
    check_mixed<hitch::optim::momentum, hitch::bfloat16>({.nesterov = true}, false);
}

TEST_CASE("without loss scaling the guard names the GPU's first non-finite gradient as the CPU's", "[cuda][amp]") {
    device dev;
    const std::vector<std::size_t> sizes = {5, 70000, 9};
    low_model<hitch::bfloat16> model(dev, sizes);
    hitch::amp::mixed_precision_options mp;
    mp.loss_scaling = false;
    hitch::amp::mixed_precision_optimizer<hitch::optim::sgd, hitch::bfloat16> cpu({}, model.host_layers, mp);
    hitch::amp::mixed_precision_optimizer<hitch::optim::sgd, hitch::bfloat16, hitch::amp::single_process, device> gpu(
        {}, model.device_layers, dev, mp);
    model.set_gradients(dev, 0, 1.0f);
    model.g[1][69000] = hitch::bfloat16(-std::numeric_limits<float>::infinity());
    model.g[1][40000] = hitch::bfloat16(std::numeric_limits<float>::infinity());
    model.g[2][0] = hitch::bfloat16(std::numeric_limits<float>::quiet_NaN());
    for (std::size_t k = 0; k < sizes.size(); ++k)
        dev.copy_from_host(model.dg[k].data(), model.g[k].data(), sizes[k] * sizeof(hitch::bfloat16));
    std::string cpu_message, gpu_message;
    try {
        cpu.step(0.1f, 7);
    } catch (const hitch::amp::nonfinite_gradient_error& e) {
        cpu_message = e.what();
    }
    try {
        gpu.step(0.1f, 7);
    } catch (const hitch::amp::nonfinite_gradient_error& e) {
        gpu_message = e.what();
    }
    CHECK(cpu_message.find("element 40000") != std::string::npos);
    CHECK(gpu_message == cpu_message);
}

TEST_CASE("the loss scaler checks GPU gradients on the GPU", "[cuda][amp]") {
    device dev;
    const std::vector<std::size_t> sizes = {1, (std::size_t{1} << 20) + 3, 31};
    for (const int where : {-1, 0, 1, 2, 3}) {
        INFO("non-finite at case " << where);
        std::vector<std::vector<float>> g(sizes.size()), w(sizes.size());
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            for (std::size_t i = 0; i < sizes[k]; ++i) {
                g[k].push_back(512.0f * hitch_test::uniform(4, k, i));
                w[k].push_back(hitch_test::uniform(5, k, i));
            }
        }
        const float inf = std::numeric_limits<float>::infinity();
        if (where == 0) g[0][0] = inf;
        if (where == 1) g[1][sizes[1] - 1] = -inf;
        if (where == 2) g[1][4096] = std::numeric_limits<float>::quiet_NaN();
        if (where == 3) g[2][30] = 3e38f;  // large but finite, and smaller after the unscale: no overflow
        std::vector<hitch::device_buffer<float, device>> dw, dg;
        std::vector<hitch::layer> host_layers, device_layers;
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            dw.push_back(upload(dev, w[k]));
            dg.push_back(upload(dev, g[k]));
        }
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            host_layers.push_back({"l", hitch::tensor_view<float>(w[k]), hitch::tensor_view<float>(g[k])});
            device_layers.push_back({"l", hitch::tensor_view<float>(dw[k].data(), sizes[k], hitch::memory_space::cuda),
                                     hitch::tensor_view<float>(dg[k].data(), sizes[k], hitch::memory_space::cuda)});
        }
        hitch::optim::model_optimizer<hitch::optim::momentum> cpu({}, host_layers);
        hitch::optim::model_optimizer<hitch::optim::momentum, device> gpu({}, device_layers, dev);
        hitch::amp::loss_scaler<> cs({.initial_scale = 512.0f}), gs({.initial_scale = 512.0f});
        const bool a = cs.step(cpu, 0.1f);
        const bool b = gs.step(gpu, 0.1f);
        CHECK(a == b);
        CHECK(a == (where == -1 || where == 3));
        CHECK(cs.scale() == gs.scale());
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            const auto back = download(dev, dg[k]);
            for (std::size_t i = 0; i < back.size(); ++i) REQUIRE(same_or_nan(back[i], g[k][i]));  // unscaled alike
            const auto wb = download(dev, dw[k]);
            for (std::size_t i = 0; i < wb.size(); ++i) REQUIRE(same_or_nan(wb[i], w[k][i]));
        }
    }
}
