#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <ranges>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "driver.hpp"
#include "hitch/optim/adamw.hpp"
#include "hitch/optim/lamb.hpp"
#include "hitch/optim/lars.hpp"
#include "hitch/optim/one_of.hpp"
#include "hitch/optim/sharded.hpp"

using namespace hitch_test;
namespace optim = hitch::optim;

namespace {

// Odd sizes: a layer smaller than every p > 1 (some ranks own an empty piece), a SIMD tail, and one that spans two
// norm blocks; two layers are excluded from adaptation and decay.
const std::vector<std::size_t> model_sizes = {1, 7, 1000, 4099, 33};
const std::vector<hitch::layer_flags> model_flags = {
    {}, hitch::layer_flags::bias_or_norm(), {}, {}, hitch::layer_flags::bias_or_norm()};
constexpr std::uint64_t grad_seed = 77;
constexpr int steps = 5;

/// The all-reduce of the ranks' partial sums, for ranks that are threads: each rank adds all contributions in rank
/// order, so every rank gets the same bits (as an all-reduce guarantees).
class thread_sum {
public:
    explicit thread_sum(int ranks) : partial_(static_cast<std::size_t>(ranks)), barrier_(ranks) {}
    void operator()(int rank, std::span<double> x) {
        partial_[static_cast<std::size_t>(rank)].assign(x.begin(), x.end());
        barrier_.arrive_and_wait();
        for (std::size_t i = 0; i < x.size(); ++i) {
            double s = 0.0;
            for (const auto& p : partial_) s += p.at(i);
            x[i] = s;
        }
        barrier_.arrive_and_wait();
    }

private:
    std::vector<std::vector<double>> partial_;
    std::barrier<> barrier_;
};

enum class cut { per_layer, flat };

/// Rank r's pieces of p: every layer cut in p, or the model laid end to end and cut in p.
std::vector<optim::piece> pieces_of(const std::vector<hitch::layer>& layers, int p, int r, cut how) {
    if (how == cut::per_layer) return optim::layer_pieces(layers, p, r);
    std::size_t total = 0;
    for (const auto& l : layers) total += l.size();
    const auto b = hitch::allreduce::partition(total, p, r);
    return optim::flat_range_pieces(layers, b.offset, b.offset + b.count);
}

template <class O>
std::vector<optim::sharded_optimizer<O>> make_ranks(const typename O::options_type& options,
                                                    const std::vector<hitch::layer>& layers, int p,
                                                    cut how = cut::per_layer) {
    std::vector<optim::sharded_optimizer<O>> ranks;
    for (int r = 0; r < p; ++r) ranks.emplace_back(options, layers, pieces_of(layers, p, r, how));
    return ranks;
}

/// One step of every rank, each on its own thread; returns the number of reduce_sums calls and checks their length.
template <class O>
int step_ranks(std::vector<optim::sharded_optimizer<O>>& ranks, float lr, std::span<const unsigned char> skip = {}) {
    const int p = static_cast<int>(ranks.size());
    thread_sum sum(p);
    std::atomic<int> calls{0}, wrong_length{0};
    std::vector<std::thread> threads;
    for (int r = 0; r < p; ++r)
        threads.emplace_back([&, r] {
            auto& rank = ranks[static_cast<std::size_t>(r)];
            rank.step(
                lr,
                [&](std::span<double> x) {
                    ++calls;
                    if (x.size() != 2 * rank.layers().size()) ++wrong_length;
                    sum(r, x);
                },
                skip);
        });
    for (auto& t : threads) t.join();
    CHECK(wrong_length == 0);
    return calls;
}

/// Largest |a - b| in a layer relative to the layer's largest |b|, over all layers.
double worst_relative(const float_model& a, const float_model& b) {
    double worst = 0.0;
    for (std::size_t k = 0; k < a.params.size(); ++k) {
        double scale = 1e-30, e = 0.0;
        for (std::size_t i = 0; i < a.params[k].size(); ++i) {
            scale = std::max(scale, std::abs(static_cast<double>(b.params[k][i])));
            e = std::max(e, std::abs(static_cast<double>(a.params[k][i]) - static_cast<double>(b.params[k][i])));
        }
        worst = std::max(worst, e / scale);
    }
    return worst;
}

/// Every piece's state equals the same range of the unsharded state, bit for bit, with the same step count.
template <class Full, class Rank>
bool same_state(const Full& full, const Rank& rank) {
    for (std::size_t i = 0; i < rank.pieces().size(); ++i) {
        const optim::piece& p = rank.pieces()[i];
        const auto mine = rank.state(i).buffers();
        const auto whole = full.state(p.layer).buffers();
        if (rank.state(i).steps != full.state(p.layer).steps) return false;
        if (std::ranges::size(mine) != std::ranges::size(whole)) return false;
        for (std::size_t b = 0; b < std::ranges::size(mine); ++b) {
            const hitch::tensor_view<float> x = std::ranges::begin(mine)[static_cast<std::ptrdiff_t>(b)];
            const hitch::tensor_view<float> y = std::ranges::begin(whole)[static_cast<std::ptrdiff_t>(b)];
            if (y.size() == 0 && x.size() == 0) continue;  // a buffer the options leave empty (amsgrad off)
            if (x.size() != p.size() || std::memcmp(x.data(), y.data() + p.begin, x.size_bytes()) != 0) return false;
        }
    }
    return true;
}

template <class State>
std::size_t bytes_of(const State& s) {
    std::size_t n = 0;
    for (const hitch::tensor_view<float> b : s.buffers()) n += b.size_bytes();
    return n;
}

/// p sharded ranks against model_optimizer over the whole model for `steps` steps: parameters bitwise equal
/// (elementwise rules, and any rule at p = 1) or within `tolerance`; state bytes add up and are 1/p each.
template <class O>
void compare_with_unsharded(const typename O::options_type& options, float lr, double tolerance) {
    constexpr bool elementwise = !optim::sharded_optimizer<O>::needs_reduction;
    for (const cut how : {cut::per_layer, cut::flat})
        for (int p = 1; p <= 4; ++p) {
            INFO("p " << p << (how == cut::flat ? ", flat pieces" : ", per-layer pieces"));
            float_model ref(model_sizes, 3, model_flags), m(model_sizes, 3, model_flags);
            optim::model_optimizer<O> full(options, ref.layers);
            auto ranks = make_ranks<O>(options, m.layers, p, how);
            for (int t = 0; t < steps; ++t) {
                ref.fill_gradients(grad_seed, static_cast<std::uint64_t>(t));
                m.fill_gradients(grad_seed, static_cast<std::uint64_t>(t));
                const float rate = lr * (t % 2 == 0 ? 1.0f : 0.5f);
                full.step(rate);
                CHECK(step_ranks(ranks, rate) == (elementwise ? 0 : p));
            }
            if (elementwise || p == 1) {
                CHECK(bitwise_equal(all_params(m), all_params(ref)));
                if (elementwise)
                    for (const auto& r : ranks) CHECK(same_state(full, r));
            } else {
                const double err = worst_relative(m, ref);
                INFO("worst relative parameter error " << err);
                CHECK(err <= tolerance);
            }

            std::size_t unsharded = 0, sharded = 0, buffers = 0;
            for (std::size_t k = 0; k < ref.layers.size(); ++k) unsharded += bytes_of(full.state(k));
            for (const auto& b : full.state(3).buffers()) buffers += b.size() != 0 ? 1 : 0;
            // A rank's share of a cut differs from an exact 1/p by less than one element per cut layer and buffer.
            const double slack = static_cast<double>(model_sizes.size() * buffers * sizeof(float));
            for (const auto& r : ranks) {
                sharded += r.state_bytes();
                CHECK(std::abs(static_cast<double>(r.state_bytes()) - static_cast<double>(unsharded) / p) <= slack);
            }
            CHECK(sharded == unsharded);
        }
}

/// A complete optimizer that declares neither kind: its step might read the whole layer.
struct custom_rule {
    struct options_type {
        void validate() const {}
    };
    template <class D>
    struct state_type {
        std::uint64_t steps = 0;
        [[nodiscard]] std::array<hitch::tensor_view<float>, 0> buffers() const { return {}; }
    };
    custom_rule() = default;
    explicit custom_rule(const options_type&) {}
    [[nodiscard]] const options_type& options() const { return options_; }
    static constexpr std::string_view name = "custom";
    template <class D>
    [[nodiscard]] state_type<D> make_state(D&, std::size_t) const {
        return {};
    }
    template <class D>
    void step(const hitch::layer&, state_type<D>&, float, const hitch::parallel_options&) const {}
    options_type options_;
};
/// The same rule, marked elementwise.
struct custom_elementwise : custom_rule {
    using custom_rule::custom_rule;
    static constexpr bool elementwise = true;
};

}  // namespace

