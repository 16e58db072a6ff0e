// data_parallel's GPU intake, clipping sums and exchange results, replayed on the host (emulate.hpp: the kernels'
// rows, chunk tables and per-element functions) against the CPU's own (train/gradient_intake.hpp, clipping.hpp,
// compress::detail::write_result), bit for bit: FP32, FP16 and BF16 models, with and without loss scaling, windows of
// 1 and 3 micro-batches, unused layers, NaN, infinities, denormals and negative zeros, layers of 0, 1, 31, 32, 33,
// 4097 and (1 << 20) + 3 elements. The verdicts (which layer is bad, the first bad element and its value) too.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "emulate.hpp"
#include "hitch/amp/loss_scaler.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/device/cpu.hpp"
#include "hitch/exchange/detail/bucket.hpp"
#include "hitch/train/clipping.hpp"
#include "hitch/train/gradient_intake.hpp"
#include "hitch/train/master_weights.hpp"

namespace {

using hitch::comm::local;
using namespace hitch_test;
namespace td = hitch::train::detail;

/// A float of any kind: mostly ordinary values of every magnitude, sometimes a denormal, zero of either sign, an
/// infinity or a NaN (only where `specials`).
float draw(std::mt19937& rng, bool specials) {
    std::uniform_int_distribution<int> kind(0, 99);
    const int k = kind(rng);
    if (specials && k == 0) return std::numeric_limits<float>::quiet_NaN();
    if (specials && k == 1) return -std::numeric_limits<float>::infinity();
    if (specials && k == 2) return std::numeric_limits<float>::infinity();
    if (k < 5) return std::numeric_limits<float>::denorm_min() * static_cast<float>(k + 1);
    if (k < 7) return k == 5 ? 0.0f : -0.0f;
    std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
    std::uniform_int_distribution<int> exponent(-20, 12);
    return std::ldexp(mantissa(rng), exponent(rng));
}

bool same_bits(float a, float b) {
    std::uint32_t x = 0, y = 0;
    std::memcpy(&x, &a, 4);
    std::memcpy(&y, &b, 4);
    return x == y;
}

std::string layer_name(std::size_t k) {
    std::string name = "l";
    name += std::to_string(k);
    return name;
}

/// The first index where a and b (n floats each) differ in their bits, or -1.
long first_difference(const float* a, const float* b, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
        if (!same_bits(a[i], b[i])) return static_cast<long>(i);
    return -1;
}

template <class Param>
std::uint16_t low_bits(float x) {
    return Param(x).bits();
}

/// One case: a model of `sizes` in Param, `window` micro-batches, loss scaling or not, layers `unused_layers` not
/// produced in the last micro-batch. The CPU intake (gradient_intake over master_weights on hitch::cpu) against the
/// replay of the GPU's launches on the same inputs.
template <class Param>
void compare_intake(const std::vector<std::size_t>& sizes, std::uint64_t window, bool scaled,
                    const std::vector<std::size_t>& unused_layers, std::uint32_t seed) {
    constexpr bool mixed = !std::is_same_v<Param, float>;
    constexpr bool is_half = std::is_same_v<Param, hitch::half>;
    INFO("window " << window << ", scaled " << scaled << ", seed " << seed << ", "
                   << hitch::name(hitch::dtype_of<Param>()));
    hitch::comm::run_local(1, [&](local& comm) {
        std::mt19937 rng(seed);
        const std::size_t layers = sizes.size();
        // The model (what the user's layers point at).
        std::vector<std::vector<Param>> w(layers), g(layers);
        std::vector<std::vector<float>> w32(layers), g32(layers);
        std::vector<typename td::master_weights<Param, hitch::cpu>::user_layer> user;
        for (std::size_t k = 0; k < layers; ++k) {
            if constexpr (mixed) {
                w[k].assign(sizes[k], Param(0.5f));
                g[k].assign(sizes[k], Param(0.0f));
                user.push_back({layer_name(k), hitch::view(w[k]), hitch::view(g[k])});
            } else {
                w32[k].assign(sizes[k], 0.5f);
                g32[k].assign(sizes[k], 0.0f);
                user.push_back({layer_name(k), hitch::view(w32[k]), hitch::view(g32[k])});
            }
        }
        hitch::cpu dev;
        td::master_weights<Param, hitch::cpu> weights(dev, user);
        std::optional<hitch::amp::loss_scaler<local>> scaler;
        if (scaled) scaler.emplace(comm, hitch::amp::loss_scaler_options{.initial_scale = 1024.0f});
        td::gradient_intake<Param, hitch::cpu, local> intake(weights, scaler, window, {});

        // The replay's memory: its own FP32 gradients, low gradients, sums and one bucket of every layer.
        std::vector<std::vector<float>> eg(layers), esum(layers);
        std::vector<std::vector<std::uint16_t>> elow(layers);
        std::size_t total = 0;
        for (std::size_t n : sizes) total += n;
        std::vector<float> bucket(total, -7.0f), ebucket(total, -7.0f);
        std::vector<ct::intake_row> rows(layers);
        std::vector<std::size_t> offsets(layers), all(layers);
        for (std::size_t k = 0, at = 0; k < layers; ++k) {
            eg[k].assign(sizes[k], 0.0f);
            esum[k].assign(sizes[k], 0.0f);
            elow[k].assign(sizes[k], 0);
            offsets[k] = at;
            at += sizes[k];
            all[k] = k;
            rows[k] = {eg[k].data(), mixed ? elow[k].data() : nullptr, window > 1 ? esum[k].data() : nullptr,
                       ebucket.data() + offsets[k], sizes[k]};
        }
        std::vector<ct::intake_report> reports(layers);
        std::vector<std::uint8_t> unused(layers, 0);
        std::vector<td::intake_verdict> sticky(layers);
        const auto verdict = [&](std::size_t k) {
            td::intake_verdict v;
            if (unused[k] != 0) return v;
            v.bad = reports[k].bad != 0;
            if (!scaled && reports[k].first != ~0ull)
                v.report = {static_cast<std::int64_t>(k), static_cast<std::int64_t>(reports[k].first),
                            reports[k].value};
            return v;
        };
        const auto merge = [](td::intake_verdict& into, const td::intake_verdict& from) {
            into.bad |= from.bad;
            if (into.report.layer < 0) into.report = from.report;
        };
        const auto same_verdict = [](const td::intake_verdict& a, const td::intake_verdict& b) {
            return a.bad == b.bad && a.report.layer == b.report.layer && a.report.element == b.report.element &&
                   (a.report.layer < 0 || same_bits(a.report.value, b.report.value));
        };

        for (std::uint64_t m = 0; m < window; ++m) {
            const bool last = m + 1 == window;
            // This micro-batch's gradients: the same inputs for both (a few layers hold specials).
            for (std::size_t k = 0; k < layers; ++k) {
                const bool specials = (k + m) % 3 == 0;
                for (std::size_t i = 0; i < sizes[k]; ++i) {
                    const float x = draw(rng, specials) * (scaled ? 1024.0f : 1.0f);
                    if constexpr (mixed) {
                        g[k][i] = Param(x);
                        elow[k][i] = low_bits<Param>(x);
                    } else {
                        g32[k][i] = x;
                        eg[k][i] = x;
                    }
                }
                unused[k] = 0;
            }
            if (last)
                for (std::size_t k : unused_layers) unused[k] = 1;
            ct::intake_scalars sc;
            sc.inv = scaled ? scaler->inverse_scale() : 1.0f;
            sc.scale = scaled ? 1u : 0u;
            sc.locate = scaled ? 0u : 1u;
            sc.taken = static_cast<std::uint32_t>(window > 1 ? m : 0);
            sc.count = static_cast<float>(m + 1);
            sc.pack = last ? 1u : 0u;
            emulate_take<is_half>(rows, all, unused, sc, reports);
            if (!last) {
                emulate_add(rows, all, static_cast<std::uint32_t>(m));
                for (std::size_t k = 0; k < layers; ++k) {
                    intake.add(k, false);
                    const td::intake_verdict v = verdict(k);
                    if (m == 0)
                        sticky[k] = v;
                    else
                        merge(sticky[k], v);
                }
                intake.micro_batch_done();
                for (std::size_t k = 0; k < layers; ++k)
                    REQUIRE(first_difference(eg[k].data(), weights.layers()[k].grads.data(), sizes[k]) == -1);
                continue;
            }
            emulate_finish(rows, all, sc);
            for (std::size_t k = 0; k < layers; ++k) {
                const td::intake_verdict cpu = intake.take(k, unused[k] != 0);
                std::memcpy(bucket.data() + offsets[k], weights.layers()[k].grads.data(), sizes[k] * sizeof(float));
                td::intake_verdict gpu = verdict(k);
                if (window > 1) merge(gpu, sticky[k]);
                INFO("layer " << k << " of " << sizes[k]);
                CHECK(same_verdict(cpu, gpu));
                CHECK(first_difference(eg[k].data(), weights.layers()[k].grads.data(), sizes[k]) == -1);
            }
            intake.end_window();
        }
        CHECK(first_difference(bucket.data(), ebucket.data(), total) == -1);
    });
}

}  // namespace

