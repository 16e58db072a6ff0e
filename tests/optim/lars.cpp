#include <catch2/catch.hpp>

#include <cmath>

#include "driver.hpp"
#include "hitch/optim/lars.hpp"

using namespace hitch_test;
namespace optim = hitch::optim;

TEST_CASE("lars<momentum> follows You et al. 2017 Algorithm 1 over 150 steps, with excluded layers", "[optim][lars]") {
    const std::vector<hitch::layer_flags> flags = {
        {}, hitch::layer_flags::bias_or_norm(), {}, {true, false}, {false, true}, {}};
    for (const float wd : {0.0f, 5e-4f}) {
        float_model m(sweep_sizes(), 43, flags);
        const float eta = 0.01f, mu = 0.9f, lr = 0.5f;
        optim::model_optimizer<optim::lars_sgd> opt(
            {.base = {.momentum = mu}, .trust_coefficient = eta, .weight_decay = wd}, m.layers);
        std::vector<lars_ref> refs;
        for (const auto& f : flags)
            refs.push_back({eta, wd, mu, 0.0, f.exclude_from_adaptation, f.exclude_from_weight_decay, {}});
        const double err = trajectory_error(opt, m, refs, 150, 12, [=](int) { return lr; });
        INFO("wd " << wd);
        CHECK(err < 1e-5);
    }
}

TEST_CASE("lars trust ratio is eta ||w|| / (||g|| + wd ||w|| + eps), 1 when excluded or a norm is zero",
          "[optim][lars]") {
    std::vector<float> w = {3.0f, 4.0f}, g = {0.6f, 0.8f}, zero = {0.0f, 0.0f};
    const optim::lars_sgd opt({.trust_coefficient = 0.002f, .weight_decay = 0.1f, .epsilon = 0.5f});
    // ||w|| = 5, ||g|| = 1: 0.002 * 5 / (1 + 0.5 + 0.5)
    CHECK(opt.trust_ratio({"w", hitch::view(w), hitch::view(g)}) == Approx(0.005).epsilon(1e-6));
    CHECK(opt.trust_ratio({"b", hitch::view(w), hitch::view(g), hitch::layer_flags::bias_or_norm()}) == 1.0f);
    CHECK(opt.trust_ratio({"z", hitch::view(zero), hitch::view(g)}) == 1.0f);
    CHECK(opt.trust_ratio({"z", hitch::view(w), hitch::view(zero)}) == 1.0f);
    // excluded from decay only: 0.002 * 5 / (1 + 0 + 0.5)
    CHECK(opt.trust_ratio({"d", hitch::view(w), hitch::view(g), {false, true}}) == Approx(0.01 / 1.5).epsilon(1e-6));
}

TEST_CASE("lars over sgd and adam wraps the base rule with the trust-scaled gradient", "[optim][lars]") {
    float_model a({1000, 10}, 51), b({1000, 10}, 51);
    optim::model_optimizer<optim::lars<optim::sgd>> lars_opt({.trust_coefficient = 0.02f, .weight_decay = 1e-3f},
                                                             a.layers);
    optim::model_optimizer<optim::lars_adam> lars_adam_opt({.trust_coefficient = 0.02f}, b.layers);
    std::vector<std::vector<double>> wa, wb;
    for (auto& p : a.params) wa.push_back(widen(p));
    for (auto& p : b.params) wb.push_back(widen(p));
    std::vector<adam_ref> adam_refs(2);
    double worst = 0;
    for (int t = 0; t < 120; ++t) {
        a.fill_gradients(2, static_cast<std::uint64_t>(t));
        b.fill_gradients(2, static_cast<std::uint64_t>(t));
        lars_opt.step(0.5f);
        lars_adam_opt.step(0.01f);
        for (std::size_t k = 0; k < 2; ++k) {
            auto g = widen(a.grads[k]);
            const double wn = l2(wa[k]), gn = l2(g);
            const double trust = 0.02 * wn / (gn + 1e-3 * wn);
            for (std::size_t i = 0; i < g.size(); ++i) wa[k][i] -= 0.5 * trust * (g[i] + 1e-3 * wa[k][i]);
            auto gb = widen(b.grads[k]);
            const double trust_b = 0.02 * l2(wb[k]) / l2(gb);
            for (double& x : gb) x *= trust_b;
            adam_refs[k].step(wb[k], gb, 0.01);
            worst = std::max({worst, max_relative_error(a.params[k], wa[k]), max_relative_error(b.params[k], wb[k])});
        }
    }
    CHECK(worst < 1e-5);
    CHECK(optim::lars_adam::name == "lars<adam>");
}