static_assert(hitch::optimizer<custom_rule> && !optim::shardable_rule<custom_rule>);
static_assert(optim::shardable_rule<custom_elementwise> && optim::elementwise_rule<custom_elementwise>);
static_assert(!optim::shardable_rule<optim::one_of<optim::momentum, custom_rule>>);
static_assert(optim::elementwise_rule<optim::one_of<optim::sgd, optim::adam, custom_elementwise>>);
static_assert(!optim::elementwise_rule<optim::one_of<optim::momentum, optim::lamb>> &&
              optim::layerwise_rule<optim::one_of<optim::momentum, optim::lamb>>);
static_assert(!optim::sharded_optimizer<optim::adamw>::needs_reduction &&
              optim::sharded_optimizer<optim::lars_adam>::needs_reduction);

TEST_CASE("sharded elementwise rules equal the unsharded optimizer bit for bit", "[optim][sharded]") {
    SECTION("sgd") { compare_with_unsharded<optim::sgd>({.weight_decay = 1e-3f}, 0.1f, 0.0); }
    SECTION("momentum") {
        compare_with_unsharded<optim::momentum>({.momentum = 0.9f, .dampening = 0.1f, .weight_decay = 1e-3f}, 0.1f,
                                                0.0);
    }
    SECTION("nesterov") {
        compare_with_unsharded<optim::momentum>({.momentum = 0.9f, .nesterov = true, .weight_decay = 1e-3f}, 0.1f, 0.0);
    }
    SECTION("adam with amsgrad") {
        compare_with_unsharded<optim::adam>({.weight_decay = 1e-3f, .amsgrad = true}, 0.01f, 0.0);
    }
    SECTION("adamw") { compare_with_unsharded<optim::adamw>({}, 0.01f, 0.0); }
}

