#include <catch2/catch.hpp>

#include <limits>

#include "driver.hpp"
#include "hitch/amp/nonfinite.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/optim/momentum.hpp"
#include "suite.hpp"

using namespace hitch_test;
namespace amp = hitch::amp;
namespace optim = hitch::optim;

TEST_CASE("throw_error names the step, the layer and the element", "[amp][nonfinite]") {
    float_model m({10, 20}, 1);
    m.layers[1].name = "fc.weight";
    amp::gradient_guard guard;
    CHECK(guard.check(m.layers, 0));
    m.grads[1][7] = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_AS(guard.check(m.layers, 12), amp::nonfinite_gradient_error);
    CHECK_THROWS_WITH(
        guard.check(m.layers, 12),
        "hitch::amp::gradient_guard: non-finite gradient at step 12: layer 1 ('fc.weight') element 7 = nan");
}

TEST_CASE("skip_step skips on every rank when one rank has a NaN; throw_error throws on every rank",
          "[amp][nonfinite]") {
    const auto results = hitch::comm::run_local(2, [](hitch::comm::local& comm) {
        float_model m({100, 3}, 4);
        optim::model_optimizer<optim::momentum> opt({}, m.layers);
        amp::gradient_guard guard(comm, {.policy = amp::nonfinite_policy::skip_step});
        m.fill_gradients(1, 0);
        if (comm.rank() == 0) m.grads[0][50] = -std::numeric_limits<float>::infinity();
        const auto before = all_params(m);
        const bool apply = guard.check(m.layers, 5);
        expect(!apply && guard.skipped() == 1, "both ranks skip");
        if (apply) opt.step(0.1f);
        expect(bitwise_equal(before, all_params(m)), "nothing moved");

        amp::gradient_guard strict(comm, {.policy = amp::nonfinite_policy::throw_error});
        std::string message;
        try {
            (void)strict.check(m.layers, 6);
        } catch (const amp::nonfinite_gradient_error& e) {
            message = e.what();
        }
        expect(message.find("step 6: rank 0 layer 0 ('layer0') element 50 = -inf") != std::string::npos,
               "rank " + std::to_string(comm.rank()) + " message: " + message);
        m.grads[0][50] = 0.0f;
        expect(strict.check(m.layers, 7), "clean gradients pass");
        return 0;
    });
    CHECK(results.size() == 2);
}