TEST_CASE("the GPU intake equals the CPU's bit for bit: FP32 layers", "[cuda][train][intake]") {
    const std::vector<std::size_t> sizes{0, 1, 31, 32, 33, 4097, (std::size_t{1} << 20) + 3};
    for (const bool scaled : {false, true})
        for (const std::uint64_t window : {std::uint64_t{1}, std::uint64_t{3}}) {
            compare_intake<float>(sizes, window, scaled, {}, 11);
            compare_intake<float>({33, 0, 4097, 1}, window, scaled, {0, 2}, 12);
        }
}

TEST_CASE("the GPU intake equals the CPU's bit for bit: FP16 and BF16 layers", "[cuda][train][intake][amp]") {
    const std::vector<std::size_t> sizes{0, 1, 31, 32, 33, 4097, 70001};
    for (const bool scaled : {false, true})
        for (const std::uint64_t window : {std::uint64_t{1}, std::uint64_t{3}}) {
            compare_intake<hitch::half>(sizes, window, scaled, {}, 21);
            compare_intake<hitch::bfloat16>(sizes, window, scaled, {}, 22);
            compare_intake<hitch::half>({40, 3, 5000}, window, scaled, {1}, 23);
            compare_intake<hitch::bfloat16>({40, 3, 5000}, window, scaled, {0, 2}, 24);
        }
}