// Layer-wise rules add the partial sums of the pieces in another order than one pass over the layer, so the norms
// may differ in the last bits of a double; after rounding to float the trust ratio differs by at most an ulp or
// so, which the tolerance on the parameters (relative to each layer's largest) leaves room for.
TEST_CASE("sharded layer-wise rules equal the unsharded optimizer within float rounding", "[optim][sharded]") {
    constexpr double tolerance = 1e-6;
    SECTION("lars<momentum>") {
        compare_with_unsharded<optim::lars_sgd>(
            {.base = {.momentum = 0.9f}, .trust_coefficient = 0.01f, .weight_decay = 5e-4f}, 1.0f, tolerance);
    }
    SECTION("lars<adam>") {
        compare_with_unsharded<optim::lars_adam>({.trust_coefficient = 0.02f, .weight_decay = 1e-3f}, 0.01f, tolerance);
    }
    SECTION("lamb") { compare_with_unsharded<optim::lamb>({.weight_decay = 0.01f}, 0.01f, tolerance); }
    using mixed = optim::one_of<optim::momentum, optim::lamb>;
    SECTION("one_of<momentum, lamb> holding lamb") {
        compare_with_unsharded<mixed>(optim::lamb::options_type{.weight_decay = 0.01f}, 0.01f, tolerance);
    }
    SECTION("one_of<momentum, lamb> holding momentum: zero sums, and bitwise") {
        compare_with_unsharded<mixed>(optim::momentum::options_type{.momentum = 0.9f}, 0.1f, 0.0);
    }
}

