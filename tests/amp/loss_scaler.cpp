#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <vector>

#include "driver.hpp"
#include "hitch/amp/loss_scaler.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/lars.hpp"
#include "suite.hpp"

using namespace hitch_test;
namespace amp = hitch::amp;
namespace optim = hitch::optim;

namespace {

/// Every byte of the parameters and of the optimizer state.
template <class Opt>
std::vector<float> snapshot(const float_model& m, const Opt& opt) {
    std::vector<float> out = all_params(m);
    for (std::size_t k = 0; k < opt.size(); ++k)
        for (const auto b : opt.state(k).buffers()) out.insert(out.end(), b.begin(), b.end());
    return out;
}

}  // namespace

TEST_CASE("dynamic scale grows after growth_interval clean steps, not before", "[amp][scaler]") {
    amp::loss_scaler scaler({.initial_scale = 1024.0f, .growth_interval = 3});
    CHECK(scaler.scale() == 1024.0f);
    CHECK(scaler.update(false));
    CHECK(scaler.update(false));
    CHECK(scaler.scale() == 1024.0f);
    CHECK(scaler.update(false));
    CHECK(scaler.scale() == 2048.0f);
    CHECK(scaler.state().good_steps == 0);
    // capped at max_scale
    amp::loss_scaler capped({.initial_scale = 4.0f, .growth_interval = 1, .max_scale = 8.0f});
    capped.update(false);
    capped.update(false);
    CHECK(capped.scale() == 8.0f);
}

TEST_CASE("an overflow skips the step, backs off the scale and restarts the growth count", "[amp][scaler]") {
    amp::loss_scaler scaler(
        {.initial_scale = 1024.0f, .backoff_factor = 0.25f, .growth_interval = 3, .min_scale = 32.0f});
    CHECK(scaler.update(false));
    CHECK(scaler.update(false));
    CHECK_FALSE(scaler.update(true));
    CHECK(scaler.scale() == 256.0f);
    CHECK(scaler.state().good_steps == 0);
    CHECK(scaler.state().skipped_steps == 1);
    CHECK(scaler.update(false));
    CHECK(scaler.update(false));
    CHECK(scaler.scale() == 256.0f);  // the count restarted after the overflow
    CHECK_FALSE(scaler.update(true));
    CHECK_FALSE(scaler.update(true));
    CHECK(scaler.scale() == 32.0f);  // floor
    amp::loss_scaler fixed({.mode = amp::scaling::fixed, .initial_scale = 128.0f, .growth_interval = 1});
    CHECK_FALSE(fixed.update(true));
    CHECK(fixed.update(false));
    CHECK(fixed.scale() == 128.0f);
}

TEST_CASE("unscale multiplies by 1/S and flags inf and NaN, from float and from half", "[amp][scaler]") {
    amp::loss_scaler scaler({.initial_scale = 512.0f});
    std::vector<float> g = {512.0f, -1024.0f, 1.0f};
    CHECK_FALSE(scaler.unscale(hitch::view(g)));
    CHECK(g == std::vector<float>{1.0f, -2.0f, 1.0f / 512.0f});
    g = {1.0f, std::numeric_limits<float>::infinity()};
    CHECK(scaler.unscale(hitch::view(g)));
    g = {std::numeric_limits<float>::quiet_NaN(), 1.0f};
    CHECK(scaler.unscale(hitch::view(g)));
    std::vector<hitch::half> h(70000);
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = hitch::half(static_cast<float>(i % 100) * 0.5f);
    std::vector<float> out(h.size());
    CHECK_FALSE(scaler.unscale(hitch::tensor_view<const hitch::half>(h.data(), h.size()), hitch::view(out)));
    for (std::size_t i = 0; i < h.size(); i += 997) CHECK(out[i] == static_cast<float>(h[i]) / 512.0f);
    h[65000] = std::numeric_limits<hitch::half>::infinity();
    CHECK(scaler.unscale(hitch::tensor_view<const hitch::half>(h.data(), h.size()), hitch::view(out)));
}

TEST_CASE("a skipped step leaves parameters and optimizer state bitwise unchanged", "[amp][scaler]") {
    float_model m({1000, 1, 0, 5000}, 3);
    optim::model_optimizer<optim::adam> opt({.weight_decay = 1e-4f, .amsgrad = true}, m.layers);
    amp::loss_scaler scaler({.initial_scale = 256.0f, .growth_interval = 2});
    for (int t = 0; t < 3; ++t) {
        m.fill_gradients(1, static_cast<std::uint64_t>(t));
        for (auto& g : m.grads)
            for (float& x : g) x *= scaler.scale();
        REQUIRE(scaler.step(opt, 1e-3f));
    }
    const auto before = snapshot(m, opt);
    const float scale_before = scaler.scale();
    m.fill_gradients(1, 3);
    m.grads[3][4321] = std::numeric_limits<float>::infinity();
    CHECK_FALSE(scaler.step(opt, 1e-3f));
    CHECK(bitwise_equal(before, snapshot(m, opt)));
    CHECK(opt.state(0).steps == 3);
    CHECK(scaler.scale() == scale_before / 2);
}

TEST_CASE("with two ranks where only one sees an inf, both skip and both back off", "[amp][scaler]") {
    const auto results = hitch::comm::run_local(2, [](hitch::comm::local& comm) {
        float_model m({300, 7}, 11);
        optim::model_optimizer<optim::lars_sgd> opt({.weight_decay = 1e-4f}, m.layers);
        amp::loss_scaler scaler(comm, {.initial_scale = 1024.0f, .growth_interval = 100});
        m.fill_gradients(2, 0);
        expect(scaler.step(opt, 0.1f), "clean first step applied");
        const auto before = snapshot(m, opt);
        m.fill_gradients(2, 1);
        if (comm.rank() == 1) m.grads[0][17] = std::numeric_limits<float>::infinity();
        const bool applied = scaler.step(opt, 0.1f);
        expect(!applied, "rank " + std::to_string(comm.rank()) + " must skip");
        expect(bitwise_equal(before, snapshot(m, opt)), "skipped step changed something");
        expect(scaler.scale() == 512.0f, "backed off");
        m.fill_gradients(2, 2);
        expect(scaler.step(opt, 0.1f), "next clean step applied");
        return all_params(m);
    });
    CHECK(bitwise_equal(results[0], results[1]));
}

TEST_CASE("loss scaler options are validated", "[amp][scaler]") {
    CHECK_THROWS_WITH(amp::loss_scaler({.backoff_factor = 1.0f}),
                      "hitch::amp::loss_scaler: option backoff_factor = 1 is outside the allowed range (0, 1)");
    CHECK_THROWS_WITH(amp::loss_scaler({.growth_factor = 1.0f}), Catch::Contains("growth_factor = 1"));
    CHECK_THROWS_WITH(amp::loss_scaler({.growth_interval = 0}), Catch::Contains("growth_interval = 0"));
    CHECK_THROWS_WITH(amp::loss_scaler({.min_scale = -1.0f}), Catch::Contains("min_scale = -1"));
    CHECK_THROWS_WITH(amp::loss_scaler({.initial_scale = 0.5f}), Catch::Contains("initial_scale = 0.5"));
}
