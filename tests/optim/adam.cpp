#include <catch2/catch.hpp>

#include <cmath>

#include "driver.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/adamw.hpp"

using namespace hitch_test;
namespace optim = hitch::optim;

TEST_CASE("adam follows the published rule over 150 steps (plain, L2, AMSGrad)", "[optim][adam]") {
    for (const bool amsgrad : {false, true})
        for (const float wd : {0.0f, 1e-2f}) {
            float_model m(sweep_sizes(), 31);
            optim::model_optimizer<optim::adam> opt({.weight_decay = wd, .amsgrad = amsgrad}, m.layers);
            adam_ref proto;
            proto.wd = wd;
            proto.amsgrad = amsgrad;
            std::vector<adam_ref> refs(m.layers.size(), proto);
            const double err = trajectory_error(opt, m, refs, 150, 6, [](int t) { return t < 100 ? 1e-3f : 3e-4f; });
            INFO("amsgrad " << amsgrad << " wd " << wd);
            CHECK(err < 1e-5);
            CHECK(opt.state(2).steps == 150);
        }
}

TEST_CASE("adamw follows the published rule over 150 steps, with per-layer decay exclusion", "[optim][adamw]") {
    float_model m(sweep_sizes(), 37, {{}, hitch::layer_flags::bias_or_norm()});
    optim::model_optimizer<optim::adamw> opt({.weight_decay = 0.05f}, m.layers);
    adam_ref proto;
    proto.decoupled = true;
    proto.wd = 0.05f;
    std::vector<adam_ref> refs(m.layers.size(), proto);
    refs[1].wd = 0;
    CHECK(trajectory_error(opt, m, refs, 150, 7, [](int) { return 2e-3f; }) < 1e-5);
    CHECK(optim::adamw::name == "adamw");
    CHECK(optim::adamw().options().weight_decay == 1e-2f);
}

TEST_CASE("adam kernel is the documented float operation order, bit for bit", "[optim][adam]") {
    for (const bool decoupled : {false, true}) {
        float_model m({999, 2}, 41);
        const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f, lr = 1e-3f;
        std::vector<std::vector<float>> w = m.params, mm, vv, vmax;
        for (auto& x : w)
            mm.emplace_back(x.size(), 0.0f), vv.emplace_back(x.size(), 0.0f), vmax.emplace_back(x.size(), 0.0f);
        auto run = [&](auto& opt) {
            for (int t = 1; t <= 20; ++t) {
                m.fill_gradients(3, static_cast<std::uint64_t>(t));
                opt.step(lr);
                const float a =
                    static_cast<float>(static_cast<double>(lr) / (1.0 - std::pow(static_cast<double>(b1), t)));
                const float q = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(b2), t)));
                const float k = static_cast<float>(1.0 - static_cast<double>(lr) * static_cast<double>(wd));
                for (std::size_t j = 0; j < w.size(); ++j)
                    for (std::size_t i = 0; i < w[j].size(); ++i) {
                        float p = w[j][i], d = m.grads[j][i];
                        if (decoupled)
                            p = fmul(p, k);
                        else
                            d = fadd(d, fmul(wd, p));
                        d = fmul(1.0f, d);
                        mm[j][i] = fadd(fmul(b1, mm[j][i]), fmul(1.0f - b1, d));
                        vv[j][i] = fadd(fmul(b2, vv[j][i]), fmul(1.0f - b2, fmul(d, d)));
                        vmax[j][i] = std::max(vmax[j][i], vv[j][i]);
                        const float r = fadd(fdiv(fsqrt(vmax[j][i]), q), eps);
                        w[j][i] = fsub(p, fmul(a, fdiv(mm[j][i], r)));
                    }
                for (std::size_t j = 0; j < w.size(); ++j) REQUIRE(bitwise_equal(w[j], m.params[j]));
            }
        };
        if (decoupled) {
            optim::model_optimizer<optim::adamw> opt({.weight_decay = wd, .amsgrad = true}, m.layers);
            run(opt);
        } else {
            optim::model_optimizer<optim::adam> opt({.weight_decay = wd, .amsgrad = true}, m.layers);
            run(opt);
        }
    }
}

TEST_CASE("adam options are validated", "[optim][adam]") {
    CHECK_THROWS_WITH(optim::adam({.beta1 = 1.0f}),
                      "hitch::optim::adam: option beta1 = 1 is outside the allowed range [0, 1)");
    CHECK_THROWS_WITH(optim::adam({.beta2 = -0.5f}), Catch::Contains("beta2 = -0.5"));
    CHECK_THROWS_WITH(optim::adam({.epsilon = 0.0f}), Catch::Contains("epsilon = 0"));
    CHECK_THROWS_WITH(optim::adamw({.weight_decay = -1.0f}),
                      Catch::StartsWith("hitch::optim::adamw: option weight_decay = -1"));
}