TEST_CASE("lars and lamb split steps on a whole layer are step(), bit for bit", "[optim][sharded]") {
    float_model a(sweep_sizes(), 9, model_flags), b(sweep_sizes(), 9, model_flags);
    const optim::lamb rule({.weight_decay = 0.01f});
    const optim::lars_adam lars({.trust_coefficient = 0.02f, .weight_decay = 1e-3f});
    hitch::cpu dev;
    for (std::size_t k = 0; k < a.layers.size(); ++k) {
        auto sa = rule.make_state(dev, a.layers[k].size()), sb = rule.make_state(dev, b.layers[k].size());
        auto la = lars.make_state(dev, a.layers[k].size()), lb = lars.make_state(dev, b.layers[k].size());
        for (std::uint64_t t = 0; t < 3; ++t) {
            a.fill_gradients(4, t);
            b.fill_gradients(4, t);
            rule.step(a.layers[k], sa, 0.01f);
            rule.apply_with_sums(b.layers[k], sb, 0.01f, rule.norm_sums(b.layers[k], sb));
            lars.step(a.layers[k], la, 0.01f);
            lars.apply_with_sums(b.layers[k], lb, 0.01f, lars.norm_sums(b.layers[k], lb));
        }
        CHECK(sa.steps == sb.steps);
    }
    CHECK(bitwise_equal(all_params(a), all_params(b)));
}

TEST_CASE("sharded skip mask leaves a layer's state and parameters untouched", "[optim][sharded]") {
    const auto run = [](auto tag, const auto& options, float lr, bool bitwise) {
        using O = typename decltype(tag)::type;
        float_model ref(model_sizes, 3, model_flags), m(model_sizes, 3, model_flags);
        optim::model_optimizer<O> full(options, ref.layers);
        auto ranks = make_ranks<O>(options, m.layers, 3);
        std::vector<unsigned char> skip(model_sizes.size(), 0);
        for (int t = 0; t < steps; ++t) {
            ref.fill_gradients(grad_seed, static_cast<std::uint64_t>(t));
            m.fill_gradients(grad_seed, static_cast<std::uint64_t>(t));
            skip[2] = (t % 2 == 1) ? 1 : 0;  // layer 2 has no gradient in odd steps
            skip[0] = (t == 0) ? 1 : 0;
            for (std::size_t k = 0; k < model_sizes.size(); ++k)
                if (skip[k] == 0) full.step(k, lr);
            step_ranks(ranks, lr, skip);
        }
        if (bitwise) {
            CHECK(bitwise_equal(all_params(m), all_params(ref)));
            for (const auto& r : ranks) CHECK(same_state(full, r));
        } else {
            CHECK(worst_relative(m, ref) <= 1e-6);
        }
        CHECK(ranks[0].state(2).steps == 3);
        const std::vector<unsigned char> wrong(2, 0);
        CHECK_THROWS_AS(ranks[0].step(lr, [](std::span<double>) {}, wrong), hitch::config_error);
    };
    run(std::type_identity<optim::momentum>{}, optim::momentum::options_type{.momentum = 0.9f}, 0.1f, true);
    run(std::type_identity<optim::lamb>{}, optim::lamb::options_type{.weight_decay = 0.01f}, 0.01f, false);
}

