#include <catch2/catch.hpp>

#include <sstream>

#include "driver.hpp"
#include "hitch/optim/sgd.hpp"

using namespace hitch_test;
namespace optim = hitch::optim;

TEST_CASE("sgd follows the published rule over 150 steps for every layer shape", "[optim][sgd]") {
    for (float wd : {0.0f, 0.01f}) {
        float_model m(sweep_sizes(), 11);
        optim::model_optimizer<optim::sgd> opt({.weight_decay = wd}, m.layers);
        std::vector<sgd_ref> refs(m.layers.size(), sgd_ref{wd});
        const double err = trajectory_error(opt, m, refs, 150, 5,
                                            [](int t) { return 0.05f / (1.0f + 0.01f * static_cast<float>(t)); });
        INFO("weight decay " << wd);
        CHECK(err < 1e-5);
        CHECK(opt.state(1).steps == 150);
    }
}

TEST_CASE("sgd excludes flagged layers from weight decay", "[optim][sgd]") {
    float_model m({50, 50}, 3, {{}, hitch::layer_flags::bias_or_norm()});
    optim::model_optimizer<optim::sgd> opt({.weight_decay = 0.1f}, m.layers);
    std::vector<sgd_ref> refs{sgd_ref{0.1}, sgd_ref{0.0}};
    CHECK(trajectory_error(opt, m, refs, 100, 9, [](int) { return 0.1f; }) < 1e-5);
}

TEST_CASE("sgd kernel is the documented float operation order, bit for bit", "[optim][sgd]") {
    float_model m({1000, 3}, 21);
    const float wd = 0.02f;
    optim::model_optimizer<optim::sgd> opt({.weight_decay = wd}, m.layers);
    std::vector<std::vector<float>> w = m.params;
    for (int t = 0; t < 20; ++t) {
        m.fill_gradients(4, static_cast<std::uint64_t>(t));
        const float lr = 0.03f;
        opt.step(lr);
        for (std::size_t k = 0; k < w.size(); ++k)
            for (std::size_t i = 0; i < w[k].size(); ++i) {
                float d = fadd(m.grads[k][i], fmul(wd, w[k][i]));
                d = fmul(1.0f, d);
                w[k][i] = fsub(w[k][i], fmul(lr, d));
            }
        for (std::size_t k = 0; k < w.size(); ++k) REQUIRE(bitwise_equal(w[k], m.params[k]));
    }
}

TEST_CASE("sgd options are validated", "[optim][sgd]") {
    CHECK_THROWS_WITH(optim::sgd({.weight_decay = -1.0f}),
                      "hitch::optim::sgd: option weight_decay = -1 is outside the allowed range [0, inf)");
    float_model m({4}, 1);
    optim::model_optimizer<optim::sgd> opt({}, m.layers);
    CHECK_THROWS_AS(opt.step(-0.1f), hitch::config_error);
    CHECK_THROWS_WITH(opt.step(3, 0.1f), Catch::Contains("layer index 3"));
    std::vector<float> p(4), g(5);
    CHECK_THROWS_WITH((optim::model_optimizer<optim::sgd>({}, {{"bad", hitch::view(p), hitch::view(g)}})),
                      Catch::Contains("layer 'bad' has 4 parameters but 5 gradient elements"));
}
