#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "driver.hpp"
#include "hitch/core/error.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/adamw.hpp"
#include "hitch/optim/lamb.hpp"
#include "hitch/optim/lars.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/one_of.hpp"
#include "hitch/optim/sgd.hpp"

using namespace hitch_test;
namespace optim = hitch::optim;

namespace {

using any_rule = optim::one_of<optim::sgd, optim::momentum, optim::adam, optim::adamw, optim::lars_sgd, optim::lamb>;
static_assert(hitch::optimizer<any_rule>);

const std::vector<hitch::layer_flags> flags = {{}, hitch::layer_flags::bias_or_norm(), {}, {}, {}, {}};

/// The rule O run directly and through one_of holding it: the same parameters and the same state, bit for bit,
/// at every step; the saved states are the same bytes.
template <class O>
void same_as_the_rule(const typename O::options_type& options) {
    const auto sizes = sweep_sizes();
    float_model direct(sizes, 17, flags), chosen(sizes, 17, flags);
    optim::model_optimizer<O> a(options, direct.layers);
    optim::model_optimizer<any_rule> b(any_rule::options_type(options), chosen.layers);
    INFO(O::name);
    CHECK(b.optimizer().rule_name() == O::name);
    CHECK(hitch::optimizer_name(b.optimizer()) == O::name);
    for (int t = 0; t < 9; ++t) {
        direct.fill_gradients(4, static_cast<std::uint64_t>(t));
        chosen.fill_gradients(4, static_cast<std::uint64_t>(t));
        const float lr = 0.05f / (1.0f + static_cast<float>(t));
        a.step(lr);
        b.step(lr);
        REQUIRE(bitwise_equal(all_params(direct), all_params(chosen)));
    }
    for (std::size_t k = 0; k < sizes.size(); ++k) CHECK(b.state(k).steps == a.state(k).steps);
    std::stringstream sa, sb;
    a.save(sa);
    b.save(sb);
    CHECK(sa.str() == sb.str());
}

}  // namespace

TEST_CASE("one_of steps, counts and saves exactly as the rule it holds", "[optim][one_of]") {
    same_as_the_rule<optim::sgd>({.weight_decay = 1e-3f});
    same_as_the_rule<optim::momentum>({.momentum = 0.9f, .nesterov = true, .weight_decay = 1e-4f});
    same_as_the_rule<optim::adam>({.weight_decay = 1e-4f, .amsgrad = true});
    same_as_the_rule<optim::adamw>({});
    same_as_the_rule<optim::lars_sgd>({.weight_decay = 5e-4f});
    same_as_the_rule<optim::lamb>({.weight_decay = 0.01f});
}

TEST_CASE("one_of resumes from its own state and refuses another rule's", "[optim][one_of]") {
    const std::string adam_state = saved_state<any_rule>(optim::adam::options_type{}, {10, 20});
    float_model m({10, 20}, 5);
    optim::model_optimizer<any_rule> adam(optim::adam::options_type{}, m.layers);
    std::stringstream in(adam_state);
    adam.load(in);
    CHECK(adam.state(1).steps == 1);

    // Adam and AdamW keep the same buffers: only the recorded name tells them apart.
    optim::model_optimizer<any_rule> adamw(optim::adamw::options_type{}, m.layers);
    std::stringstream again(adam_state);
    CHECK_THROWS_AS(adamw.load(again), hitch::mismatch_error);
    std::stringstream third(adam_state);
    CHECK_THROWS_WITH(adamw.load(third), Catch::Contains("saved by optimizer 'adam' but is being loaded into 'adamw'"));
    CHECK(adamw.state(1).steps == 0);
}

TEST_CASE("one_of checks the chosen rule's options and refuses state of another rule", "[optim][one_of]") {
    CHECK_THROWS_AS(any_rule(optim::adam::options_type{.beta1 = 1.5f}), hitch::config_error);
    CHECK_THROWS_WITH(any_rule(optim::adam::options_type{.beta1 = 1.5f}), Catch::Contains("beta1"));
    CHECK_NOTHROW(any_rule());
    CHECK(any_rule().rule_name() == "sgd");  // the first rule, with its default options
    CHECK(any_rule(optim::lamb::options_type{}).index() == 5);

    hitch::cpu dev;
    std::vector<float> w(8, 1.0f), g(8, 0.5f);
    const hitch::layer l{"w", hitch::view(w), hitch::view(g)};
    const any_rule sgd(optim::sgd::options_type{});
    const any_rule adam(optim::adam::options_type{});
    auto adam_state = adam.make_state(dev, w.size());
    CHECK(adam_state.buffers().size() == 3);
    CHECK_THROWS_WITH(sgd.step(l, adam_state, 0.1f), Catch::Contains("layer 'w' holds adam state, but this optimizer "
                                                                     "is sgd"));
    CHECK(w[0] == 1.0f);
    adam.step(l, adam_state, 0.1f);
    CHECK(adam_state.steps == 1);
    CHECK(w[0] < 1.0f);
}
