// hitch::cuda::device against host copies. Skips (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <vector>

#include "hitch/cuda/device.hpp"
#include "hitch/device/buffer.hpp"

namespace {
__global__ void add_one(float* p, std::size_t n) {
    const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (i < n) p[i] += 1.0f;
}
}  // namespace

TEST_CASE("cuda::device round-trips bytes and runs work on its stream", "[cuda]") {
    hitch::cuda::device dev;
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{1} << 22}) {
        std::vector<float> host(n);
        std::iota(host.begin(), host.end(), 0.5f);
        hitch::device_buffer<float, hitch::cuda::device> buffer(dev, n);
        REQUIRE(buffer.view().space() == hitch::memory_space::cuda);
        std::vector<float> zeros(n, 1.0f);
        dev.copy_to_host(zeros.data(), buffer.data(), n * sizeof(float));
        for (float z : zeros) REQUIRE(z == 0.0f);  // device_buffer is zero-initialised
        dev.copy_from_host(buffer.data(), host.data(), n * sizeof(float));
        if (n != 0) add_one<<<static_cast<unsigned>((n + 255) / 256), 256, 0, dev.stream()>>>(buffer.data(), n);
        std::vector<float> back(n);
        dev.copy_to_host(back.data(), buffer.data(), n * sizeof(float));
        for (std::size_t i = 0; i < n; ++i) REQUIRE(back[i] == host[i] + 1.0f);
    }
}

TEST_CASE("cuda::device rejects an ordinal that does not exist", "[cuda]") {
    CHECK_THROWS_AS(hitch::cuda::device(1 << 20), hitch::config_error);
}
