#include <catch2/catch.hpp>

#include <cmath>

#include "driver.hpp"
#include "hitch/optim/lamb.hpp"

using namespace hitch_test;
namespace optim = hitch::optim;

TEST_CASE("lamb follows You et al. 2019 Algorithm 2 over 150 steps, with excluded layers", "[optim][lamb]") {
    const std::vector<hitch::layer_flags> flags = {
        {}, {}, hitch::layer_flags::bias_or_norm(), {true, false}, {false, true}, {}};
    for (const bool bias_correction : {true, false})
        for (const float wd : {0.0f, 0.01f}) {
            float_model m(sweep_sizes(), 61, flags);
            optim::model_optimizer<optim::lamb> opt({.weight_decay = wd, .bias_correction = bias_correction}, m.layers);
            std::vector<lamb_ref> refs;
            for (const auto& f : flags) {
                lamb_ref r;
                r.wd = wd;
                r.bias_correction = bias_correction;
                r.exclude_adaptation = f.exclude_from_adaptation;
                r.exclude_decay = f.exclude_from_weight_decay;
                refs.push_back(r);
            }
            const double err = trajectory_error(opt, m, refs, 150, 13, [](int t) { return t < 50 ? 2e-3f : 1e-3f; });
            INFO("bias correction " << bias_correction << " wd " << wd);
            CHECK(err < 1e-5);
        }
}

TEST_CASE("lamb results do not depend on the number of threads", "[optim][lamb]") {
    hitch::thread_pool pool(3);
    std::vector<std::vector<float>> results;
    for (std::size_t threads : {1, 2, 3}) {
        float_model m({200003, 100}, 9);
        optim::model_optimizer<optim::lamb> opt({.weight_decay = 0.01f}, m.layers, {.threads = threads, .pool = &pool});
        for (int t = 0; t < 4; ++t) {
            m.fill_gradients(1, static_cast<std::uint64_t>(t));
            opt.step(1e-3f);
        }
        results.push_back(all_params(m));
    }
    CHECK(bitwise_equal(results[0], results[1]));
    CHECK(bitwise_equal(results[0], results[2]));
}

TEST_CASE("lamb kernel is the documented float operation order, bit for bit", "[optim][lamb]") {
    float_model m({5000, 1}, 67);
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-6f, wd = 0.01f, lr = 1e-3f;
    optim::model_optimizer<optim::lamb> opt({.weight_decay = wd}, m.layers);
    const auto norm = documented_norm;
    std::vector<std::vector<float>> w = m.params, mm, vv;
    for (auto& x : w) mm.emplace_back(x.size(), 0.0f), vv.emplace_back(x.size(), 0.0f);
    for (int t = 1; t <= 15; ++t) {
        m.fill_gradients(5, static_cast<std::uint64_t>(t));
        opt.step(lr);
        const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), t));
        const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(b2), t));
        for (std::size_t k = 0; k < w.size(); ++k) {
            std::vector<float> r(w[k].size());
            for (std::size_t i = 0; i < r.size(); ++i) {
                const float g = m.grads[k][i];
                mm[k][i] = fadd(fmul(b1, mm[k][i]), fmul(1.0f - b1, g));
                vv[k][i] = fadd(fmul(b2, vv[k][i]), fmul(1.0f - b2, fmul(g, g)));
                r[i] = fadd(fdiv(fdiv(mm[k][i], bc1), fadd(fsqrt(fdiv(vv[k][i], bc2)), eps)), fmul(wd, w[k][i]));
            }
            const float rate = fmul(lr, fdiv(norm(w[k]), norm(r)));
            for (std::size_t i = 0; i < r.size(); ++i) w[k][i] = fsub(w[k][i], fmul(rate, r[i]));
        }
        for (std::size_t k = 0; k < w.size(); ++k) REQUIRE(bitwise_equal(w[k], m.params[k]));
    }
}

TEST_CASE("lamb options are validated", "[optim][lamb]") {
    CHECK_THROWS_WITH(optim::lamb({.beta2 = 1.0f}),
                      "hitch::optim::lamb: option beta2 = 1 is outside the allowed range [0, 1)");
    CHECK_THROWS_WITH(optim::lamb({.epsilon = -1e-6f}), Catch::Contains("epsilon"));
    CHECK_THROWS_WITH(optim::lamb({.weight_decay = -0.1f}), Catch::Contains("weight_decay = -0.1"));
}
