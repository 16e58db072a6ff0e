#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "../core/legacy_formats.hpp"
#include "driver.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/adamw.hpp"
#include "hitch/optim/lamb.hpp"
#include "hitch/optim/lars.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"

using namespace hitch_test;
namespace optim = hitch::optim;

namespace {

/// N steps, save, load into a fresh optimizer (fresh model copy), N more steps == 2N steps straight, bitwise.
template <class O>
void resume_is_exact(const typename O::options_type& options) {
    const int n = 12;
    const std::vector<std::size_t> sizes = {0, 1, 300, 9000};
    const std::vector<hitch::layer_flags> flags = {{}, hitch::layer_flags::bias_or_norm(), {}, {}};
    auto lr = [](int t) { return 0.01f / (1.0f + static_cast<float>(t)); };

    float_model straight(sizes, 71, flags);
    optim::model_optimizer<O> a(options, straight.layers);
    for (int t = 0; t < 2 * n; ++t) {
        straight.fill_gradients(3, static_cast<std::uint64_t>(t));
        a.step(lr(t));
    }

    float_model first(sizes, 71, flags);
    std::stringstream saved;
    {
        optim::model_optimizer<O> b(options, first.layers);
        for (int t = 0; t < n; ++t) {
            first.fill_gradients(3, static_cast<std::uint64_t>(t));
            b.step(lr(t));
        }
        b.save(saved);
    }
    float_model resumed(sizes, 0, flags);
    resumed.params = first.params;  // the parameters travel in the model checkpoint, not in the optimizer state
    for (std::size_t k = 0; k < sizes.size(); ++k) resumed.layers[k].params = hitch::view(resumed.params[k]);
    optim::model_optimizer<O> c(options, resumed.layers);
    c.load(saved);
    CHECK(c.state(2).steps == static_cast<std::uint64_t>(n));
    for (int t = n; t < 2 * n; ++t) {
        resumed.fill_gradients(3, static_cast<std::uint64_t>(t));
        c.step(lr(t));
    }
    INFO(O::name);
    CHECK(bitwise_equal(all_params(straight), all_params(resumed)));
}

}  // namespace

TEST_CASE("save, load into a fresh optimizer and resume equals an uninterrupted run, bitwise", "[optim][state]") {
    resume_is_exact<optim::sgd>({.weight_decay = 1e-3f});
    resume_is_exact<optim::momentum>({.momentum = 0.9f, .nesterov = true, .weight_decay = 1e-4f});
    resume_is_exact<optim::adam>({.weight_decay = 1e-4f, .amsgrad = true});
    resume_is_exact<optim::adamw>({});
    resume_is_exact<optim::lars_sgd>({.weight_decay = 5e-4f});
    resume_is_exact<optim::lars_adam>({});
    resume_is_exact<optim::lamb>({.weight_decay = 0.01f});
}

TEST_CASE("loading a corrupt or truncated state throws corrupt_message_error and changes nothing", "[optim][state]") {
    const std::string good = saved_state<optim::adam>({}, {10, 20});
    float_model m({10, 20}, 5);
    optim::model_optimizer<optim::adam> opt({}, m.layers);
    m.fill_gradients(9, 9);
    opt.step(0.5f);
    const float m0 = opt.state(1).m.data()[3];
    const auto steps0 = opt.state(1).steps;

    auto load = [&](const std::string& bytes) {
        std::stringstream s(bytes);
        opt.load(s);
    };
    std::string bad = good;
    bad[0] = 'X';
    CHECK_THROWS_WITH(load(bad), Catch::Contains("not a hitch optimizer state (magic \"XITCHOPT\""));
    bad = good;
    bad[8] = 7;  // version
    CHECK_THROWS_WITH(load(bad), Catch::Contains("written by a newer hitch (format 7, this build reads 1-2)"));
    bad = good;
    bad[bad.size() - 20] ^= 0x10;  // a payload byte
    CHECK_THROWS_WITH(load(bad), Catch::Contains("corrupt (checksum)"));
    CHECK_THROWS_AS(load(bad), hitch::corrupt_message_error);
    {  // with the exact figures: the checksum stored, the bytes read and the checksum they give
        const auto* p = reinterpret_cast<const std::byte*>(bad.data());
        std::ostringstream want;
        want << "hitch::optim::load_state: corrupt (checksum): the header says 0x" << std::hex
             << hitch::load_le<std::uint32_t>(p + hitch::frame_checksum_offset) << ", the " << std::dec << bad.size()
             << " bytes give 0x" << std::hex << hitch::detail::frame_checksum({p, bad.size()});
        CHECK_THROWS_WITH(load(bad), Catch::Contains(want.str()));
    }
    const std::string size = std::to_string(good.size());
    CHECK_THROWS_WITH(load(good.substr(0, good.size() - 9)),
                      Catch::Contains("truncated: " + std::to_string(good.size() - 9) + " of " + size + " bytes"));
    CHECK_THROWS_WITH(load(good.substr(0, 30)), Catch::Contains("truncated: 30 of " + size + " bytes"));
    CHECK_THROWS_WITH(load(good.substr(0, 10)),
                      Catch::Contains("truncated: 10 bytes, shorter than the 24-byte header"));
    CHECK_THROWS_AS(load(""), hitch::corrupt_message_error);
    CHECK(opt.state(1).m.data()[3] == m0);
    CHECK(opt.state(1).steps == steps0);
    CHECK_NOTHROW(load(good));
    CHECK(opt.state(1).steps == 1);
}

