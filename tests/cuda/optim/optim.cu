// The optimizers on the GPU against the CPU kernels: every rule through model_optimizer<O, cuda::device> (the fused
// step, and step(i, lr) one layer at a time) against model_optimizer<O, cpu> over several steps, parameters and
// state compared bit for bit (a NaN matches any NaN: a GPU returns the canonical NaN where the CPU keeps a payload);
// the fused step against the per-layer one exactly; the layer-wise rules' split phases; state saved on the GPU and
// loaded on the CPU and back; rebind; one_of. Skips (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "driver.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/optim/all.cuh"
#include "hitch/device/buffer.hpp"
#include "hitch/optim/model_optimizer.hpp"
#include "inputs.hpp"
#include "reference.hpp"

namespace {

namespace optim = hitch::optim;
using hitch::cuda::device;
using hitch_test::float_model;

/// A float_model's layers copied into GPU memory; `offset` floats in front of each view (an odd offset makes the
/// views unaligned, which takes the kernels' one-float path).
struct device_model {
    device* dev;
    std::vector<hitch::device_buffer<float, device>> params, grads;
    std::vector<hitch::layer> layers;

    device_model(device& d, const float_model& host, std::size_t offset = 0) : dev(&d) {
        for (std::size_t k = 0; k < host.params.size(); ++k) {
            const std::size_t n = host.params[k].size();
            params.emplace_back(d, n + offset);
            grads.emplace_back(d, n + offset);
            d.copy_from_host(params.back().data() + offset, host.params[k].data(), n * sizeof(float));
            layers.push_back({host.layers[k].name,
                              hitch::tensor_view<float>(params.back().data() + offset, n, hitch::memory_space::cuda),
                              hitch::tensor_view<float>(grads.back().data() + offset, n, hitch::memory_space::cuda),
                              host.layers[k].flags});
        }
    }
    void upload_grads(const float_model& host) {
        for (std::size_t k = 0; k < layers.size(); ++k)
            dev->copy_from_host(layers[k].grads.data(), host.grads[k].data(), host.grads[k].size() * sizeof(float));
    }
    [[nodiscard]] std::vector<float> params_of(std::size_t k) const { return download(*dev, layers[k].params); }