TEST_CASE("sharded step_piece of every piece is step()", "[optim][sharded]") {
    float_model a(model_sizes, 3, model_flags), b(model_sizes, 3, model_flags);
    auto ra = make_ranks<optim::adamw>({}, a.layers, 2), rb = make_ranks<optim::adamw>({}, b.layers, 2);
    for (std::uint64_t t = 0; t < 3; ++t) {
        a.fill_gradients(grad_seed, t);
        b.fill_gradients(grad_seed, t);
        for (auto& r : ra) r.step(0.01f);
        for (auto& r : rb)
            for (std::size_t i = r.pieces().size(); i-- > 0;) r.step_piece(i, 0.01f);
    }
    CHECK(bitwise_equal(all_params(a), all_params(b)));
    CHECK_THROWS_AS(rb[0].step_piece(rb[0].pieces().size(), 0.01f), hitch::config_error);
}

TEST_CASE("sharded state saves and loads: the run resumes bit for bit", "[optim][sharded]") {
    const auto run = [](auto tag, const auto& options, float lr) {
        using O = typename decltype(tag)::type;
        constexpr int p = 3;
        float_model a(model_sizes, 3, model_flags), b(model_sizes, 3, model_flags), c(model_sizes, 3, model_flags);
        auto ranks_a = make_ranks<O>(options, a.layers, p), ranks_b = make_ranks<O>(options, b.layers, p);
        std::vector<std::string> saved;
        for (int t = 0; t < steps; ++t) {
            a.fill_gradients(grad_seed, static_cast<std::uint64_t>(t));
            step_ranks(ranks_a, lr);
            if (t < 3) {
                b.fill_gradients(grad_seed, static_cast<std::uint64_t>(t));
                step_ranks(ranks_b, lr);
            }
        }
        for (const auto& r : ranks_b) {
            std::stringstream s;
            r.save(s);
            saved.push_back(s.str());
        }
        for (std::size_t k = 0; k < b.params.size(); ++k) std::ranges::copy(b.params[k], c.params[k].begin());
        auto ranks_c = make_ranks<O>(options, c.layers, p);
        for (std::size_t r = 0; r < ranks_c.size(); ++r) {
            std::stringstream s(saved[r]);
            ranks_c[r].load(s);
        }
        for (int t = 3; t < steps; ++t) {
            c.fill_gradients(grad_seed, static_cast<std::uint64_t>(t));
            step_ranks(ranks_c, lr);
        }
        CHECK(bitwise_equal(all_params(c), all_params(a)));
        for (std::size_t r = 0; r < ranks_c.size(); ++r) {
            std::stringstream x, y;
            ranks_a[r].save(x);
            ranks_c[r].save(y);
            CHECK(x.str() == y.str());
        }
        // Another rank's shard, or another p's, is refused.
        std::stringstream other(saved[1]);
        CHECK_THROWS_AS(ranks_c[0].load(other), hitch::mismatch_error);
        auto two = make_ranks<O>(options, c.layers, 2);
        std::stringstream three(saved[0]);
        CHECK_THROWS_AS(two[0].load(three), hitch::mismatch_error);
        std::stringstream cut_short(saved[0].substr(0, saved[0].size() / 2));
        CHECK_THROWS_AS(ranks_c[0].load(cut_short), hitch::corrupt_message_error);
    };
    run(std::type_identity<optim::momentum>{}, optim::momentum::options_type{.momentum = 0.9f}, 0.1f);
    run(std::type_identity<optim::lamb>{}, optim::lamb::options_type{.weight_decay = 0.01f}, 0.01f);
    using mixed = optim::one_of<optim::momentum, optim::lamb>;
    run(std::type_identity<mixed>{}, mixed::options_type(optim::lamb::options_type{}), 0.01f);
}

