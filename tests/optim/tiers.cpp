// Every instruction-set tier the optimizer kernels are built for (hitch/optim/detail/tiers.hpp) gives the portable
// kernel's bits: each optimizer runs the same steps pinned to each tier this processor has, and the parameters are
// compared bit for bit with the portable run's.

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "driver.hpp"
#include "hitch/core/isa.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/adamw.hpp"
#include "hitch/optim/lamb.hpp"
#include "hitch/optim/lars.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"

using namespace hitch_test;
namespace optim = hitch::optim;

namespace {

/// Restores the widest tier when a test ends, whatever it pinned.
struct isa_limit_guard {
    ~isa_limit_guard() { hitch::set_isa_limit(hitch::cpu_isa()); }
};

/// The tiers this processor can run, portable first.
std::vector<hitch::isa> tiers() {
    std::vector<hitch::isa> t{hitch::isa::portable};
    if (hitch::cpu_isa() >= hitch::isa::avx2) t.push_back(hitch::isa::avx2);
    if (hitch::cpu_isa() >= hitch::isa::avx512) t.push_back(hitch::isa::avx512);
    return t;
}

/// Parameters after `steps` steps of O with `options` on every sweep size plus a layer with a tail in every
/// vector width and several norm blocks, pinned to `tier`; bias and norm layers are excluded from decay and
/// adaptation, as in training.
template <class O>
std::vector<float> run(hitch::isa tier, const typename O::options_type& options, int steps) {
    hitch::set_isa_limit(tier);
    std::vector<std::size_t> sizes = sweep_sizes();
    sizes.push_back(3 * 4096 + 255);
    std::vector<hitch::layer_flags> flags(sizes.size());
    flags[2] = hitch::layer_flags::bias_or_norm();
    float_model m(sizes, 71, flags);
    optim::model_optimizer<O> opt(options, m.layers);
    for (int t = 0; t < steps; ++t) {
        m.fill_gradients(5, static_cast<std::uint64_t>(t));
        opt.step(t < 2 ? 1e-2f : 3e-3f);
    }
    return all_params(m);
}

template <class O>
void check_tiers(const std::string& what, const typename O::options_type& options) {
    const isa_limit_guard guard;
    const std::vector<float> portable = run<O>(hitch::isa::portable, options, 6);
    for (const hitch::isa tier : tiers()) {
        INFO(what << " on the " << hitch::isa_name(tier) << " tier");
        REQUIRE(hitch::active_isa() <= tier);
        CHECK(bitwise_equal(run<O>(tier, options, 6), portable));
    }
}

}  // namespace

TEST_CASE("every tier of the sgd and momentum kernels gives the portable bits", "[optim][tiers]") {
    check_tiers<optim::sgd>("sgd", {.weight_decay = 1e-4f});
    check_tiers<optim::sgd>("sgd without decay", {});
    check_tiers<optim::momentum>("momentum", {.momentum = 0.9f, .weight_decay = 1e-4f});
    check_tiers<optim::momentum>("nesterov", {.momentum = 0.9f, .nesterov = true, .weight_decay = 1e-3f});
    check_tiers<optim::momentum>("dampened", {.momentum = 0.5f, .dampening = 0.1f});
}

TEST_CASE("every tier of the adam kernels gives the portable bits", "[optim][tiers]") {
    check_tiers<optim::adam>("adam", {.weight_decay = 1e-3f});
    check_tiers<optim::adam>("amsgrad", {.amsgrad = true});
    check_tiers<optim::adamw>("adamw", {.weight_decay = 1e-2f});
}

TEST_CASE("every tier of the layer-wise kernels (norms included) gives the portable bits", "[optim][tiers]") {
    check_tiers<optim::lars_sgd>("lars<momentum>", {.base = {.momentum = 0.9f}, .weight_decay = 5e-4f});
    check_tiers<optim::lars_adam>("lars<adam>", {.weight_decay = 1e-4f});
    check_tiers<optim::lamb>("lamb", {.weight_decay = 1e-2f});
    check_tiers<optim::lamb>("lamb without decay or bias correction", {.bias_correction = false});
}

TEST_CASE("the tier limit refuses names and tiers it cannot run", "[optim][tiers]") {
    const isa_limit_guard guard;
    for (const hitch::isa tier : {hitch::isa::portable, hitch::isa::avx2, hitch::isa::avx512})
        CHECK(hitch::parse_isa(hitch::isa_name(tier)) == tier);
    CHECK_THROWS_WITH(hitch::parse_isa("sse2"), Catch::Contains("'sse2' is not one of portable, avx2, avx512"));
    CHECK_THROWS_AS(hitch::parse_isa("AVX2"), hitch::config_error);
    if (hitch::cpu_isa() < hitch::isa::avx512)
        CHECK_THROWS_WITH(hitch::set_isa_limit(hitch::isa::avx512),
                          Catch::Contains("cannot run the avx512 kernels") &&
                              Catch::Contains(std::string(hitch::isa_name(hitch::cpu_isa()))));
    hitch::set_isa_limit(hitch::isa::portable);
    CHECK(hitch::isa_limit() == hitch::isa::portable);
    CHECK(hitch::active_isa() == hitch::isa::portable);
    hitch::set_isa_limit(hitch::cpu_isa());
    CHECK(hitch::active_isa() == hitch::cpu_isa());
}
