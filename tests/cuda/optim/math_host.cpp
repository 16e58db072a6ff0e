// The GPU optimizers' arithmetic on the host: every rule's kernels, replayed with the same per-element functions,
// chunk table and lane order (emulate.hpp), against the CPU kernels (model_optimizer<O, cpu>) bit for bit, over
// several steps, on sizes 0, 1, 31, 32, 33, 4096, 4097 and 1<<20 + 3, with NaN, infinities, denormals and signed
// zeros among the inputs, weight decay on and off, AMSGrad, Nesterov, dampening and excluded layers. A NaN result
// matches any NaN (see same_value); every other result must have the same bits.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "driver.hpp"
#include "emulate.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/adamw.hpp"
#include "hitch/optim/lamb.hpp"
#include "hitch/optim/lars.hpp"
#include "hitch/optim/model_optimizer.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"
#include "inputs.hpp"
#include "reference.hpp"

namespace {

namespace optim = hitch::optim;
using hitch_test::emulated_model;
using hitch_test::float_model;

using hitch_test::edge_sizes;
using hitch_test::has_edges;
using hitch_test::shrink;
using hitch_test::sprinkle;

template <class O>
struct state_view {
    static std::vector<std::vector<float>> of(const typename O::template state_type<hitch::cpu>& s) {
        std::vector<std::vector<float>> out;
        for (const hitch::tensor_view<float> b : s.buffers()) out.emplace_back(b.data(), b.data() + b.size());
        return out;
    }
};

/// The same bits, or both NaN: which NaN an operation on two NaNs returns is not part of the contract (x86 returns
/// one operand's, and which one depends on the operand order the compiler picks for a + b; a GPU returns the
/// canonical NaN), everything else is.
bool same_value(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }
bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (!same_value(a[i], b[i])) return false;
    return true;
}

/// "element i: x (gpu) vs y (cpu)" for the first element whose bits differ, for the failure message.
std::string first_difference(const std::vector<float>& gpu, const std::vector<float>& cpu) {
    if (gpu.size() != cpu.size()) return "sizes differ";
    for (std::size_t i = 0; i < gpu.size(); ++i)
        if (!same_value(gpu[i], cpu[i])) {
            char text[128];
            std::snprintf(text, sizeof text, "element %zu: %a (gpu) vs %a (cpu)", i, static_cast<double>(gpu[i]),
                          static_cast<double>(cpu[i]));
            return text;
        }
    return "none";
}

/// Steps the CPU model_optimizer and the emulated GPU side by side and requires the same bits after every step.
template <class O>
void check_rule(const typename O::options_type& options, const std::vector<hitch::layer_flags>& flags, int steps,
                const std::string& label) {
    INFO(label);
    const std::uint64_t seed = 77;
    float_model cpu_model(edge_sizes(), seed, flags);
    for (std::size_t k = 0; k < cpu_model.params.size(); ++k) {
        shrink(cpu_model.params[k], k);
        if (has_edges(k)) sprinkle(cpu_model.params[k], 1000 + k);
    }
    optim::model_optimizer<O> cpu(options, cpu_model.layers);
    const O rule(options);

    emulated_model gpu(edge_sizes().size());
    const int state_count = static_cast<int>(state_view<O>::of(cpu.state(0)).size());
    for (std::size_t k = 0; k < gpu.size(); ++k) {
        gpu[k].w = cpu_model.params[k];
        gpu[k].flags = cpu_model.layers[k].flags;
        const auto shapes = state_view<O>::of(cpu.state(k));  // zeros, in the rule's order and sizes
        for (int q = 0; q < state_count; ++q)
            gpu[k].s[static_cast<std::size_t>(q)] = shapes[static_cast<std::size_t>(q)];
    }

    for (int t = 0; t < steps; ++t) {
        cpu_model.fill_gradients(seed, static_cast<std::uint64_t>(t));
        for (std::size_t k = 0; k < gpu.size(); ++k) {
            if (has_edges(k)) sprinkle(cpu_model.grads[k], 17 * static_cast<std::uint64_t>(t) + k);
            if (t == 1) shrink(cpu_model.grads[k], k);
            gpu[k].g = cpu_model.grads[k];
        }
        const float lr = t == 2 ? 0.0f : 0.05f / static_cast<float>(t + 1);
        cpu.step(lr);
        hitch_test::emulate_step(rule, gpu, lr);
        for (std::size_t k = 0; k < gpu.size(); ++k) {
            INFO("step " << t << " layer " << k << " (" << gpu[k].w.size() << " elements)");
            INFO("parameters: " << first_difference(gpu[k].w, cpu_model.params[k]));
            REQUIRE(same_values(gpu[k].w, cpu_model.params[k]));
            const auto state = state_view<O>::of(cpu.state(k));
            for (std::size_t q = 0; q < state.size(); ++q) {
                INFO("state buffer " << q << ": " << first_difference(gpu[k].s[q], state[q]));
                REQUIRE(same_values(gpu[k].s[q], state[q]));
            }
            REQUIRE(gpu[k].steps == cpu.state(k).steps);
        }
    }
}

