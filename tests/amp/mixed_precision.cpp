#include <catch2/catch.hpp>

#include <limits>
#include <vector>

#include "driver.hpp"
#include "hitch/amp/mixed_precision.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/adamw.hpp"
#include "hitch/optim/lars.hpp"
#include "suite.hpp"

using namespace hitch_test;
namespace amp = hitch::amp;
namespace optim = hitch::optim;

namespace {

/// Runs the mixed-precision optimizer on Low parameters and, beside it, the plain FP32 optimizer on FP32 copies fed
/// the same unscaled gradients: the masters must match the FP32 run bit for bit, and the Low parameters must be
/// the masters rounded to Low.
template <class O, class Low>
void masters_match_fp32(const typename O::options_type& options, float lr) {
    const std::vector<std::size_t> sizes = {0, 1, 33, 5000};
    const std::vector<hitch::layer_flags> flags = {{}, hitch::layer_flags::bias_or_norm(), {}, {}};
    std::vector<std::vector<Low>> w_low, g_low;
    std::vector<amp::low_precision_layer<Low>> layers;
    float_model ref(sizes, 7, flags);
    for (std::size_t k = 0; k < sizes.size(); ++k) {
        w_low.emplace_back(sizes[k]);
        g_low.emplace_back(sizes[k]);
        for (std::size_t i = 0; i < sizes[k]; ++i) {
            w_low[k][i] = Low(ref.params[k][i]);
            ref.params[k][i] = static_cast<float>(w_low[k][i]);  // the FP32 run starts from the same values
        }
    }
    for (std::size_t k = 0; k < sizes.size(); ++k)
        layers.push_back({hitch::detail::concat("l", k), hitch::view(w_low[k]), hitch::view(g_low[k]), flags[k]});
    amp::mixed_precision_optimizer<O, Low> mp(options, layers, {.scaler = {.initial_scale = 1024.0f}});
    optim::model_optimizer<O> fp32(options, ref.layers);
    for (int t = 0; t < 30; ++t) {
        const float s = mp.loss_scale();
        for (std::size_t k = 0; k < sizes.size(); ++k)
            for (std::size_t i = 0; i < sizes[k]; ++i) {
                const float g = 0.01f * uniform(5, static_cast<std::uint64_t>(t), i + 1000 * k);
                g_low[k][i] = Low(g * s);
                ref.grads[k][i] = static_cast<float>(g_low[k][i]) * (1.0f / s);
            }
        REQUIRE(mp.step(lr, static_cast<std::uint64_t>(t)));
        fp32.step(lr);
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            const auto master = mp.master(k);
            REQUIRE(bitwise_equal(std::vector<float>(master.begin(), master.end()), ref.params[k]));
            for (std::size_t i = 0; i < sizes[k]; ++i) REQUIRE(w_low[k][i].bits() == Low(master[i]).bits());
        }
    }
    // the masters kept updates the Low copy could not hold: some master differs from its rounded Low value
    bool finer = false;
    for (std::size_t i = 0; i < sizes[3]; ++i) finer |= static_cast<float>(w_low[3][i]) != mp.master(3)[i];
    CHECK(finer);
}

}  // namespace

TEST_CASE("FP16 and BF16 parameters with FP32 masters follow the FP32 optimizer bit for bit", "[amp][mixed]") {
    masters_match_fp32<optim::adam, hitch::half>({.weight_decay = 1e-4f}, 1e-3f);
    masters_match_fp32<optim::adamw, hitch::bfloat16>({}, 1e-3f);
    // LARS on FP16: convert to FP32, apply LARS, convert back
    masters_match_fp32<optim::lars_sgd, hitch::half>({.base = {.momentum = 0.9f}, .weight_decay = 5e-4f}, 1.0f);
    masters_match_fp32<optim::lars_sgd, hitch::bfloat16>({.weight_decay = 5e-4f}, 1.0f);
}

TEST_CASE("an FP16 overflow skips the step on both ranks, leaving everything bitwise unchanged", "[amp][mixed]") {
    hitch::comm::run_local(2, [](hitch::comm::local& comm) {
        std::vector<hitch::half> w(500), g(500);
        for (std::size_t i = 0; i < w.size(); ++i) w[i] = hitch::half(0.1f * uniform(1, 0, i));
        amp::mixed_precision_optimizer<optim::adam, hitch::half, hitch::comm::local> mp(
            {}, {{"w", hitch::view(w), hitch::view(g)}}, comm, {.scaler = {.initial_scale = 65536.0f}});
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = hitch::half(0.001f * mp.loss_scale());
        expect(mp.step(1e-3f, 0), "first step applied");
        const std::vector<hitch::half> w_before = w;
        const auto m = mp.master(0);
        const std::vector<float> master_before(m.begin(), m.end());
        const auto st = mp.inner().state(0).buffers();
        const std::vector<float> m_before(st[0].begin(), st[0].end()), v_before(st[1].begin(), st[1].end());
        // rank 0's scaled gradient overflows FP16
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = hitch::half(comm.rank() == 0 ? 2.0f * mp.loss_scale() : 1.0f);
        expect(!mp.step(1e-3f, 1), "step skipped on rank " + std::to_string(comm.rank()));
        for (std::size_t i = 0; i < w.size(); ++i) expect(w[i].bits() == w_before[i].bits(), "fp16 params unchanged");
        expect(bitwise_equal(master_before, std::vector<float>(m.begin(), m.end())), "masters unchanged");
        const auto st2 = mp.inner().state(0).buffers();
        expect(bitwise_equal(m_before, std::vector<float>(st2[0].begin(), st2[0].end())), "m unchanged");
        expect(bitwise_equal(v_before, std::vector<float>(st2[1].begin(), st2[1].end())), "v unchanged");
        expect(mp.inner().state(0).steps == 1, "step count unchanged");
        expect(mp.loss_scale() == 32768.0f, "scale backed off");
        expect(mp.skipped_steps() == 1, "one skip counted");
    });
}

TEST_CASE("BF16 without loss scaling follows the non-finite policy", "[amp][mixed]") {
    std::vector<hitch::bfloat16> w(10, hitch::bfloat16(1.0f)), g(10, hitch::bfloat16(0.5f));
    amp::mixed_precision_optimizer<optim::momentum, hitch::bfloat16> strict(
        {}, {{"emb", hitch::view(w), hitch::view(g)}}, {.loss_scaling = false});
    CHECK(strict.loss_scale() == 1.0f);
    CHECK(strict.step(0.1f, 0));
    CHECK(static_cast<float>(w[0]) == static_cast<float>(hitch::bfloat16(1.0f - 0.1f * 0.5f)));
    g[3] = std::numeric_limits<hitch::bfloat16>::infinity();
    CHECK_THROWS_WITH(strict.step(0.1f, 41), Catch::Contains("step 41: layer 0 ('emb') element 3 = inf"));
    std::vector<hitch::bfloat16> w2(10, hitch::bfloat16(1.0f));
    amp::mixed_precision_optimizer<optim::momentum, hitch::bfloat16> lenient(
        {}, {{"emb", hitch::view(w2), hitch::view(g)}},
        {.loss_scaling = false, .nonfinite = amp::nonfinite_policy::skip_step});
    CHECK_FALSE(lenient.step(0.1f, 0));
    CHECK(lenient.skipped_steps() == 1);
    CHECK(static_cast<float>(w2[0]) == 1.0f);
}