    static std::vector<float> download(device& d, hitch::tensor_view<float> v) {
        std::vector<float> out(v.size());
        d.copy_to_host(out.data(), v.data(), v.size() * sizeof(float));
        return out;
    }
};

/// Same bits, or both NaN.
bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (!(std::memcmp(&a[i], &b[i], sizeof(float)) == 0 || (a[i] != a[i] && b[i] != b[i]))) return false;
    return true;
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

template <class State>
std::vector<std::vector<float>> host_state(const State& s) {
    std::vector<std::vector<float>> out;
    for (const hitch::tensor_view<float> b : s.buffers()) out.emplace_back(b.data(), b.data() + b.size());
    return out;
}
template <class State>
std::vector<std::vector<float>> device_state(device& d, const State& s) {
    std::vector<std::vector<float>> out;
    for (const hitch::tensor_view<float> b : s.buffers()) out.push_back(device_model::download(d, b));
    return out;
}

/// Fills step t's gradients (with edge values in some layers) on the host model and uploads them.
void gradients(float_model& host, device_model& gpu, std::uint64_t seed, int t) {
    host.fill_gradients(seed, static_cast<std::uint64_t>(t));
    for (std::size_t k = 0; k < host.grads.size(); ++k) {
        if (hitch_test::has_edges(k)) hitch_test::sprinkle(host.grads[k], 17 * static_cast<std::uint64_t>(t) + k);
        if (t == 1) hitch_test::shrink(host.grads[k], k);
    }
    gpu.upload_grads(host);
}

float rate(int t) { return t == 2 ? 0.0f : 0.05f / static_cast<float>(t + 1); }

void prepare(float_model& host) {
    for (std::size_t k = 0; k < host.params.size(); ++k) {
        hitch_test::shrink(host.params[k], k);
        if (hitch_test::has_edges(k)) hitch_test::sprinkle(host.params[k], 1000 + k);
    }
}

template <class CpuOpt, class GpuOpt>
void require_same(device& dev, const float_model& host, const CpuOpt& cpu, const device_model& gm, const GpuOpt& gpu,
                  int t) {
    for (std::size_t k = 0; k < host.params.size(); ++k) {
        INFO("step " << t << ", layer " << k << " (" << host.params[k].size() << " elements)");
        REQUIRE(same_values(gm.params_of(k), host.params[k]));
        const auto hs = host_state(cpu.state(k));
        const auto ds = device_state(dev, gpu.state(k));
        REQUIRE(hs.size() == ds.size());
        for (std::size_t q = 0; q < hs.size(); ++q) REQUIRE(same_values(ds[q], hs[q]));
        REQUIRE(cpu.state(k).steps == gpu.state(k).steps);
    }
}

std::vector<hitch::layer_flags> mixed_flags() {
    return {{}, {}, hitch::layer_flags::bias_or_norm(), {true, false}, {false, true}, {}, {}, {}};
}

/// model_optimizer<O, cuda::device> against model_optimizer<O, cpu>, fused or layer by layer.
template <class O>
void check_rule(const typename O::options_type& options, const std::vector<hitch::layer_flags>& flags,
                const std::string& label, bool fused = true, std::size_t offset = 0, int steps = 3) {
    INFO(label << (fused ? ", fused" : ", layer by layer") << ", offset " << offset);
    device dev;
    const std::uint64_t seed = 41;
    float_model host(hitch_test::edge_sizes(), seed, flags);
    prepare(host);
    device_model gm(dev, host, offset);
    optim::model_optimizer<O> cpu(options, host.layers);
    optim::model_optimizer<O, device> gpu(options, gm.layers, dev);
    for (int t = 0; t < steps; ++t) {
        gradients(host, gm, seed, t);
        cpu.step(rate(t));
        if (fused) {
            gpu.step(rate(t));
        } else {
            for (std::size_t k = 0; k < gpu.size(); ++k) gpu.step(k, rate(t));
        }
        require_same(dev, host, cpu, gm, gpu, t);
    }
}

/// The fused step and the per-layer step on the GPU agree exactly (NaN payloads included: both are the GPU's).
template <class O>
void check_fused_against_layers(const typename O::options_type& options) {
    device dev;
    float_model host(hitch_test::edge_sizes(), 5, mixed_flags());
    prepare(host);
    device_model a(dev, host), b(dev, host);
    optim::model_optimizer<O, device> fused(options, a.layers, dev), layered(options, b.layers, dev);
    for (int t = 0; t < 3; ++t) {
        gradients(host, a, 5, t);
        b.upload_grads(host);
        fused.step(rate(t));
        for (std::size_t k = 0; k < layered.size(); ++k) layered.step(k, rate(t));
        for (std::size_t k = 0; k < host.params.size(); ++k) {
            REQUIRE(same_bits(a.params_of(k), b.params_of(k)));
            const auto sa = device_state(dev, fused.state(k)), sb = device_state(dev, layered.state(k));
            for (std::size_t q = 0; q < sa.size(); ++q) REQUIRE(same_bits(sa[q], sb[q]));
        }
    }
}

}  // namespace

TEST_CASE("sgd on the GPU gives the CPU's bits", "[cuda][optim]") {
    check_rule<optim::sgd>({}, {}, "sgd");
    check_rule<optim::sgd>({.weight_decay = 1e-2f}, mixed_flags(), "sgd, weight decay");
    check_rule<optim::sgd>({.weight_decay = 1e-2f}, mixed_flags(), "sgd, weight decay", false, 1);
}

TEST_CASE("momentum on the GPU gives the CPU's bits", "[cuda][optim]") {
    check_rule<optim::momentum>({}, {}, "momentum");
    check_rule<optim::momentum>({.momentum = 0.8f, .dampening = 0.25f, .weight_decay = 5e-4f}, mixed_flags(),
                                "dampening, weight decay", true, 1);
    check_rule<optim::momentum>({.nesterov = true, .weight_decay = 1e-3f}, mixed_flags(), "nesterov", false);
}

TEST_CASE("adam and adamw on the GPU give the CPU's bits", "[cuda][optim]") {
    check_rule<optim::adam>({}, {}, "adam");
    check_rule<optim::adam>({.weight_decay = 1e-2f, .amsgrad = true}, mixed_flags(), "adam, amsgrad, L2", true, 3);
    check_rule<optim::adamw>({}, mixed_flags(), "adamw", false);
    check_rule<optim::adamw>({.weight_decay = 0.1f, .amsgrad = true}, mixed_flags(), "adamw, amsgrad", true, 0, 4);
}

