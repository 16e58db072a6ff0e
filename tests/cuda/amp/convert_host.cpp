// The GPU's FP16/BF16 conversions and a mixed-precision step on the host: hitch/cuda/amp/convert.hpp against
// hitch::half and hitch::bfloat16 (core/dtype.hpp) on every 16-bit pattern and on the float patterns around every
// rounding boundary, NaN payloads included; and the GPU's mixed-precision step (unscale, overflow check, optimizer,
// write-back), replayed with the same functions, against amp::mixed_precision_optimizer on the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "driver.hpp"
#include "emulate.hpp"
#include "hitch/amp/mixed_precision.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/cuda/amp/convert.hpp"
#include "hitch/cuda/detail/hd.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/adamw.hpp"
#include "hitch/optim/lamb.hpp"
#include "reference.hpp"

namespace {

namespace ca = hitch::cuda::amp;
namespace hd = hitch::cuda::hd;

/// Floats around every rounding boundary of both 16-bit formats: every sign and exponent, with mantissas at and
/// next to each power of two and each half-way point, and random ones.
std::vector<std::uint32_t> float_patterns() {
    std::vector<std::uint32_t> out;
    std::vector<std::uint32_t> mantissas = {0, 1, 2, 3, 0x7fffff, 0x7ffffe, 0x400000, 0x3fffff, 0x400001};
    for (std::uint32_t k = 0; k < 23; ++k)
        for (const std::uint32_t base : {1u << k, 3u << k})
            for (const std::uint32_t d : {0u, 1u, 0x7fffffu})  // 0x7fffff: minus one, masked below
                mantissas.push_back((base + d) & 0x7fffffu);
    for (std::uint32_t r = 0; r < 64; ++r)
        mantissas.push_back(static_cast<std::uint32_t>(hitch_test::splitmix64(r)) & 0x7fffffu);
    for (std::uint32_t sign = 0; sign < 2; ++sign)
        for (std::uint32_t exponent = 0; exponent < 256; ++exponent)
            for (const std::uint32_t m : mantissas) out.push_back((sign << 31) | (exponent << 23) | m);
    return out;
}

}  // namespace

