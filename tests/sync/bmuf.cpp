// Block momentum (BMUF) for local SGD over comm::local: against the serial formula (2 and 3 ranks), plain averaging
// unchanged, option checks, and the saved state (exact resume, the older counters-only format).
#include <catch2/catch.hpp>

#include <unistd.h>
#include <array>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "bmuf_reference.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/sync/detail/state.hpp"

using hitch::comm::local;
using hitch::comm::run_local;
using hitch::sync::local_sgd;
namespace bmuf = hitch_test::bmuf;

TEST_CASE("BMUF equals the serial formula over several periods; block_momentum 0 is plain averaging", "[sync][bmuf]") {
    for (int p : {2, 3}) {
        for (const local_sgd::options_type& o : bmuf::sweep(3)) {
            CAPTURE(p, o.block_momentum, o.block_learning_rate, o.nesterov);
            bmuf::setup c;
            c.ranks = p;
            c.sync = o;
            REQUIRE_NOTHROW(run_local(p, [&](local& comm) { bmuf::check_against_reference(comm, c); }));
        }
    }
}

TEST_CASE("BMUF moves the parameters away from the plain average", "[sync][bmuf]") {
    // Guards the test above against a filter that does nothing: the two references must differ.
    bmuf::setup plain, filtered;
    filtered.sync.period = plain.sync.period = 3;
    filtered.sync.block_momentum = 0.5;
    CHECK(bmuf::reference(plain)[0] != bmuf::reference(filtered)[0]);
}

TEST_CASE("local_sgd's block-momentum options are checked", "[sync][bmuf]") {
    using Catch::Contains;
    const auto with = [](double eta, double zeta) {
        local_sgd::options_type o;
        o.block_momentum = eta;
        o.block_learning_rate = zeta;
        return local_sgd(o);
    };
    CHECK_NOTHROW(with(0.0, 1.0));
    CHECK_NOTHROW(with(0.999, 0.1));
    CHECK_THROWS_AS(with(1.0, 1.0), hitch::config_error);
    CHECK_THROWS_WITH(with(1.0, 1.0),
                      Contains("hitch::sync::local_sgd: option block_momentum = 1") && Contains("[0, 1)"));
    CHECK_THROWS_WITH(with(-0.25, 1.0), Contains("option block_momentum = -0.25"));
    CHECK_THROWS_WITH(with(std::numeric_limits<double>::quiet_NaN(), 1.0), Contains("option block_momentum"));
    CHECK_THROWS_AS(with(0.5, 0.0), hitch::config_error);
    CHECK_THROWS_WITH(with(0.5, 0.0), Contains("option block_learning_rate = 0") && Contains("(0, inf)"));
    CHECK_THROWS_WITH(with(0.5, -1.0), Contains("option block_learning_rate = -1"));
}

TEST_CASE("block momentum needs a context with parameters; plain averaging does not", "[sync][bmuf]") {
    hitch::step_context_archetype ctx;
    local_sgd plain;
    CHECK(plain.step(ctx).applied);
    local_sgd::options_type o;
    o.block_momentum = 0.5;
    local_sgd filtered(o);
    CHECK_THROWS_WITH(filtered.step(ctx), Catch::Contains("block_momentum = 0.5 needs a step context"));
}

TEST_CASE("BMUF resumes exactly: 2N steps equal N steps, save, load into a new object, N steps",
          "[sync][bmuf][checkpoint]") {
    const auto dir = std::filesystem::temp_directory_path() / ("hitch-test-bmuf-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    for (int n : {4, 6}) {  // mid-period (one step into it) and at a period's end
        CAPTURE(n);
        bmuf::setup c;
        c.steps = 2 * n;
        c.sync.period = 3;
        c.sync.block_momentum = 0.75;
        c.sync.block_learning_rate = 0.5;
        const auto prefix = dir / ("ck" + std::to_string(n));
        REQUIRE_NOTHROW(run_local(c.ranks, [&](local& comm) {
            const bmuf::params straight = bmuf::run(comm, c);
            hitch::cpu dev;
            {
                bmuf::model m(c.sizes);
                bmuf::dp_t dp(comm, dev, m.layers(), bmuf::options(c));
                bmuf::run_steps(dp, m, c, 0, n);
                dp.save(prefix);
            }
            bmuf::model m(c.sizes);
            for (auto& layer : m.w) std::fill(layer.begin(), layer.end(), 7.0f);  // load must restore them
            bmuf::dp_t dp(comm, dev, m.layers(), bmuf::options(c));
            dp.load(prefix);
            bmuf::run_steps(dp, m, c, n, 2 * n);
            hitch_test::expect(m.w == straight, "the resumed run equals the straight one");
            const bmuf::params want = bmuf::reference(c)[static_cast<std::size_t>(comm.rank())];
            hitch_test::expect(m.w == want, "the resumed run equals the reference");
        }));
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("local_sgd's saved state: plain averaging keeps format 2, block momentum adds its buffers",
          "[sync][bmuf][checkpoint]") {
    using Catch::Contains;
    namespace sd = hitch::sync::detail;
    local_sgd::options_type plain_options;
    plain_options.period = 4;
    local_sgd::options_type bmuf_options = plain_options;
    bmuf_options.block_momentum = 0.5;

    // An older hitch wrote the counter alone: it still loads into plain averaging, and not into block momentum.
    std::vector<std::byte> old;
    const std::array<std::uint64_t, 1> two{2};
    sd::save_counters(old, "local_sgd", two);
    local_sgd plain(plain_options);
    plain.load_state(old);
    CHECK(plain.staleness() == 2);
    std::vector<std::byte> again;
    plain.save_state(again);
    CHECK(again == old);  // plain averaging writes what it always wrote
    local_sgd filtered(bmuf_options);
    CHECK_THROWS_AS(filtered.load_state(old), hitch::mismatch_error);
    CHECK_THROWS_WITH(filtered.load_state(old), Contains("no block-momentum buffers"));

    // Block momentum writes format 3 with the global model and D; plain averaging refuses it.
    std::vector<std::byte> with_buffers;
    const std::array<float, 3> global{1.5f, -2.0f, 0.25f}, delta{0.125f, 0.0f, -3.0f};
    const std::array<std::span<const float>, 2> buffers{std::span<const float>(global), std::span<const float>(delta)};
    sd::save_counters_and_buffers(with_buffers, "local_sgd", two, buffers);
    CHECK(hitch::load_le<std::uint32_t>(with_buffers.data() + 8) == 3);
    filtered.load_state(with_buffers);
    CHECK(filtered.staleness() == 2);
    std::vector<std::byte> saved;
    filtered.save_state(saved);
    CHECK(saved == with_buffers);
    CHECK_THROWS_WITH(plain.load_state(with_buffers), Contains("has block-momentum buffers"));

    // Damage is reported, and a counter past the period is refused.
    auto cut = with_buffers;
    cut.resize(cut.size() - 4);
    CHECK_THROWS_AS(filtered.load_state(cut), hitch::corrupt_message_error);
    std::vector<std::byte> late;
    const std::array<std::uint64_t, 1> four{4};
    sd::save_counters_and_buffers(late, "local_sgd", four, buffers);
    CHECK_THROWS_WITH(filtered.load_state(late), Contains("4 steps into a period of 4"));
    // A policy that keeps no buffers refuses a state that has some.
    std::array<std::uint64_t, 1> counter{};
    CHECK_THROWS_WITH(sd::load_counters(with_buffers, "local_sgd", counter),
                      Contains("has 2 buffers; this policy keeps none"));
}
