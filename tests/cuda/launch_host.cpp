// The launch geometry and the host side of the host/device arithmetic, on the host (no GPU needed).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "hitch/cuda/detail/hd.hpp"
#include "hitch/cuda/detail/launch.hpp"

using hitch::cuda::detail::grid_blocks;
using hitch::cuda::detail::max_grid_blocks;

TEST_CASE("grid_blocks covers n elements with at least one block and at most the cap", "[cuda][host]") {
    CHECK(grid_blocks(0) == 1);
    CHECK(grid_blocks(1) == 1);
    CHECK(grid_blocks(256) == 1);
    CHECK(grid_blocks(257) == 2);
    CHECK(grid_blocks(1000, 128, 4) == 2);
    CHECK(grid_blocks(std::size_t{1} << 40) == max_grid_blocks);
    for (std::size_t n : {31u, 32u, 33u, (1u << 20) + 3u}) {
        const unsigned b = grid_blocks(n, 256, 2);
        // A grid-stride loop visits every element exactly once when it covers n or is capped.
        CHECK((static_cast<std::size_t>(b) * 512 >= n || b == max_grid_blocks));
        CHECK((b == 1 || static_cast<std::size_t>(b - 1) * 512 < n));
    }
}

TEST_CASE("hd arithmetic is IEEE arithmetic on the host, and non_finite goes by the bits", "[cuda][host]") {
    namespace hd = hitch::cuda::hd;
    CHECK(hd::add(0.1f, 0.2f) == 0.1f + 0.2f);
    CHECK(hd::mul(3.0f, 1.0f / 3.0f) == 3.0f * (1.0f / 3.0f));
    CHECK(hd::div(1.0f, 3.0f) == 1.0f / 3.0f);
    CHECK(hd::sqrt(2.0f) == std::sqrt(2.0f));
    CHECK(hd::from_bits(hd::bits(-1.5f)) == -1.5f);
    CHECK(hd::non_finite(std::numeric_limits<float>::infinity()));
    CHECK(hd::non_finite(-std::numeric_limits<float>::quiet_NaN()));
    CHECK_FALSE(hd::non_finite(std::numeric_limits<float>::max()));
    CHECK_FALSE(hd::non_finite(std::numeric_limits<float>::denorm_min()));
}