TEST_CASE("lars on the GPU gives the CPU's bits", "[cuda][optim]") {
    check_rule<optim::lars<optim::momentum>>({.base = {.momentum = 0.9f}, .weight_decay = 5e-4f}, mixed_flags(),
                                             "lars<momentum>");
    check_rule<optim::lars<optim::momentum>>({.base = {.nesterov = true}, .trust_coefficient = 0.02f}, {},
                                             "lars<nesterov>", false, 1);
    check_rule<optim::lars<optim::sgd>>({.weight_decay = 1e-4f}, mixed_flags(), "lars<sgd>");
    check_rule<optim::lars<optim::adam>>({.base = {.amsgrad = true}, .weight_decay = 1e-3f}, mixed_flags(),
                                         "lars<adam>", false);
}

TEST_CASE("lamb on the GPU gives the CPU's bits", "[cuda][optim]") {
    check_rule<optim::lamb>({}, {}, "lamb");
    check_rule<optim::lamb>({.weight_decay = 1e-2f}, mixed_flags(), "lamb, weight decay", false, 1, 4);
    check_rule<optim::lamb>({.weight_decay = 0.1f, .bias_correction = false}, mixed_flags(), "lamb, no correction");
}

TEST_CASE("one_of on the GPU steps the chosen rule with the CPU's bits", "[cuda][optim]") {
    using any_rule = optim::one_of<optim::momentum, optim::adam, optim::lamb>;
    check_rule<any_rule>(any_rule::options_type(optim::adam::options_type{.amsgrad = true}), mixed_flags(),
                         "one_of adam");
    check_rule<any_rule>(any_rule::options_type(optim::lamb::options_type{.weight_decay = 1e-2f}), mixed_flags(),
                         "one_of lamb", false);
}

TEST_CASE("the fused step is the per-layer step", "[cuda][optim]") {
    check_fused_against_layers<optim::momentum>({.nesterov = true, .weight_decay = 1e-3f});
    check_fused_against_layers<optim::adamw>({.amsgrad = true});
    check_fused_against_layers<optim::lars<optim::momentum>>({.weight_decay = 5e-4f});
    check_fused_against_layers<optim::lamb>({.weight_decay = 1e-2f});
}

TEMPLATE_TEST_CASE("the split phases on the GPU give the CPU's sums and steps", "[cuda][optim]",
                   optim::lars<optim::momentum>, optim::lamb) {
    // One layer cut in two pieces (as a sharded state holds it): each piece's sums, added, then phase 2 per piece.
    device dev;
    const TestType rule;
    for (const std::size_t n : {std::size_t{1}, std::size_t{4097}, (std::size_t{1} << 20) + 3}) {
        INFO(n << " elements");
        float_model host({n}, 3);
        host.fill_gradients(3, 0);
        device_model gm(dev, host);
        const std::size_t cut = n / 2 / 4096 * 4096;  // pieces start on norm blocks, as sharded pieces do
        auto piece = [](const hitch::layer& l, std::size_t b, std::size_t e) {
            return hitch::layer{l.name, l.params.subview(b, e - b), l.grads.subview(b, e - b), l.flags};
        };
        hitch::cpu cpu_dev;
        auto hs0 = rule.make_state(cpu_dev, cut), hs1 = rule.make_state(cpu_dev, n - cut);
        auto ds0 = rule.make_state(dev, cut), ds1 = rule.make_state(dev, n - cut);
        for (int t = 0; t < 2; ++t) {
            host.fill_gradients(3, static_cast<std::uint64_t>(t));
            gm.upload_grads(host);
            const hitch::layer h0 = piece(host.layers[0], 0, cut), h1 = piece(host.layers[0], cut, n);
            const hitch::layer d0 = piece(gm.layers[0], 0, cut), d1 = piece(gm.layers[0], cut, n);
            const optim::layer_sums a = rule.norm_sums(h0, hs0), b = rule.norm_sums(h1, hs1);
            const optim::layer_sums c = rule.norm_sums(d0, ds0), d = rule.norm_sums(d1, ds1);
            CHECK(std::memcmp(&a, &c, sizeof a) == 0);
            CHECK(std::memcmp(&b, &d, sizeof b) == 0);
            const optim::layer_sums total{a[0] + b[0], a[1] + b[1]};
            rule.apply_with_sums(h0, hs0, 0.1f, total);
            rule.apply_with_sums(h1, hs1, 0.1f, total);
            rule.apply_with_sums(d0, ds0, 0.1f, total);
            rule.apply_with_sums(d1, ds1, 0.1f, total);
            REQUIRE(same_bits(gm.params_of(0), host.params[0]));
        }
    }
}

