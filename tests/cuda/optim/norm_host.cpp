// The GPU's sums of squares and trust ratios on the host: the lane order of hitch/cuda/optim/math.hpp against
// optim::detail::sum_of_squares (the CPU's, on several threads), the trust ratios against the CPU rules' own, and
// the chunk table of the fused step.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "hitch/core/parallel.hpp"
#include "hitch/cuda/optim/math.hpp"
#include "hitch/cuda/optim/multi_tensor.hpp"
#include "hitch/cuda/optim/rules.hpp"
#include "hitch/optim/detail/norm.hpp"
#include "hitch/optim/lamb.hpp"
#include "hitch/optim/lars.hpp"
#include "reference.hpp"

namespace {

namespace co = hitch::cuda::optim;

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

/// The GPU's sum: each chunk's lanes (block_sum_of_squares), the chunks added in order.
double gpu_sum_of_squares(const std::vector<float>& x) {
    std::vector<double> block;
    for (std::size_t b = 0; b < x.size(); b += co::norm_block)
        block.push_back(co::block_sum_of_squares(x.data() + b, std::min(co::norm_block, x.size() - b)));
    return co::add_block_sums(block.data(), block.size());
}

/// Values over many binades, so the order of the additions shows in the low bits.
std::vector<float> wide_values(std::size_t n, std::uint64_t seed) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) {
        const float u = hitch_test::uniform(seed, 1, i);
        x[i] = u * std::ldexp(1.0f, static_cast<int>(hitch_test::splitmix64(seed + i) % 40) - 20);
    }
    return x;
}

}  // namespace

TEST_CASE("the GPU's sum of squares is the CPU's, bit for bit, on any thread count", "[cuda][optim][host]") {
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{17},
                                std::size_t{31}, std::size_t{32}, std::size_t{33}, std::size_t{4095}, std::size_t{4096},
                                std::size_t{4097}, std::size_t{3 * 4096 + 5}, (std::size_t{1} << 20) + 3}) {
        const std::vector<float> x = wide_values(n, n + 1);
        const double gpu = gpu_sum_of_squares(x);
        for (const std::size_t threads : {std::size_t{1}, std::size_t{2}, std::size_t{3}}) {
            INFO("n = " << n << ", threads = " << threads);
            hitch::parallel_options exec;
            exec.threads = threads;
            exec.min_chunk = 4096;
            CHECK(same_bits(gpu, hitch::optim::detail::sum_of_squares(x.data(), x.size(), exec)));
        }
        CHECK(same_bits(co::norm_from_sum(gpu), hitch_test::documented_norm(x)));
    }
}

TEST_CASE("the order of the sum of squares matters, so the test above can fail", "[cuda][optim][host]") {
    const std::vector<float> x = wide_values((std::size_t{1} << 20) + 3, 9);
    double sequential = 0.0;
    for (const float v : x) sequential += static_cast<double>(v) * static_cast<double>(v);
    CHECK_FALSE(same_bits(sequential, gpu_sum_of_squares(x)));
}

TEST_CASE("the lanes combine pairwise", "[cuda][optim][host]") {
    double lane[16];
    for (int j = 0; j < 16; ++j) lane[j] = std::ldexp(1.0, 60 * (j % 2)) + j;  // big and small alternate
    double expect[16];
    std::memcpy(expect, lane, sizeof lane);
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j) expect[j] = expect[2 * j] + expect[2 * j + 1];
    CHECK(same_bits(co::combine_lanes(lane), expect[0]));
}

TEST_CASE("LARS's trust ratio on the GPU is the CPU rule's", "[cuda][optim][host]") {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    const std::vector<double> sums = {0.0, 1e-300, 1e-45, 0.25, 1.0, 3.0, 12345.678, 1e30, 1e300, inf, nan};
    for (const hitch::optim::lars<hitch::optim::momentum>::options_type options :
         {hitch::optim::lars<hitch::optim::momentum>::options_type{},
          {.trust_coefficient = 0.02f, .weight_decay = 5e-4f, .epsilon = 1e-6f},
          {.trust_coefficient = 1.0f, .weight_decay = 1.0f, .epsilon = 0.0f}}) {
        const hitch::optim::lars<hitch::optim::momentum> rule(options);
        for (const hitch::layer_flags flags :
             {hitch::layer_flags{}, hitch::layer_flags{true, false}, hitch::layer_flags{false, true}})
            for (const double sw : sums)
                for (const double sg : sums) {
                    INFO("w sum " << sw << ", g sum " << sg);
                    CHECK(same_bits(co::lars_trust(sw, sg, co::make_lars_scalars(rule, flags)),
                                    rule.trust_ratio_from_sums(flags, {sw, sg})));
                }
    }
}

TEST_CASE("the chunk table covers every element once, in norm blocks", "[cuda][optim][host]") {
    const std::vector<std::size_t> sizes = {0, 1, 31, 32, 33, 4096, 0, 4097, (std::size_t{1} << 20) + 3, 8192};
    const co::chunk_layout layout = co::make_chunk_layout(sizes);
    REQUIRE(layout.first_chunk.size() == sizes.size());
    std::vector<std::uint64_t> covered(sizes.size(), 0);
    std::uint64_t expected_chunks = 0;
    for (std::size_t t = 0; t < sizes.size(); ++t) expected_chunks += (sizes[t] + 4095) / 4096;
    REQUIRE(layout.chunks.size() == expected_chunks);
    for (std::size_t c = 0; c < layout.chunks.size(); ++c) {
        const co::chunk_entry e = layout.chunks[c];
        REQUIRE(e.tensor < sizes.size());
        // A tensor's chunks are consecutive, in order, from its first_chunk: the partial sums are in block order.
        REQUIRE(c == layout.first_chunk[e.tensor] + e.index);
        const std::uint64_t b = co::chunk_begin(e.index), end = co::chunk_end(sizes[e.tensor], e.index);
        REQUIRE(b % hitch::optim::detail::norm_block == 0);
        REQUIRE(b < end);
        REQUIRE(end - b <= co::chunk_elements);
        REQUIRE(b == covered[e.tensor]);  // no gap, no overlap
        covered[e.tensor] = end;
    }
    for (std::size_t t = 0; t < sizes.size(); ++t) CHECK(covered[t] == sizes[t]);
    CHECK(co::make_chunk_layout(std::vector<std::size_t>{}).chunks.empty());
}

TEST_CASE("a tensor row records its flags and whether every pointer is 16-byte aligned", "[cuda][optim][host]") {
    alignas(16) float w[12] = {}, g[12] = {}, m[12] = {}, v[12] = {};
    hitch::layer l{"x", hitch::tensor_view<float>(w, 8), hitch::tensor_view<float>(g, 8),
                   hitch::layer_flags::bias_or_norm()};
    float* state[3] = {m, v, nullptr};
    const co::tensor_entry e = co::make_tensor_entry(l, state);
    CHECK(e.n == 8);
    CHECK(e.w == w);
    CHECK(e.g == g);
    CHECK(e.state[0] == m);
    CHECK(e.state[2] == nullptr);
    CHECK(e.flags == (co::flag_exclude_from_adaptation | co::flag_exclude_from_weight_decay | co::flag_aligned16));
    float* shifted[3] = {m + 1, v, nullptr};
    CHECK((co::make_tensor_entry(l, shifted).flags & co::flag_aligned16) == 0);
    hitch::layer odd{"y", hitch::tensor_view<float>(w + 2, 8), hitch::tensor_view<float>(g, 8), {}};
    CHECK(co::make_tensor_entry(odd, state).flags == 0);
}
