// hitch-simulate's training steps (bench/simulate_step.hpp): the re-enacted step takes the same virtual time as
// hitch::data_parallel itself, to the picosecond, with and without overlap and on one or two levels of network;
// timing only (one buffer shared by every rank) changes no time; the exchange overlaps the backward pass; and the
// models have the parameter counts their papers give.
#include <catch2/catch.hpp>

#include <string>

#include "../../bench/resnet50.hpp"
#include "../../bench/simulate_models.hpp"
#include "../../bench/simulate_step.hpp"

namespace ar = hitch::allreduce;
using hitch::comm::link_model;
using hitch::comm::simulated_network;
using hitch_bench::step_settings;

namespace {

/// A small model: a few layers of uneven sizes and costs, so the buckets split it unevenly.
hitch_bench::model_description small_model() {
    hitch_bench::model_description m;
    m.name = "small";
    for (int k = 0; k < 7; ++k)
        m.tensors.push_back(
            {"l" + std::to_string(k), static_cast<std::size_t>(3000 + 2500 * (k % 3) + 17 * k), 1e6 * (7 - k)});
    return m;
}

step_settings settings_for(bool overlap) {
    step_settings s;
    s.model = small_model();
    s.compute_s = 0.004;
    s.bucket_bytes = 40000;
    s.overlap = overlap;
    s.steps = 2;
    return s;
}

// 1 GB/s between nodes: the exchange is long against the backward pass, so overlap shows.
const simulated_network two_nodes = simulated_network::nodes(2, link_model{1e-6, 1e10}, link_model{5e-6, 1e9});

}  // namespace

TEST_CASE("hitch-simulate: the re-enacted step takes data_parallel's virtual time exactly", "[bench][simulate]") {
    for (bool overlap : {false, true}) {
        CAPTURE(overlap);
        step_settings s = settings_for(overlap);
        s.timing_only = false;
        const auto ring_model = hitch_bench::simulate_step(4, two_nodes, s, ar::ring{});
        const auto hier_model =
            hitch_bench::simulate_step(4, two_nodes, s, ar::hierarchical<ar::binary_tree, ar::rabenseifner>{});
        s.engine = step_settings::engine_kind::data_parallel;
        const auto ring_dp = hitch_bench::simulate_step(4, two_nodes, s, ar::ring{});
        const auto hier_dp =
            hitch_bench::simulate_step(4, two_nodes, s, ar::hierarchical<ar::binary_tree, ar::rabenseifner>{});
        CHECK(ring_model.buckets == ring_dp.buckets);
        CHECK(ring_model.buckets > 2);
        CHECK(ring_model.step_s == ring_dp.step_s);
        CHECK(hier_model.step_s == hier_dp.step_s);
        CHECK(ring_model.step_s > s.compute_s);
    }
}

TEST_CASE("hitch-simulate: timing only changes no virtual time, and the exchange overlaps the backward pass",
          "[bench][simulate]") {
    step_settings s = settings_for(true);
    s.timing_only = false;
    const auto real = hitch_bench::simulate_step(6, two_nodes, s, ar::rabenseifner{});
    s.timing_only = true;
    const auto shared = hitch_bench::simulate_step(6, two_nodes, s, ar::rabenseifner{});
    CHECK(real.step_s == shared.step_s);
    s.overlap = false;
    const auto sequential = hitch_bench::simulate_step(6, two_nodes, s, ar::rabenseifner{});
    // Every bucket but the last one's exchange hides behind the backward pass of the layers before it.
    CHECK(sequential.exposed_s > 1.5 * shared.exposed_s);
}

TEST_CASE("hitch-simulate: the models have their papers' parameter counts", "[bench][simulate]") {
    const auto r50 = hitch_bench::resnet50();
    CHECK(r50.parameters() == 25'557'032);
    CHECK(r50.tensors.size() == 161);
    const auto reference = hitch_bench::resnet50_tensors();
    REQUIRE(reference.size() == r50.tensors.size());
    for (std::size_t k = 0; k < reference.size(); ++k) {
        CHECK(r50.tensors[k].name == reference[k].name);
        CHECK(r50.tensors[k].size == reference[k].size());
    }
    CHECK(hitch_bench::resnet101().parameters() == 44'549'160);
    CHECK(hitch_bench::inception_v3().parameters() == 27'161'264);
    // Multiply-adds per image: 4.1 G (ResNet-50), 7.8 G (ResNet-101), 5.7 G (Inception V3 with its auxiliary head).
    CHECK(r50.flops() == Approx(4.11e9).epsilon(0.01));
    CHECK(hitch_bench::resnet101().flops() == Approx(7.83e9).epsilon(0.01));
    CHECK(hitch_bench::inception_v3().flops() == Approx(5.74e9).epsilon(0.01));
}