TEST_CASE("state saved on the GPU loads on the CPU and back, and the runs go on alike", "[cuda][optim]") {
    using O = optim::adam;
    const O::options_type options{.weight_decay = 1e-3f, .amsgrad = true};
    device dev;
    float_model host(hitch_test::edge_sizes(), 8, mixed_flags());
    device_model gm(dev, host);
    optim::model_optimizer<O> cpu(options, host.layers);
    optim::model_optimizer<O, device> gpu(options, gm.layers, dev);
    for (int t = 0; t < 2; ++t) {
        gradients(host, gm, 8, t);
        gpu.step(rate(t));
    }
    // The GPU's state into the CPU optimizer, the GPU's parameters into the CPU model; then one more step each.
    std::stringstream saved;
    gpu.save(saved);
    const std::string bytes = saved.str();
    std::stringstream in(bytes);
    cpu.load(in);
    // Copied into the existing storage: the CPU optimizer's layers view it (assigning a new vector would leave them
    // pointing at freed memory).
    for (std::size_t k = 0; k < host.params.size(); ++k) {
        const std::vector<float> now = gm.params_of(k);
        std::copy(now.begin(), now.end(), host.params[k].begin());
    }
    // And into a fresh GPU optimizer, which must then step exactly as the first.
    device_model gm2(dev, host);
    optim::model_optimizer<O, device> gpu2(options, gm2.layers, dev);
    std::stringstream in2(bytes);
    gpu2.load(in2);
    std::stringstream again;
    gpu2.save(again);
    CHECK(again.str() == bytes);
    gradients(host, gm, 8, 2);
    gm2.upload_grads(host);
    cpu.step(0.01f);
    gpu.step(0.01f);
    gpu2.step(0.01f);
    require_same(dev, host, cpu, gm, gpu, 2);
    for (std::size_t k = 0; k < host.params.size(); ++k) REQUIRE(same_bits(gm.params_of(k), gm2.params_of(k)));
}

TEST_CASE("rebind points the fused step at new buffers", "[cuda][optim]") {
    using O = optim::lamb;
    device dev;
    float_model host({33, 5000, 70000}, 12);
    device_model gm(dev, host), moved(dev, host, 1);
    optim::model_optimizer<O> cpu({}, host.layers);
    optim::model_optimizer<O, device> gpu({}, gm.layers, dev);
    gradients(host, gm, 12, 0);
    cpu.step(0.1f);
    gpu.step(0.1f);
    // Layer 1 moves to an unaligned copy of its current values.
    const std::vector<float> now = gm.params_of(1);
    dev.copy_from_host(moved.layers[1].params.data(), now.data(), now.size() * sizeof(float));
    gpu.rebind(1, moved.layers[1].params, moved.layers[1].grads);
    gm.layers[1] = moved.layers[1];
    gradients(host, gm, 12, 1);
    cpu.step(0.1f);
    gpu.step(0.1f);
    require_same(dev, host, cpu, gm, gpu, 1);
}

TEST_CASE("a device step refuses host memory and a bad rate", "[cuda][optim]") {
    device dev;
    float_model host({16}, 1);
    device_model gm(dev, host);
    optim::model_optimizer<optim::adam, device> gpu({}, gm.layers, dev);
    CHECK_THROWS_AS(gpu.step(-1.0f), hitch::config_error);
    CHECK_THROWS_AS(gpu.step(0, std::numeric_limits<float>::quiet_NaN()), hitch::config_error);
    CHECK_THROWS_AS((optim::model_optimizer<optim::adam, device>({}, host.layers, dev)), hitch::config_error);
}