TEST_CASE("loading another optimizer's or another model's state throws mismatch_error naming both", "[optim][state]") {
    float_model m({10, 20}, 5);
    optim::model_optimizer<optim::adam> opt({}, m.layers);
    auto load = [&](const std::string& bytes) {
        std::stringstream s(bytes);
        opt.load(s);
    };
    CHECK_THROWS_WITH(load(saved_state<optim::momentum>({}, {10, 20})),
                      Catch::Contains("saved by optimizer 'momentum' but is being loaded into 'adam'"));
    CHECK_THROWS_WITH(load(saved_state<optim::adam>({}, {10})), Catch::Contains("1 layers but the model has 2"));
    CHECK_THROWS_WITH(load(saved_state<optim::adam>({}, {10, 21})),
                      Catch::Contains("layer 1 ('layer1') has 20 parameters but the saved layer 1 ('layer1') has 21"));
    CHECK_THROWS_WITH(load(saved_state<optim::adam>({.amsgrad = true}, {10, 20})), Catch::Contains("amsgrad"));
    CHECK_THROWS_AS(load(saved_state<optim::adam>({.amsgrad = true}, {10, 20})), hitch::mismatch_error);
    CHECK(opt.state(0).steps == 0);
}

TEST_CASE("a state of format version 1, written by the first release, still loads", "[optim][state]") {
    // Momentum 0.9, two steps of lr 0.1 over layers "w" (3) and "b" (2) with constant gradients.
    std::vector<float> w = {1.0f, -2.0f, 0.5f}, gw = {0.25f, 0.5f, -1.0f}, b = {3.0f, 4.0f}, gb = {-0.5f, 2.0f};
    std::vector<hitch::layer> layers;
    layers.push_back({"w", hitch::view(w), hitch::view(gw), {}});
    layers.push_back({"b", hitch::view(b), hitch::view(gb), {}});
    optim::model_optimizer<optim::momentum> straight({.momentum = 0.9f}, layers);
    straight.step(0.1f);
    straight.step(0.1f);

    optim::model_optimizer<optim::momentum> loaded({.momentum = 0.9f}, layers);
    std::stringstream old(std::string(reinterpret_cast<const char*>(hitch_test::legacy::hitchopt_v1),
                                      sizeof hitch_test::legacy::hitchopt_v1));
    loaded.load(old);
    for (std::size_t k = 0; k < 2; ++k) {
        CHECK(loaded.state(k).steps == 2);
        const auto want = straight.state(k).buffers();
        const auto got = loaded.state(k).buffers();
        REQUIRE(std::ranges::size(got) == std::ranges::size(want));
        for (std::size_t i = 0; i < std::ranges::size(got); ++i) {
            const auto x = std::ranges::begin(want)[static_cast<std::ptrdiff_t>(i)];
            const auto y = std::ranges::begin(got)[static_cast<std::ptrdiff_t>(i)];
            CHECK(std::equal(x.data(), x.data() + x.size(), y.data(), y.data() + y.size()));
        }
    }
    // Cut short or damaged, version 1 is refused as before.
    const std::string bytes(reinterpret_cast<const char*>(hitch_test::legacy::hitchopt_v1),
                            sizeof hitch_test::legacy::hitchopt_v1);
    std::stringstream cut(bytes.substr(0, bytes.size() - 3));
    CHECK_THROWS_WITH(loaded.load(cut), Catch::Contains("truncated"));
    std::string flipped = bytes;
    flipped[40] ^= 1;
    std::stringstream damaged(flipped);
    CHECK_THROWS_AS(loaded.load(damaged), hitch::corrupt_message_error);
}

TEST_CASE("the state is followed by other bytes in a stream and reads only its own", "[optim][state]") {
    const std::string one = saved_state<optim::adam>({}, {10, 20});
    std::stringstream s(one + one);
    float_model m({10, 20}, 5);
    optim::model_optimizer<optim::adam> opt({}, m.layers);
    opt.load(s);
    opt.load(s);
    CHECK(s.peek() == std::char_traits<char>::eof());
}
