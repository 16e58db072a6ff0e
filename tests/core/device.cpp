#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <vector>

#include "hitch/device/buffer.hpp"
#include "hitch/device/cpu.hpp"

TEST_CASE("cpu device allocates aligned zeroed buffers and copies", "[device]") {
    hitch::cpu dev;
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1000}}) {
        hitch::device_buffer<double, hitch::cpu> buf(dev, n);
        CHECK(buf.size() == n);
        if (n != 0) CHECK(reinterpret_cast<std::uintptr_t>(buf.data()) % hitch::cpu::alignment == 0);
        for (std::size_t i = 0; i < n; ++i) REQUIRE(buf.data()[i] == 0.0);
        std::vector<double> src(n);
        std::iota(src.begin(), src.end(), 1.0);
        dev.copy_from_host(buf.data(), src.data(), n * sizeof(double));
        std::vector<double> back(n);
        dev.copy_to_host(back.data(), buf.data(), n * sizeof(double));
        CHECK(back == src);
        auto moved = std::move(buf);
        CHECK(moved.size() == n);
        CHECK(buf.data() == nullptr);
        CHECK(moved.view().space() == hitch::memory_space::host);
    }
}