TEST_CASE("16-bit to float on the GPU's path is hitch::half's and hitch::bfloat16's, every pattern",
          "[cuda][amp][host]") {
    for (std::uint32_t b = 0; b < 65536; ++b) {
        const auto bits = static_cast<std::uint16_t>(b);
        INFO("pattern " << b);
        REQUIRE(hd::bits(ca::half_bits_to_float(bits)) == hd::bits(static_cast<float>(hitch::half::from_bits(bits))));
        REQUIRE(hd::bits(ca::bfloat16_bits_to_float(bits)) ==
                hd::bits(static_cast<float>(hitch::bfloat16::from_bits(bits))));
        // Round trip: every 16-bit value (NaNs keep their payload once quiet) comes back.
        const bool half_nan = (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0;
        const bool bf16_nan = (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0;
        REQUIRE(ca::float_to_half_bits(ca::half_bits_to_float(bits)) ==
                (half_nan ? static_cast<std::uint16_t>(bits | 0x0200u) : bits));
        REQUIRE(ca::float_to_bfloat16_bits(ca::bfloat16_bits_to_float(bits)) ==
                (bf16_nan ? static_cast<std::uint16_t>(bits | 0x0040u) : bits));
    }
}

TEST_CASE("float to 16 bits on the GPU's path rounds as hitch::half and hitch::bfloat16", "[cuda][amp][host]") {
    const std::vector<std::uint32_t> patterns = float_patterns();
    REQUIRE(patterns.size() > 100000);
    for (const std::uint32_t p : patterns) {
        const float x = hd::from_bits(p);
        INFO("float bits " << p);
        REQUIRE(ca::float_to_half_bits(x) == hitch::half(x).bits());
        REQUIRE(ca::float_to_bfloat16_bits(x) == hitch::bfloat16(x).bits());
    }
    // A NaN keeps the top of its payload (CUDA's own conversions return a canonical NaN instead).
    CHECK(ca::float_to_half_bits(hd::from_bits(0x7fc12345u)) == 0x7e09u);
    CHECK(ca::float_to_bfloat16_bits(hd::from_bits(0xff812345u)) == 0xffc1u);
}

TEST_CASE("the unscale is one float multiplication, as the loss scaler's", "[cuda][amp][host]") {
    const hitch::amp::loss_scaler<> scaler({.initial_scale = 1024.0f});
    std::vector<hitch::half> in;
    for (std::uint32_t b = 0; b < 65536; b += 7) in.push_back(hitch::half::from_bits(static_cast<std::uint16_t>(b)));
    std::vector<float> out(in.size());
    const bool overflow = scaler.unscale(hitch::tensor_view<const hitch::half>(in.data(), in.size()),
                                         hitch::tensor_view<float>(out.data(), out.size()));
    bool any = false;
    for (std::size_t i = 0; i < in.size(); ++i) {
        const float x = ca::unscale(ca::half_bits_to_float(in[i].bits()), scaler.inverse_scale());
        REQUIRE(hd::bits(x) == hd::bits(out[i]));
        any = any || hd::non_finite(x);
    }
    CHECK(any == overflow);
    CHECK(overflow);
}

namespace {

/// The GPU's mixed-precision step, replayed: unscale and flag (or widen), skip or step, narrow.
template <class O, bool IsHalf>
bool emulated_mixed_step(const O& rule, hitch_test::emulated_model& masters,
                         std::vector<std::vector<std::uint16_t>>& low_w,
                         const std::vector<std::vector<std::uint16_t>>& low_g, float inv, bool scaling, float lr) {
    using low = ca::low16<IsHalf>;
    bool bad = false;
    for (std::size_t k = 0; k < masters.size(); ++k)
        for (std::size_t i = 0; i < low_g[k].size(); ++i) {
            const float x = scaling ? ca::unscale(low::to_float(low_g[k][i]), inv) : low::to_float(low_g[k][i]);
            masters[k].g[i] = x;
            bad = bad || hd::non_finite(x);
        }
    if (bad) return false;
    hitch_test::emulate_step(rule, masters, lr);
    for (std::size_t k = 0; k < masters.size(); ++k)
        for (std::size_t i = 0; i < low_w[k].size(); ++i) low_w[k][i] = low::from_float(masters[k].w[i]);
    return true;
}

template <class O, class Low>
void check_mixed(const typename O::options_type& options, bool scaling) {
    constexpr bool is_half = std::is_same_v<Low, hitch::half>;
    const std::vector<std::size_t> sizes = {0, 1, 33, 4097, 70001};
    std::vector<std::vector<Low>> w(sizes.size()), g(sizes.size());
    std::vector<hitch::amp::low_precision_layer<Low>> layers;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
        for (std::size_t i = 0; i < sizes[k]; ++i) w[k].push_back(Low(0.5f * hitch_test::uniform(9, k, i)));
        g[k].resize(sizes[k]);
        layers.push_back({std::to_string(k), hitch::tensor_view<Low>(w[k].data(), sizes[k]),
                          hitch::tensor_view<Low>(g[k].data(), sizes[k]),
                          k == 2 ? hitch::layer_flags::bias_or_norm() : hitch::layer_flags{}});
    }
    hitch::amp::mixed_precision_options mp;
    mp.loss_scaling = scaling;
    mp.scaler.initial_scale = 256.0f;
    mp.nonfinite = hitch::amp::nonfinite_policy::skip_step;
    hitch::amp::mixed_precision_optimizer<O, Low> cpu(options, layers, mp);

    const O rule(options);
    hitch_test::emulated_model masters(sizes.size());
    std::vector<std::vector<std::uint16_t>> low_w(sizes.size()), low_g(sizes.size());
    for (std::size_t k = 0; k < sizes.size(); ++k) {
        for (const Low x : w[k]) low_w[k].push_back(x.bits());
        for (const std::uint16_t b : low_w[k]) masters[k].w.push_back(ca::low16<is_half>::to_float(b));
        masters[k].g.resize(sizes[k]);
        masters[k].flags = layers[k].flags;
        const auto shapes = cpu.inner().state(k).buffers();
        std::size_t q = 0;
        for (const auto& b : shapes) masters[k].s[q++].assign(b.size(), 0.0f);
    }
    float scale = scaling ? 256.0f : 1.0f;
    for (int t = 0; t < 5; ++t) {
        for (std::size_t k = 0; k < sizes.size(); ++k)
            for (std::size_t i = 0; i < sizes[k]; ++i)
                g[k][i] = Low(scale * 1e-3f * hitch_test::uniform(10 + static_cast<std::uint64_t>(t), k, i));
        if (t == 2 && !g[3].empty()) g[3][4096] = Low(std::numeric_limits<float>::infinity());  // this step skips
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            low_g[k].clear();
            for (const Low x : g[k]) low_g[k].push_back(x.bits());
        }
        const float inv = scaling ? cpu.scaler().inverse_scale() : 1.0f;
        const bool applied = cpu.step(0.01f, static_cast<std::uint64_t>(t));
        const bool emulated = emulated_mixed_step<O, is_half>(rule, masters, low_w, low_g, inv, scaling, 0.01f);
        REQUIRE(applied == emulated);
        CHECK(applied == (t != 2));
        scale = cpu.loss_scale();
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            INFO("step " << t << ", layer " << k);
            for (std::size_t i = 0; i < sizes[k]; ++i) REQUIRE(w[k][i].bits() == low_w[k][i]);
            const hitch::tensor_view<float> m = cpu.master(k);
            REQUIRE((m.size() == 0 || std::memcmp(m.data(), masters[k].w.data(), m.size() * sizeof(float)) == 0));
        }
    }
}

}  // namespace

TEST_CASE("a mixed-precision step on the GPU's path is the CPU's, skipped steps included", "[cuda][amp][host]") {
    check_mixed<hitch::optim::adam, hitch::half>({.weight_decay = 1e-4f}, true);
    check_mixed<hitch::optim::lamb, hitch::half>({.weight_decay = 1e-2f}, true);
    check_mixed<hitch::optim::adamw, hitch::bfloat16>({}, false);
}