TEST_CASE("sharded state of another rank with pieces of the same sizes is refused by name", "[optim][sharded]") {
    float_model m({8, 1000}, 3);
    auto ranks = make_ranks<optim::adam>({}, m.layers, 2);
    m.fill_gradients(1, 0);
    ranks[0].step(0.01f);
    ranks[1].step(0.01f);
    std::stringstream s;
    ranks[1].save(s);
    CHECK(ranks[0].piece_layers()[0].name == "layer0[0:4]");
    CHECK_THROWS_WITH(ranks[0].load(s), Catch::Contains("'layer0[0:4]'") && Catch::Contains("'layer0[4:8]'"));
}

TEST_CASE("sharded pieces are checked and named by their layer", "[optim][sharded]") {
    float_model m(model_sizes, 3, model_flags);
    using sharded = optim::sharded_optimizer<optim::momentum>;
    const auto pieces = [](std::vector<optim::piece> p) { return p; };
    CHECK_THROWS_WITH(sharded({}, m.layers, pieces({{9, 0, 0}})),
                      Catch::Contains("layer 9") && Catch::Contains("has 5 layers"));
    CHECK_THROWS_WITH(sharded({}, m.layers, pieces({{2, 0, 1001}})), Catch::Contains("'layer2'"));
    CHECK_THROWS_WITH(sharded({}, m.layers, pieces({{3, 10, 5}})), Catch::Contains("'layer3'"));
    CHECK_THROWS_WITH(sharded({}, m.layers, pieces({{1, 3, 7}, {0, 0, 1}, {1, 0, 3}})),
                      Catch::Contains("'layer1'") && Catch::Contains("two pieces"));
    CHECK_THROWS_AS(optim::layer_pieces(m.layers, 2, 2), hitch::config_error);
    CHECK_THROWS_AS(optim::flat_range_pieces(m.layers, 0, 6000), hitch::config_error);

    // Sorted by layer; an empty piece is fine and holds no state.
    sharded ok({}, m.layers, pieces({{3, 0, 2}, {0, 1, 1}}));
    REQUIRE(ok.pieces().size() == 2);
    CHECK(ok.pieces()[0] == optim::piece{0, 1, 1});
    CHECK(ok.piece_layers()[1].name == "layer3[0:2]");
    CHECK(ok.piece_layers()[1].params.data() == m.params[3].data());
    CHECK(ok.state_bytes() == 2 * sizeof(float));

    // A new view of layer 3 moves its piece along; a view of another size is refused.
    std::vector<float> w3(m.params[3].size()), g3(w3.size());
    ok.rebind(3, hitch::view(w3), hitch::view(g3));
    CHECK(ok.piece_layers()[1].params.data() == w3.data());
    CHECK(ok.piece_layers()[1].grads.data() == g3.data());
    CHECK(ok.layers()[3].params.data() == w3.data());
    CHECK_THROWS_WITH(ok.rebind(3, hitch::view(m.params[2]), hitch::view(m.grads[2])), Catch::Contains("'layer3'"));

    const std::vector<optim::piece> across = {{1, 4, 7}, {2, 0, 1000}, {3, 0, 2}};
    CHECK(optim::flat_range_pieces(m.layers, 5, 1010) == across);
    CHECK(optim::flat_range_pieces(m.layers, 1, 1).empty());
}

TEST_CASE("sharded step refuses a bad learning rate before any state moves", "[optim][sharded]") {
    float_model m(model_sizes, 3, model_flags);
    auto ranks = make_ranks<optim::lamb>({}, m.layers, 1);
    m.fill_gradients(1, 0);
    int calls = 0;
    CHECK_THROWS_AS(ranks[0].step(-1.0f, [&](std::span<double>) { ++calls; }), hitch::config_error);
    CHECK(calls == 0);
    for (std::size_t i = 0; i < ranks[0].pieces().size(); ++i) {
        CHECK(ranks[0].state(i).steps == 0);
        for (const float x : ranks[0].state(i).m.view().host_span()) CHECK(x == 0.0f);
    }
}