TEST_CASE("the GPU's clipping sums and scales equal the CPU's bit for bit", "[cuda][train][clip]") {
    std::mt19937 rng(5);
    for (const std::vector<std::size_t>& sizes :
         {std::vector<std::size_t>{0}, {1}, {31, 32, 33}, {4096, 4097, 1}, {(std::size_t{1} << 20) + 3, 17}}) {
        std::vector<std::vector<float>> values;
        std::vector<std::vector<float>> grads;
        std::vector<hitch::layer> layers;
        for (std::size_t n : sizes) {
            values.emplace_back(n);
            for (float& x : values.back()) x = draw(rng, false) * 3.0f;
        }
        grads = values;
        for (std::size_t k = 0; k < sizes.size(); ++k)
            layers.push_back({layer_name(k), hitch::view(grads[k]), hitch::view(grads[k])});
        const double cpu = td::gradient_sum_of_squares(layers, {});
        const double gpu = hitch_test::emulate_sum_of_squares(values);
        CHECK(std::memcmp(&cpu, &gpu, sizeof(double)) == 0);
        // Clipping to half the norm: the coefficient's product per element.
        const double max_norm = std::sqrt(cpu) / 2.0;
        (void)td::clip_to_norm(layers, cpu, max_norm, {});
        const float c = static_cast<float>(max_norm / (std::sqrt(cpu) + 1e-6));
        for (std::size_t k = 0; k < sizes.size(); ++k)
            for (std::size_t i = 0; i < sizes[k]; ++i)
                if (!same_bits(grads[k][i], hitch::cuda::train::scaled(values[k][i], c)))
                    FAIL("layer " << k << " element " << i);
    }
}

TEST_CASE("the GPU exchange's results equal write_result's, the mean and the sum", "[cuda][train][exchange]") {
    std::mt19937 rng(9);
    for (const int p : {1, 2, 3, 4, 7}) {
        std::vector<float> v(1000);
        for (float& x : v) x = draw(rng, true);
        for (const bool average : {false, true}) {
            std::vector<float> out(v.size());
            hitch::compress::detail::write_result(std::span<const float>(v), hitch::view(out), average, p);
            const float inv_p = average ? 1.0f / static_cast<float>(p) : 1.0f;
            for (std::size_t i = 0; i < v.size(); ++i)
                REQUIRE(same_bits(out[i], hitch::cuda::train::result_element(v[i], average, inv_p)));
        }
    }
}