std::vector<hitch::layer_flags> mixed_flags() {
    return {{}, {}, hitch::layer_flags::bias_or_norm(), {true, false}, {false, true}, {}, {}, {}};
}

}  // namespace

TEST_CASE("sgd: the GPU arithmetic gives the CPU's bits", "[cuda][optim][host]") {
    check_rule<optim::sgd>({}, {}, 3, "sgd");
    check_rule<optim::sgd>({.weight_decay = 1e-2f}, mixed_flags(), 3, "sgd, weight decay");
}

TEST_CASE("momentum: the GPU arithmetic gives the CPU's bits", "[cuda][optim][host]") {
    check_rule<optim::momentum>({}, {}, 3, "momentum");
    check_rule<optim::momentum>({.momentum = 0.8f, .dampening = 0.25f, .weight_decay = 5e-4f}, mixed_flags(), 3,
                                "momentum, dampening, weight decay");
    check_rule<optim::momentum>({.momentum = 0.9f, .nesterov = true, .weight_decay = 1e-3f}, mixed_flags(), 3,
                                "nesterov, weight decay");
}

TEST_CASE("adam and adamw: the GPU arithmetic gives the CPU's bits", "[cuda][optim][host]") {
    check_rule<optim::adam>({}, {}, 3, "adam");
    check_rule<optim::adam>({.weight_decay = 1e-2f, .amsgrad = true}, mixed_flags(), 4, "adam, amsgrad, L2");
    check_rule<optim::adamw>({}, mixed_flags(), 3, "adamw");
    check_rule<optim::adamw>({.beta1 = 0.5f, .beta2 = 0.9f, .epsilon = 1e-6f, .weight_decay = 0.1f, .amsgrad = true},
                             mixed_flags(), 4, "adamw, amsgrad");
}

TEST_CASE("lars: the GPU arithmetic gives the CPU's bits", "[cuda][optim][host]") {
    check_rule<optim::lars<optim::momentum>>({.base = {.momentum = 0.9f}, .weight_decay = 5e-4f}, mixed_flags(), 3,
                                             "lars<momentum>");
    check_rule<optim::lars<optim::momentum>>(
        {.base = {.momentum = 0.9f, .nesterov = true}, .trust_coefficient = 0.02f, .epsilon = 1e-5f}, {}, 3,
        "lars<nesterov>");
    check_rule<optim::lars<optim::sgd>>({.weight_decay = 1e-4f}, mixed_flags(), 3, "lars<sgd>");
    check_rule<optim::lars<optim::adam>>({.base = {.amsgrad = true}, .weight_decay = 1e-3f}, mixed_flags(), 3,
                                         "lars<adam>");
    check_rule<optim::lars<optim::adamw>>({.base = {.weight_decay = 0.0f}, .weight_decay = 1e-2f}, mixed_flags(), 3,
                                          "lars<adamw>");
}

TEST_CASE("lamb: the GPU arithmetic gives the CPU's bits", "[cuda][optim][host]") {
    check_rule<optim::lamb>({}, {}, 3, "lamb");
    check_rule<optim::lamb>({.weight_decay = 1e-2f}, mixed_flags(), 4, "lamb, weight decay");
    check_rule<optim::lamb>({.beta1 = 0.8f, .epsilon = 1e-4f, .weight_decay = 0.1f, .bias_correction = false},
                            mixed_flags(), 3, "lamb without bias correction");
}

TEST_CASE("the element functions follow the documented order, not another one", "[cuda][optim][host]") {
    // A check with teeth: the adam element with its two divisions merged (m / (r * q) instead of (m / r) / ...)
    // differs somewhere, so the comparisons above would notice an order change.
    namespace co = hitch::cuda::optim;
    const optim::adam rule;
    const co::adam_scalars k = co::elementwise_rule<optim::adam>::make(rule, 1e-3f, 0.0f, 3);
    int differ = 0;
    for (int i = 1; i < 2000; ++i) {
        float w = 0.5f, m = 0.01f * static_cast<float>(i), v = 1e-4f * static_cast<float>(i), vmax = 0.0f;
        const float g = hitch_test::uniform(3, 0, static_cast<std::uint64_t>(i));
        co::adam_element(w, g, m, v, vmax, 1.0f, k);
        const float root = std::sqrt(v);
        const float other = 0.5f - k.step_size * (m / (root / k.bc2_sqrt + k.eps));
        const float fused = 0.5f - (k.step_size * m) / (root / k.bc2_sqrt + k.eps);
        CHECK(w == other);  // the documented order, written with operators
        if (w != fused) ++differ;
    }
    CHECK(differ > 0);
}