TEST_CASE("lars kernel is the documented float operation order, bit for bit", "[optim][lars]") {
    // 10000 elements span several norm blocks; the norm order is replayed here in double.
    float_model m({10000, 3}, 53);
    const float eta = 0.001f, wd = 1e-4f, mu = 0.9f, lr = 2.0f;
    optim::model_optimizer<optim::lars_sgd> opt(
        {.base = {.momentum = mu}, .trust_coefficient = eta, .weight_decay = wd}, m.layers);
    const auto norm = documented_norm;
    std::vector<std::vector<float>> w = m.params, vel;
    for (auto& x : w) vel.emplace_back(x.size(), 0.0f);
    for (int t = 0; t < 15; ++t) {
        m.fill_gradients(5, static_cast<std::uint64_t>(t));
        opt.step(lr);
        for (std::size_t k = 0; k < w.size(); ++k) {
            const float wn = norm(w[k]), gn = norm(m.grads[k]);
            const float trust = fdiv(fmul(eta, wn), fadd(fadd(gn, fmul(wd, wn)), 0.0f));
            for (std::size_t i = 0; i < w[k].size(); ++i) {
                const float d = fmul(trust, fadd(m.grads[k][i], fmul(wd, w[k][i])));
                vel[k][i] = t == 0 ? d : fadd(fmul(mu, vel[k][i]), fmul(1.0f, d));
                w[k][i] = fsub(w[k][i], fmul(lr, vel[k][i]));
            }
        }
        for (std::size_t k = 0; k < w.size(); ++k) REQUIRE(bitwise_equal(w[k], m.params[k]));
    }
}

TEST_CASE("lars results do not depend on the number of threads", "[optim][lars]") {
    hitch::thread_pool pool(3);
    std::vector<std::vector<float>> results;
    for (std::size_t threads : {1, 2, 3}) {
        float_model m({200003, 5000}, 5);
        optim::model_optimizer<optim::lars_sgd> opt({.weight_decay = 1e-4f}, m.layers,
                                                    {.threads = threads, .pool = &pool});
        for (int t = 0; t < 4; ++t) {
            m.fill_gradients(1, static_cast<std::uint64_t>(t));
            opt.step(1.0f);
        }
        results.push_back(all_params(m));
    }
    CHECK(bitwise_equal(results[0], results[1]));
    CHECK(bitwise_equal(results[0], results[2]));
}

TEST_CASE("lars options are validated", "[optim][lars]") {
    CHECK_THROWS_WITH(optim::lars_sgd({.trust_coefficient = -0.001f}),
                      "hitch::optim::lars<momentum>: option trust_coefficient = -0.001 is outside the allowed range "
                      "(0, inf)");
    CHECK_THROWS_WITH(optim::lars_sgd({.base = {.weight_decay = 1e-4f}}), Catch::Contains("set lars weight_decay"));
    CHECK_THROWS_WITH(optim::lars_sgd({.base = {.momentum = 1.5f}}),
                      Catch::StartsWith("hitch::optim::momentum: option momentum = 1.5"));
    CHECK_THROWS_WITH(optim::lars_sgd({.weight_decay = -1.0f}), Catch::Contains("weight_decay = -1"));
}
