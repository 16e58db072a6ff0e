#include <catch2/catch.hpp>

#include "driver.hpp"
#include "hitch/optim/momentum.hpp"

using namespace hitch_test;
namespace optim = hitch::optim;

TEST_CASE("momentum follows the published rule over 150 steps (heavy ball, Nesterov, dampening, decay)",
          "[optim][momentum]") {
    struct variant {
        float mu, dampening;
        bool nesterov;
        float wd;
    };
    for (const variant v : {variant{0.9f, 0.0f, false, 0.0f}, variant{0.9f, 0.0f, true, 1e-3f},
                            variant{0.5f, 0.3f, false, 1e-2f}, variant{0.0f, 0.0f, false, 0.0f}}) {
        float_model m(sweep_sizes(), 17);
        optim::model_optimizer<optim::momentum> opt(
            {.momentum = v.mu, .dampening = v.dampening, .nesterov = v.nesterov, .weight_decay = v.wd}, m.layers);
        std::vector<momentum_ref> refs(m.layers.size(), momentum_ref{v.mu, v.dampening, v.wd, v.nesterov, {}, false});
        const double err = trajectory_error(opt, m, refs, 150, 2, [](int t) { return t < 75 ? 0.01f : 0.001f; });
        INFO("mu " << v.mu << " dampening " << v.dampening << " nesterov " << v.nesterov << " wd " << v.wd);
        CHECK(err < 1e-5);
    }
}

TEST_CASE("momentum kernel is the documented float operation order, bit for bit", "[optim][momentum]") {
    for (bool nesterov : {false, true}) {
        float_model m({1000, 5}, 23);
        const float mu = 0.9f, wd = 0.01f, lr = 0.05f;
        optim::model_optimizer<optim::momentum> opt({.momentum = mu, .nesterov = nesterov, .weight_decay = wd},
                                                    m.layers);
        std::vector<std::vector<float>> w = m.params, b;
        for (auto& x : w) b.emplace_back(x.size(), 0.0f);
        for (int t = 0; t < 20; ++t) {
            m.fill_gradients(8, static_cast<std::uint64_t>(t));
            opt.step(lr);
            for (std::size_t k = 0; k < w.size(); ++k)
                for (std::size_t i = 0; i < w[k].size(); ++i) {
                    float d = fmul(1.0f, fadd(m.grads[k][i], fmul(wd, w[k][i])));
                    b[k][i] = t == 0 ? d : fadd(fmul(mu, b[k][i]), fmul(1.0f, d));
                    d = nesterov ? fadd(d, fmul(mu, b[k][i])) : b[k][i];
                    w[k][i] = fsub(w[k][i], fmul(lr, d));
                }
            for (std::size_t k = 0; k < w.size(); ++k) REQUIRE(bitwise_equal(w[k], m.params[k]));
        }
    }
}

TEST_CASE("momentum results do not depend on the number of threads", "[optim][momentum]") {
    hitch::thread_pool pool(3);
    std::vector<std::vector<float>> results;
    for (std::size_t threads : {1, 2, 3}) {
        float_model m({100003, 70000}, 5);
        optim::model_optimizer<optim::momentum> opt({.momentum = 0.9f, .nesterov = true}, m.layers,
                                                    {.threads = threads, .pool = &pool});
        for (int t = 0; t < 5; ++t) {
            m.fill_gradients(1, static_cast<std::uint64_t>(t));
            opt.step(0.1f);
        }
        results.push_back(all_params(m));
    }
    CHECK(bitwise_equal(results[0], results[1]));
    CHECK(bitwise_equal(results[0], results[2]));
}

TEST_CASE("momentum options are validated", "[optim][momentum]") {
    CHECK_THROWS_WITH(optim::momentum({.momentum = 1.0f}),
                      "hitch::optim::momentum: option momentum = 1 is outside the allowed range [0, 1)");
    CHECK_THROWS_WITH(optim::momentum({.momentum = -0.1f}), Catch::Contains("momentum = -0.1"));
    CHECK_THROWS_WITH(optim::momentum({.dampening = 1.5f}), Catch::Contains("dampening = 1.5"));
    CHECK_THROWS_WITH(optim::momentum({.weight_decay = -1e-4f}), Catch::Contains("weight_decay"));
    CHECK_THROWS_WITH(optim::momentum({.momentum = 0.0f, .nesterov = true}), Catch::Contains("when nesterov is set"));
    CHECK_THROWS_WITH(optim::momentum({.dampening = 0.1f, .nesterov = true}), Catch::Contains("dampening = 0.1"));
}
