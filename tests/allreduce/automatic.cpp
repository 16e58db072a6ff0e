// allreduce::automatic as a module: calibration apart from the caller's deadline and within its budget, agreement
// of every rank on measurements and choices, and its decisions saved and restored (allreduce/automatic/).
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "charged.hpp"
#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/agree.hpp"
#include "hitch/comm/local.hpp"
#include "reference.hpp"
#include "watched_automatic.hpp"

using namespace hitch::allreduce;
using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;

namespace {

bool all_equal(const std::vector<float>& v, float x) {
    for (float y : v)
        if (y != x) return false;
    return true;
}

std::vector<std::byte> saved(const automatic& a) {
    std::vector<std::byte> blob;
    a.save_state(blob);
    return blob;
}

std::string load_error(automatic& a, const std::vector<std::byte>& blob) {
    try {
        a.load_state(blob);
    } catch (const hitch::corrupt_message_error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("automatic calibrates outside the caller's deadline: 5 ranks, a 1 s deadline, every probe measured",
          "[allreduce][automatic]") {
    // Measuring every probe takes 2.8 s at 5 ranks over comm::local on a 2-core host (6.1 s over comm::mpi):
    // inside the caller's deadline the first call failed with a timeout_error. The budget here is large enough
    // for every probe, the deadline far shorter than they take.
    automatic::options_type o;
    o.calibration_budget_s = 600;
    const automatic a(o);
    const auto measured = run_local(5, [&](local& c) {
        group g(c);
        g.set_timeout(hitch::seconds_f(1));
        std::vector<float> v(1000, 1.0f);
        allreduce(g, hitch::view(v), reduce_op::sum, a);
        expect(all_equal(v, 5.0f), "the calibrating call reduces");
        const auto profile = automatic::measured_profile(g.state());
        expect(profile != nullptr && g.constants().has_value(), "the first call measured");
        allreduce(g, hitch::view(v), reduce_op::sum, a);
        expect(all_equal(v, 25.0f), "later calls reduce");
        return *profile;
    });
    for (const auto& p : measured) {
        CHECK(p.measured == automatic_profile::first_probes);
        CHECK(p.stopped_by_budget == 0);
        CHECK(std::memcmp(&p, &measured[0], sizeof(p)) == 0);
    }
}

TEST_CASE("automatic's default budget keeps the first call inside a 5 s deadline on 5 ranks",
          "[allreduce][automatic]") {
    const auto seconds = run_local(5, [](local& c) {
        group g(c);
        g.set_timeout(hitch::seconds_f(5));
        std::vector<float> v(1000, 1.0f);
        const auto start = std::chrono::steady_clock::now();
        allreduce(g, hitch::view(v));
        expect(all_equal(v, 5.0f), "results");
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
    for (double s : seconds) INFO("first call: " << s << " s");
}

TEST_CASE("a calibration budget too small still gives a valid choice, the same on every rank",
          "[allreduce][automatic]") {
    for (const double budget : {0.0, 1e-6}) {
        automatic::options_type o;
        o.calibration_budget_s = budget;
        const automatic a(o);
        struct outcome {
            automatic_profile profile;
            hitch::allreduce::cost_constants k;
        };
        const auto all = run_local(3, [&](local& c) {
            group g(c);
            std::vector<float> v(5000, 1.0f);
            allreduce(g, hitch::view(v), reduce_op::sum, a);
            expect(all_equal(v, 3.0f), "the call reduces");
            const auto first = automatic::measured_profile(g.state());
            expect(first != nullptr, "a profile is kept, even an empty one");
            std::vector<float> big((std::size_t{17} << 20) / sizeof(float), 1.0f);
            allreduce(g, hitch::view(big), reduce_op::sum, a);
            expect(all_equal(big, 3.0f), "a call larger than every probe reduces");
            expect(automatic::measured_profile(g.state()) == first,
                   "a budget that stopped the probes stops later ones");
            return outcome{*first, *g.constants()};
        });
        for (const auto& r : all) {
            CHECK(r.profile.stopped_by_budget == 1);
            CHECK(r.profile.measured < automatic_profile::first_probes);
            CHECK(std::memcmp(&r.profile, &all[0].profile, sizeof(automatic_profile)) == 0);
            CHECK(r.k == all[0].k);
        }
        // With nothing measured the choice is the cost model's with the measured constants.
        if (all[0].profile.measured == 0)
            for (std::size_t n : {std::size_t{256}, std::size_t{1} << 20, std::size_t{64} << 20})
                CHECK(a.choose(3, n, all[0].k, &all[0].profile) == a.choose(3, n, all[0].k));
    }
}

TEST_CASE("automatic's calibration options are validated", "[allreduce][automatic]") {
    automatic::options_type o;
    o.calibration_budget_s = -1;
    CHECK_THROWS_AS(automatic(o), hitch::config_error);
    o = {};
    o.calibration_timeout_s = 0;
    CHECK_THROWS_AS(automatic(o), hitch::config_error);
    o.calibration_timeout_s = std::numeric_limits<double>::infinity();
    CHECK_THROWS_AS(automatic(o), hitch::config_error);
    CHECK(automatic().options().calibration_budget_s == tuning::calibration_budget_s);
    CHECK(automatic().options().calibration_timeout_s == tuning::calibration_timeout_s);
}

TEST_CASE("ranks agree on measurements and choices even when each measured differently", "[allreduce][automatic]") {
    const int p = 4;
    const auto agreed = run_local(p, [&](local& c) {
        // Each rank's own (and different) measurements, as if its probes had met different load.
        std::mt19937 random(static_cast<unsigned>(17 + c.rank()));
        std::uniform_real_distribution<double> noise(0.5, 2.0);
        automatic_profile mine;
        mine.measured = automatic_profile::first_probes;
        for (int i = 0; i < mine.measured; ++i) {
            mine.bytes[static_cast<std::size_t>(i)] = static_cast<double>(automatic_profile::probe_bytes(i));
            for (int k = 0; k < 6; ++k)
                mine.seconds[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)] =
                    1e-6 * noise(random) * static_cast<double>(automatic_profile::probe_bytes(i)) / 4096.0;
        }
        cost_constants k;
        k.alpha_s = 1e-6 * noise(random);
        k.beta_s_per_byte = 1e-10 * noise(random);
        k.gamma_s_per_byte = 1e-10 * noise(random);
        const automatic_profile profile = detail::agree_profile(c, mine);
        const cost_constants constants = detail::agree_constants(c, k);
        const bool all_go = detail::agree_all(c, true);
        const bool one_stops = detail::agree_all(c, c.rank() != 2);
        expect(all_go && !one_stops, "a stop by one rank stops every rank");
        for (std::size_t i = 0; i < 6; ++i)
            for (std::size_t j = 0; j < automatic_profile::probes; ++j)
                expect(profile.seconds[i][j] >= mine.seconds[i][j], "the agreed time is the slowest rank's");
        std::string choices;
        for (std::size_t n = 1; n <= (std::size_t{64} << 20); n *= 3)
            choices += std::string(automatic{}.choose(p, n, constants, &profile)) + ' ';
        return std::make_tuple(profile, constants, choices);
    });
    for (const auto& [profile, constants, choices] : agreed) {
        CHECK(std::memcmp(&profile, &std::get<0>(agreed[0]), sizeof(profile)) == 0);
        CHECK(constants == std::get<1>(agreed[0]));
        CHECK(choices == std::get<2>(agreed[0]));
    }
}

TEST_CASE("automatic's decisions survive save_state and load_state: the same choices without measuring",
          "[allreduce][automatic]") {
    const int p = 3;
    struct seen {
        std::vector<std::byte> blob;
        automatic_profile before;
        automatic_profile after;
        cost_constants k_before;
        cost_constants k_after;
        std::vector<std::byte> blob_after;
    };
    const auto results = run_local(p, [&](local& c) {
        seen s;
        {
            const automatic a;
            group g(c);
            std::vector<float> v(1000, 1.0f);
            allreduce(g, hitch::view(v), reduce_op::sum, a);  // collectives copy `a`: the copy's decisions count
            s.blob = saved(a);
            s.before = *automatic::measured_profile(g.state());
            s.k_before = *g.constants();
        }
        automatic b;
        b.load_state(s.blob);
        expect(saved(b) == s.blob, "a loaded state is saved unchanged");
        group g(c);
        std::vector<float> v(1000, 1.0f);
        allreduce(g, hitch::view(v), reduce_op::sum, b);
        expect(all_equal(v, static_cast<float>(p)), "results after load");
        s.after = *automatic::measured_profile(g.state());
        s.k_after = *g.constants();
        s.blob_after = saved(b);
        return s;
    });
    for (const auto& s : results) {
        // Timings never repeat to the bit: equal profiles and constants mean nothing was measured again.
        CHECK(std::memcmp(&s.after, &s.before, sizeof(automatic_profile)) == 0);
        CHECK(s.k_after == s.k_before);
        CHECK(s.blob_after == s.blob);
        CHECK(s.blob == results[0].blob);
        const automatic a;
        for (std::size_t n = 1; n <= (std::size_t{64} << 20); n *= 5)
            CHECK(a.choose(p, n, s.k_after, &s.after) == a.choose(p, n, s.k_before, &s.before));
    }
    // An automatic that never ran saves an empty state; loading it measures as usual.
    automatic empty;
    automatic fresh;
    fresh.load_state(saved(empty));
    const auto measured = run_local(2, [&](local& c) {
        group g(c);
        std::vector<float> v(10, 1.0f);
        allreduce(g, hitch::view(v), reduce_op::sum, fresh);
        return g.constants().has_value() && automatic::measured_profile(g.state()) != nullptr;
    });
    CHECK(measured[0]);
    CHECK(measured[1]);
}

TEST_CASE("a damaged automatic state is refused with corrupt_message_error and changes nothing",
          "[allreduce][automatic]") {
    automatic::options_type o;
    o.constants = cost_constants{2e-6, 3e-10, 4e-10, -1, -1};
    automatic source(o);
    // A state with constants and a profile, made without a group: load, then save, a hand-built one.
    std::vector<std::byte> blob;
    {
        detail::automatic_state s;
        s.constants = *o.constants;
        automatic_profile prof;
        prof.measured = 2;
        prof.bytes[0] = 4096;
        prof.bytes[1] = 16384;
        prof.seconds[1][0] = 1e-5;
        s.profile = prof;
        detail::encode_automatic_state(s, blob);
    }
    automatic a;
    a.load_state(blob);
    REQUIRE(saved(a) == blob);

    std::vector<std::byte> cut(blob.begin(), blob.begin() + static_cast<std::ptrdiff_t>(blob.size() / 2));
    CHECK(load_error(a, cut) == "hitch::allreduce::automatic::load_state: truncated: " + std::to_string(cut.size()) +
                                    " of " + std::to_string(blob.size()) + " bytes");
    CHECK(load_error(a, std::vector<std::byte>(blob.begin(), blob.begin() + 10)) ==
          "hitch::allreduce::automatic::load_state: truncated: 10 bytes, shorter than the 24-byte header");
    std::vector<std::byte> flipped = blob;
    flipped[blob.size() - 3] ^= std::byte{0x40};
    CHECK(load_error(a, flipped).find("hitch::allreduce::automatic::load_state: corrupt (checksum)") == 0);
    std::vector<std::byte> foreign = blob;
    foreign[0] = std::byte{'X'};
    CHECK(load_error(a, foreign).find("not a hitch automatic state (magic \"XAUT\"") != std::string::npos);
    std::vector<std::byte> newer = blob;
    newer[8] = std::byte{9};
    CHECK(load_error(a, newer) ==
          "hitch::allreduce::automatic::load_state: written by a newer hitch (format 9, this build reads 1-2)");
    std::vector<std::byte> longer = blob;
    longer.push_back(std::byte{0});
    CHECK(!load_error(a, longer).empty());
    CHECK(saved(a) == blob);  // every refusal left the loaded state as it was
}

TEST_CASE("an automatic state whose profile the ranking cannot use is refused, well-formed or not",
          "[allreduce][automatic]") {
    // Checksummed and well-formed, but the probe sizes and times are not ones a run measures: the ranking would
    // convert a size beyond size_t to bytes (undefined) or interpolate between sizes that do not rise.
    const auto blob_with = [](auto&& damage) {
        detail::automatic_state s;
        automatic_profile prof;
        prof.measured = 3;
        prof.bytes = {4096, 16384, 65536};
        prof.seconds[0] = {1e-5, 2e-5, 4e-5};
        damage(prof);
        s.profile = prof;
        std::vector<std::byte> blob;
        detail::encode_automatic_state(s, blob);
        return blob;
    };
    automatic a;
    CHECK(load_error(a, blob_with([](automatic_profile&) {})).empty());
    const std::string who = "hitch::allreduce::automatic::load_state: corrupt: ";
    CHECK(load_error(a, blob_with([](automatic_profile& p) { p.bytes[2] = 3.2e197; })) ==
          who + "probe 2 has size 3.2e+197 bytes");
    CHECK(load_error(a, blob_with([](automatic_profile& p) { p.bytes[1] = -1; })) == who + "probe 1 has size -1 bytes");
    CHECK(load_error(a, blob_with([](automatic_profile& p) { p.bytes[2] = 16384; })) ==
          who + "probe 2 has size 16384 bytes");
    CHECK(load_error(a, blob_with([](automatic_profile& p) { p.bytes[0] = 0.5; })) ==
          who + "probe 0 has size 0.5 bytes");
    CHECK(load_error(a, blob_with([](automatic_profile& p) { p.bytes[3] = std::nan(""); })) ==
          who + "probe 3 has size nan bytes");
    CHECK(load_error(a, blob_with([](automatic_profile& p) { p.seconds[4][1] = -2e-5; })) ==
          who + "a probe time is -2e-05 seconds");
    CHECK(load_error(a, blob_with([](automatic_profile& p) { p.seconds[0][0] = HUGE_VAL; })) ==
          who + "a probe time is inf seconds");
}

// ---- online re-ranking -----------------------------------------------------------------------------------------

namespace {

int candidate_index(std::string_view name) {
    for (std::size_t i = 0; i < automatic::candidate_names.size(); ++i)
        if (automatic::candidate_names[i] == name) return static_cast<int>(i);
    return -1;
}

/// Phases of the re-ranking scenario: the marked schedule costs fast_s, then slow_s, then fast_s again, every
/// other schedule costs other_s throughout (charged time, far above a loaded host's noise).
struct scenario {
    automatic::options_type options;
    int calls_before = 500;  // marked fast
    int calls_slow = 300;    // marked slow
    int calls_after = 800;   // marked fast again (it came back after ~330 on dev-2c)
    double fast_s = 0.2;
    double other_s = 0.4;
    double slow_s = 4.0;
};

struct scenario_result {
    int marked = -1;          // the model's pick, made slow
    std::vector<bool> alike;  // per candidate: starts as the marked one does (charged alike)
    std::vector<hitch_test::watched_automatic::call> calls;  // this rank's record of every automatic call
    bool exact = true;                                       // every call equalled the serial sum
};

constexpr std::size_t scenario_count = 10000;  // 40000 bytes: one message per step, no probe size

/// Runs the scenario on 2 comm::local ranks behind charged<local>; the marked schedule is the model's first pick
/// (so automatic starts on it and must find that it is fastest, then that it is not, then that it is again).
std::vector<scenario_result> run_scenario(const scenario& sc) {
    constexpr int p = 2;
    return run_local(p, [&](local& c) {
        scenario_result out;
        auto meter = std::make_shared<hitch_test::rank_meter>();
        hitch_test::charged<local> cc(c.split(0, c.rank()), meter);
        group g(cc);
        g.set_timeout(hitch::seconds_f(600));  // charged time counts toward deadlines too
        std::vector<float> v(scenario_count);

        // Each candidate once, directly: the first message it sends on this rank, then every rank's.
        std::array<hitch_test::first_send, 6> mine{};
        std::size_t i = 0;
        const auto learn = [&](const auto& schedule) {
            std::fill(v.begin(), v.end(), 1.0f);
            allreduce(g, hitch::view(v), reduce_op::sum, schedule);
            mine[i++] = meter->last;
        };
        learn(recursive_doubling{});
        learn(ring{});
        learn(rabenseifner{});
        learn(binary_tree{});
        learn(double_binary_tree{});
        learn(parameter_server(sc.options.parameter_server));
        const auto all = hitch::comm::allgather_value(c, mine);

        const automatic model(sc.options);
        out.marked = candidate_index(model.choose(p, v.size() * sizeof(float), *sc.options.constants));
        const auto m = static_cast<std::size_t>(out.marked);
        // Candidates that start as the marked one does on every rank are charged as it is.
        bool elsewhere = false;
        for (std::size_t k = 0; k < mine.size(); ++k) {
            bool same = true;
            for (const auto& r : all) same = same && r[k] == r[m];
            out.alike.push_back(same);
            elsewhere = elsewhere || !same;
        }
        out.alike.push_back(false);  // native: comm::local has none
        expect(elsewhere, "some candidate's first message tells it apart from the marked schedule's");
        meter->marked = mine[m];
        meter->marked_s = sc.fast_s;
        meter->other_s = sc.other_s;
        meter->charging = true;

        const hitch_test::watched_automatic a(sc.options);
        const int total = sc.calls_before + sc.calls_slow + sc.calls_after;
        for (int call = 0; call < total; ++call) {
            if (call == sc.calls_before) meter->marked_s = sc.slow_s;
            if (call == sc.calls_before + sc.calls_slow) meter->marked_s = sc.fast_s;
            const auto salt = static_cast<std::uint32_t>(call);
            for (std::size_t j = 0; j < v.size(); ++j) v[j] = hitch_test::exact_value<float>(c.rank(), j, salt);
            allreduce(g, hitch::view(v), reduce_op::sum, a);
            const auto want = hitch_test::reference<float>(p, v.size(), reduce_op::sum, [&](int r, std::size_t j) {
                return hitch_test::exact_value<float>(r, j, salt);
            });
            out.exact = out.exact && hitch_test::same_bytes<float>(v, want);
        }
        out.calls = *a.calls;
        return out;
    });
}

automatic::options_type scenario_options() {
    automatic::options_type o;
    // The pure model with fixed constants: nothing is calibrated, so only the charged calls are timed.
    o.constants = cost_constants{2e-6, 3e-10, 4e-10, -1, -1};
    o.explore_fraction = 0.1;
    o.max_review_calls = 4;
    return o;
}

/// Calls in [from, to) that ran a schedule charged as the marked one.
int count_marked(const scenario_result& r, int from, int to) {
    int n = 0;
    for (int i = from; i < to; ++i)
        n += r.alike[static_cast<std::size_t>(candidate_index(r.calls[static_cast<std::size_t>(i)].ran))] ? 1 : 0;
    return n;
}

}  // namespace

TEST_CASE("automatic re-ranks online: it leaves a schedule that turns slow within a window, and comes back",
          "[allreduce][automatic][rerank]") {
    scenario sc;
    sc.options = scenario_options();
    const auto results = run_scenario(sc);
    const auto& r0 = results[0];
    REQUIRE(r0.marked >= 0);
    INFO("marked schedule: " << automatic::candidate_names[static_cast<std::size_t>(r0.marked)]);
    for (const auto& r : results) {
        CHECK(r.exact);              // every call equalled the serial sum
        CHECK(r.calls == r0.calls);  // every rank ran the same schedule in every call
    }
    const auto& calls = r0.calls;
    REQUIRE(calls.size() == static_cast<std::size_t>(sc.calls_before + sc.calls_slow + sc.calls_after));
    // Whether call i's current pick is charged as the marked schedule.
    const auto marked = [&](int i) {
        const int c = calls[static_cast<std::size_t>(i)].current;
        return c >= 0 && r0.alike[static_cast<std::size_t>(c)];
    };

    // Before: the marked schedule is the fastest and stays the pick; runners-up take a bounded share of the calls
    // (each costs 0.2 s more, the credit earns 0.1 x 0.2 s per call: one in ten).
    const int b = sc.calls_before;
    CHECK(marked(b - 1));
    const int before_tail = 200;
    CHECK(count_marked(r0, b - before_tail, b) >= before_tail * 85 / 100);

    // Slow: each window of at most max_review_calls calls raises the estimate 1.5x at most (a window counts as at
    // most twice the estimate: preemption only adds time), so 0.2 s passes the others' 0.4 s at the second review.
    int left = -1;
    for (int i = b; i < b + sc.calls_slow && left < 0; ++i)
        if (!marked(i)) left = i - b;
    INFO("left the slow schedule after " << left << " calls");
    CHECK(left >= 0);
    CHECK(left <= 2 * sc.options.max_review_calls);
    // While slow, it runs only as an exploration paid from the budget: 300 calls earn 0.1 x 0.4 s each, 12 s, and
    // each run costs its estimate's excess over the pick's (at least half a call), which grows 1.5x per run: at
    // most 15 runs (9 on dev-2c).
    const int s = b + sc.calls_slow;
    const int settled = b + 2 * sc.options.max_review_calls + 1;
    CHECK(count_marked(r0, settled, s) <= 15);
    for (int i = settled; i < s; ++i) CHECK(!marked(i));

    // After: explorations find it fast again and it becomes the pick once more.
    int back = -1;
    for (int i = s; i < static_cast<int>(calls.size()) && back < 0; ++i)
        if (marked(i)) back = i - s;
    INFO("came back after " << back << " calls");
    CHECK(back >= 0);
    CHECK(marked(static_cast<int>(calls.size()) - 1));
}

TEST_CASE("automatic with rerank off keeps the model's pick however slow it turns", "[allreduce][automatic][rerank]") {
    scenario sc;
    sc.options = scenario_options();
    sc.options.rerank = false;
    sc.calls_before = 20;
    sc.calls_slow = 20;
    sc.calls_after = 0;
    const auto results = run_scenario(sc);
    for (const auto& r : results) {
        CHECK(r.exact);
        const std::string_view model = automatic::candidate_names[static_cast<std::size_t>(r.marked)];
        for (const auto& call : r.calls) {
            CHECK(call.ran == model);
            CHECK(call.current == -1);  // no online ranking is kept
        }
    }
}

TEST_CASE("automatic's re-ranking options are validated, naming the field", "[allreduce][automatic][rerank]") {
    const auto error = [](const automatic::options_type& o) -> std::string {
        try {
            automatic a(o);
        } catch (const hitch::config_error& e) {
            return e.what();
        }
        return "";
    };
    automatic::options_type o;
    o.explore_fraction = -0.1;
    CHECK(error(o).find("explore_fraction") != std::string::npos);
    o.explore_fraction = 1.5;
    CHECK(error(o).find("explore_fraction") != std::string::npos);
    o = {};
    o.switch_margin = 1.0;
    CHECK(error(o).find("switch_margin") != std::string::npos);
    o.switch_margin = std::nan("");
    CHECK(error(o).find("switch_margin") != std::string::npos);
    o = {};
    o.max_review_calls = 0;
    CHECK(error(o).find("max_review_calls") != std::string::npos);
    o = {};
    o.explore_fraction = 0;
    o.switch_margin = 0;
    o.max_review_calls = 1;
    CHECK(error(o).empty());
    CHECK(automatic().options().rerank);
    CHECK(automatic().options().explore_fraction == tuning::rerank_explore_fraction);
}

TEST_CASE("automatic's online rankings go with the group's decisions: set_constants and load_state drop them",
          "[allreduce][automatic][rerank]") {
    const auto dropped = run_local(2, [](local& c) {
        group g(c);
        const automatic a;
        std::vector<float> v(5000, 1.0f);
        const std::size_t n = v.size() * sizeof(float);
        for (int call = 0; call < 20; ++call) allreduce(g, hitch::view(v), reduce_op::sum, a);
        expect(all_equal(v, static_cast<float>(1 << 20)), "results");
        expect(a.ranking(g.state(), g.size(), n).has_value(), "a re-ranked size has a ranking");
        const std::vector<std::byte> blob = saved(a);
        g.set_constants(*g.constants());
        const bool after_constants = !a.ranking(g.state(), g.size(), n).has_value();
        allreduce(g, hitch::view(v), reduce_op::sum, a);
        expect(a.ranking(g.state(), g.size(), n).has_value(), "the next call starts a new ranking");
        automatic b;
        b.load_state(blob);
        allreduce(g, hitch::view(v), reduce_op::sum, b);  // installs the loaded decisions: a new ranking
        const auto r = b.ranking(g.state(), g.size(), n);
        return after_constants && r.has_value() && r->current == r->last;  // its first call ran the model's pick
    });
    CHECK(dropped[0]);
    CHECK(dropped[1]);
}

TEST_CASE("one thread calling automatic on many groups in turn gets each group's own choices",
          "[allreduce][automatic]") {
    // Two sets of constants that make the model choose differently: latency-bound (fewest messages) and
    // bandwidth-bound (fewest bytes). Six groups per rank, more than a thread keeps in its quick view, called in
    // turn, so a view mixed up between groups would run (and report) another group's choice.
    cost_constants latency, bandwidth;
    latency.alpha_s = 1e-3;
    latency.beta_s_per_byte = 1e-12;
    latency.gamma_s_per_byte = 1e-13;
    bandwidth.alpha_s = 1e-9;
    bandwidth.beta_s_per_byte = 1e-6;
    bandwidth.gamma_s_per_byte = 1e-7;
    constexpr int p = 4;
    std::vector<float> sizes(5000);
    const std::size_t n = sizes.size() * sizeof(float);
    const automatic model;
    const std::string_view by_latency = model.choose(p, n, latency, nullptr);
    const std::string_view by_bandwidth = model.choose(p, n, bandwidth, nullptr);
    REQUIRE(by_latency != by_bandwidth);
    const auto ok = run_local(p, [&](local& c) {
        std::vector<std::unique_ptr<group<local>>> groups;
        for (int i = 0; i < 6; ++i) {
            groups.push_back(std::make_unique<group<local>>(c));
            groups.back()->set_constants(i % 2 == 0 ? latency : bandwidth);
        }
        // Measured times must not move the pick here: no exploration, and a switch only for a 100x faster one.
        automatic::options_type o;
        o.explore_fraction = 0;
        o.switch_margin = 0.99;
        const automatic a(o);
        bool right = true;
        for (int round = 0; round < 5; ++round)
            for (int i = 0; i < 6; ++i) {
                std::vector<float> v(sizes.size(), static_cast<float>(c.rank() + i));
                allreduce(*groups[static_cast<std::size_t>(i)], hitch::view(v), reduce_op::sum, a);
                right = right && all_equal(v, static_cast<float>(p * i + p * (p - 1) / 2));
                const std::string_view want = i % 2 == 0 ? by_latency : by_bandwidth;
                const auto r = a.ranking(groups[static_cast<std::size_t>(i)]->state(), p, n);
                right =
                    right && r.has_value() && automatic::candidate_names[static_cast<std::size_t>(r->current)] == want;
                // The first call of a size runs the model's pick; later ones may explore.
                if (round == 0)
                    right =
                        right && r.has_value() && automatic::candidate_names[static_cast<std::size_t>(r->last)] == want;
            }
        return right;
    });
    for (bool b : ok) CHECK(b);
}

namespace {

/// Predicted times of candidates 0, 1 and 2; the others are not candidates here.
detail::online_ranking::times three_candidates(double c0, double c1, double c2) {
    detail::online_ranking::times t{};
    t.fill(-1.0);
    t[0] = c0;
    t[1] = c1;
    t[2] = c2;
    return t;
}

/// One call of an online ranking: its step, the time `time_of(candidate)` gives when the step is timed, and the
/// review the step ends with (the summary as this rank has it, a review of 1 us). Returns the candidate it ran.
template <class TimeOf>
int ranking_call(detail::online_ranking& r, const detail::rerank_settings& settings, const TimeOf& time_of) {
    const detail::online_ranking::step step = r.plan(settings);
    if (step.timed) r.note(step.pick, time_of(step.pick));
    if (step.review) {
        detail::review_summary s = r.summary();
        s.agreement_s = 1e-6;
        r.review(s, settings, 1e-6);
    }
    return step.pick;
}

/// Three schedules predicted far apart (no first tries) whose times on a quiet host are `quiet`; the model picks
/// candidate 0.
struct three_schedules {
    std::array<double, 3> quiet;
    detail::online_ranking r{three_candidates(1.0, 5.0, 6.0), 0};
    detail::rerank_settings settings{};

    /// One call on a host `factor` times slower than a quiet one; the candidate it ran.
    int call(double factor) {
        return ranking_call(r, settings, [&](int c) { return factor * quiet[static_cast<std::size_t>(c)]; });
    }
    /// A review of a window that measured these medians (0: the candidate did not run).
    void measured(const std::array<double, 3>& medians) {
        detail::review_summary s{};
        for (std::size_t c = 0; c < medians.size(); ++c) s.median[c] = medians[c];
        s.agreement_s = 1e-6;
        r.review(s, settings, 1e-6);
    }
};

}  // namespace

TEST_CASE("an online ranking weighs its first tries at once: the pick, the tries, the pick timed, a review",
          "[allreduce][automatic][rerank]") {
    using detail::online_ranking;
    online_ranking::times predicted{};
    predicted.fill(-1.0);  // not candidates here
    predicted[0] = 5.0;    // the model's pick
    predicted[2] = 12.0;   // within 4x of it: a first try
    predicted[1] = 8.0;    // the same, tried first (the cheaper)
    predicted[3] = 30.0;   // beyond 4x: never a first try
    online_ranking r(predicted, 0);
    const detail::rerank_settings settings{};
    // A first review that waited long for its ranks makes the next window as long as allowed.
    auto step = r.plan(settings);
    CHECK(step.pick == 0);
    REQUIRE(step.review);
    detail::review_summary first{};
    first.median[0] = 20.0;  // the model is 4x off for its pick
    first.agreement_s = 100.0;
    r.review(first, settings, 100.0);
    CHECK(r.view().review_every == settings.max_review_calls);
    // The tries, cheapest first, each twice in turn, then the pick once more, timed, and the window ends there.
    // Each try counts its faster run (the lower middle of two): 11 for candidate 2, whose second run met a slow
    // moment.
    const double times[2][2] = {{9.0, 11.0}, {9.5, 40.0}};
    for (const auto& round : times) {
        step = r.plan(settings);
        CHECK((step.pick == 1 && step.timed && !step.review));
        r.note(1, round[0]);
        step = r.plan(settings);
        CHECK((step.pick == 2 && step.timed && !step.review));
        r.note(2, round[1]);
    }
    step = r.plan(settings);
    CHECK((step.pick == 0 && step.timed && step.review));
    r.note(0, 20.0);
    const detail::review_summary weighed = r.summary();
    CHECK(weighed.median[1] == 9.0);
    CHECK(weighed.median[2] == 11.0);
    r.review(weighed, settings, 1e-6);
    // Candidate 1 (9) is faster than the pick (estimated 10, then 15 after its second window of 20, each window
    // counted as at most twice the estimate): it becomes the pick, 6 calls after the first.
    CHECK(r.view().current == 1);
}

TEST_CASE("an online ranking tries its runners-up once more a few calls after its first tries",
          "[allreduce][automatic][rerank]") {
    using detail::online_ranking;
    // The model's pick (0), and two runners-up within rerank_first_try_ratio of it: first tries.
    const online_ranking::times predicted = three_candidates(5.0, 6.0, 7.0);
    online_ranking r(predicted, 0);
    detail::rerank_settings settings{};
    settings.explore_fraction = 0;  // only the tries leave the pick
    const auto review = [&] {
        detail::review_summary s = r.summary();
        s.agreement_s = 1e-9;
        r.review(s, settings, 1e-9);
    };
    const auto plan_and_note = [&](double t1) {
        const online_ranking::step step = r.plan(settings);
        if (step.timed) r.note(step.pick, step.pick == 1 ? t1 : predicted[static_cast<std::size_t>(step.pick)]);
        if (step.review) review();
        return step;
    };
    // The pick, then the tries twice each, then the pick: candidate 1's first runs meet fresh memory (3x).
    std::vector<int> ran;
    for (int i = 0; i < 6; ++i) ran.push_back(plan_and_note(18.0).pick);
    CHECK(ran == std::vector<int>{0, 1, 2, 1, 2, 0});
    CHECK(r.view().current == 0);
    // rerank_look_again_calls later, each runner-up runs once more, then the pick, timed, ending the window: this
    // time candidate 1 runs at its own speed (4), is taken in full, and becomes the pick (these windows are one call
    // long: at once, so the pick that ends the round is candidate 1).
    ran.clear();
    for (int i = 0; i < tuning::rerank_look_again_calls + 3; ++i) ran.push_back(plan_and_note(4.0).pick);
    std::vector<int> want(static_cast<std::size_t>(tuning::rerank_look_again_calls) - 1, 0);
    want.insert(want.end(), {1, 2, 1, 1});
    CHECK(ran == want);
    CHECK(r.view().current == 1);
    CHECK(r.view().estimates[1] == Approx(4.0));
    // No third round: with exploration off, the pick runs from now on.
    for (int i = 0; i < 4 * tuning::rerank_look_again_calls; ++i) CHECK(plan_and_note(4.0).pick == 1);
}

TEST_CASE("an online ranking takes a faster window in full and a slower one damped and capped",
          "[allreduce][automatic][rerank]") {
    using detail::online_ranking;
    online_ranking::times predicted{};
    predicted.fill(10.0);
    predicted[0] = 5.0;  // the model's pick
    online_ranking r(predicted, 0);
    const detail::rerank_settings settings{};
    const auto review = [&](int c, double median, double current_median) {
        detail::review_summary s{};
        s.median[static_cast<std::size_t>(c)] = median;
        s.median[0] = current_median;
        s.agreement_s = 1e-6;
        r.review(s, settings, 1e-6);
        return r.view().estimates[static_cast<std::size_t>(c)];
    };
    // Candidate 1's first window met a slow moment: counted as at most twice its estimate (10 -> 20).
    CHECK(review(1, 1000.0, 5.0) == Approx(20.0));
    // A slower window again: half way towards at most twice the estimate (20 -> 30, not 520).
    CHECK(review(1, 1000.0, 5.0) == Approx(30.0));
    // One fast window corrects it at once: 4 is faster than the pick (5), which it replaces (5% margin).
    CHECK(review(1, 4.0, 5.0) == Approx(4.0));
    CHECK(r.view().current == 1);
    // The pick slowing down: one slower window (of one call) waits for the next, which may show a slow moment of
    // the host rather than of the pick ...
    // (candidate 0, a runner-up now, is measured at 6 from here on, so the ranking keeps its pick throughout).
    CHECK(review(1, 8.0, 6.0) == Approx(4.0));
    // ... a second confirms it: damped, by the lesser of the two (4 -> 5, not 6), so the switch is not undone.
    CHECK(review(1, 6.0, 6.0) == Approx(5.0));
    CHECK(r.view().current == 1);
    // The slow spell goes on: each window rises by the lesser of it and the one before (5 -> 5.5).
    CHECK(review(1, 9.0, 6.0) == Approx(5.5));
    // A window no slower ends it: the next slower one waits again.
    CHECK(review(1, 5.5, 6.0) == Approx(5.5));
    CHECK(review(1, 9.0, 6.0) == Approx(5.5));
    CHECK(r.view().current == 1);
}

TEST_CASE("an online ranking explores a runner-up after one slow run as if it had not risen",
          "[allreduce][automatic][rerank]") {
    using detail::online_ranking;
    // The model's pick (0), and two runners-up beyond rerank_first_try_ratio x it: no first tries.
    online_ranking r(three_candidates(1.0, 10.0, 12.0), 0);
    const detail::rerank_settings settings{};
    const auto review = [&](int c, double median) {
        detail::review_summary s{};
        s.median[0] = 1.0;
        if (c >= 0) s.median[static_cast<std::size_t>(c)] = median;
        s.agreement_s = 1e-6;
        r.review(s, settings, 1e-6);
    };
    REQUIRE(r.plan(settings).pick == 0);
    review(-1, 0);
    // Candidate 1's one run met a slow moment: its estimate rises (capped at twice), past candidate 2's, so the
    // ranking would not switch to it on its old time ...
    review(1, 1000.0);
    const auto est = r.view().estimates;
    CHECK(est[1] == Approx(20.0));
    CHECK(est[2] == Approx(12.0));
    // ... but the next exploration, the most promising runner-up's turn, still goes to it (10 against 12).
    int explored = -1;
    for (int call = 0; call < 100000 && explored < 0; ++call) {
        const online_ranking::step step = r.plan(settings);
        if (step.pick != 0) explored = step.pick;
    }
    CHECK(explored == 1);
}

TEST_CASE("an online ranking that left its pick when it slowed tries it again soon, native or a schedule",
          "[allreduce][automatic][rerank]") {
    using detail::online_ranking;
    // The pick left for native (hitch's transport slowed, MPI's own all-reduce not: a phase of the host) or for
    // another of hitch's schedules (a load's burst slowed the pick, and the runner-up's estimate was taken at a
    // quieter moment): either way the pick it left is probed.
    const int other = GENERATE(detail::online_ranking::candidates - 1, 1);
    CAPTURE(other);
    // The model's pick (0) and the other beyond rerank_first_try_ratio x it: no first tries.
    online_ranking::times predicted{};
    predicted.fill(-1.0);
    predicted[0] = 1.0;
    predicted[static_cast<std::size_t>(other)] = 5.0;
    online_ranking r(predicted, 0);
    const detail::rerank_settings settings{};
    // One call: its step, and the review it ends with the time `time_of` gives the candidate it ran.
    const auto call = [&](const auto& time_of) { return ranking_call(r, settings, time_of); };
    const auto fast = [&](int c) { return c == other ? 5.0 : 1.0; };
    const auto slow = [&](int c) { return c == other ? 5.0 : 20.0; };  // the pick slowed, the other not
    for (int i = 0; i < 5; ++i) CHECK(call(fast) == 0);
    {  // an exploration measured the other at its time
        detail::review_summary s{};
        s.median[static_cast<std::size_t>(other)] = 5.0;
        s.agreement_s = 1e-6;
        r.review(s, settings, 1e-6);
    }
    // The slow spell: the pick's estimate rises (1.5x a window at most) until the other is the pick.
    int calls = 0;
    while (r.view().current == 0 && calls < 20) {
        call(slow);
        ++calls;
    }
    REQUIRE(r.view().current == other);
    // The pick it left is tried again after 2 calls, then 4, 8, 16: still slow, the other stays the pick.
    std::vector<int> probes;
    for (int i = 1; i <= 30; ++i)
        if (call(slow) == 0) probes.push_back(i);
    CHECK(probes == std::vector<int>{2, 6, 14, 30});
    CHECK(r.view().current == other);
    // The spell ends: the next probe (16 calls on) finds the pick fast, and it is the pick again.
    int back = -1;
    for (int i = 1; i <= 20 && back < 0; ++i) {
        call(fast);
        if (r.view().current == 0) back = i;
    }
    CHECK(back == 16);
    // Taken back, no more probes: in 40 calls the other runs only as the credit's exploration (the credit earned
    // while it was the pick pays for one).
    int others = 0;
    for (int i = 0; i < 40; ++i) others += call(fast) == other ? 1 : 0;
    CHECK(others <= 1);
}

TEST_CASE("an online ranking runs again, once each, the runners-up it measured while the host was far slower",
          "[allreduce][automatic][rerank]") {
    // In truth 1.0, 1.5 and 0.8 on a quiet host.
    three_schedules t{{1.0, 1.5, 0.8}};
    const auto& r = t.r;
    // A slow phase of the host (every schedule 10x) from the first call: the pick is measured at 10, and a window
    // of explorations measures candidate 1 at 15 and candidate 2 at 40 (its run also met a preempted rank).
    REQUIRE(t.call(10.0) == 0);
    t.measured({10.0, 15.0, 40.0});
    REQUIRE(r.view().current == 0);
    // The phase ends. The pick's windows take its quiet time in full; once the median of its last three says the
    // host runs 10x faster (the second quiet window: one lucky call would not), the runners-up, measured when it
    // ran 10x slower, run once each at once, the most promising first, and candidate 2 is found the fastest.
    std::vector<int> ran;
    for (int i = 0; i < 4; ++i) ran.push_back(t.call(1.0));
    CHECK(ran == std::vector<int>{0, 0, 1, 2});
    CHECK(r.view().current == 2);
    CHECK(r.view().estimates[2] == Approx(0.8));
    // Measured beside the host's speed now, they are not run again out of turn: in 40 calls, at most the credit's
    // exploration.
    int others = 0;
    for (int i = 0; i < 40; ++i) others += t.call(1.0) != 2 ? 1 : 0;
    CHECK(others <= 1);
}

TEST_CASE("an online ranking that switched twice in one slow spell probes the pick that was fastest before it",
          "[allreduce][automatic][rerank]") {
    // Three schedules, 1.0, 1.3 and 1.6, each runner-up measured once by an exploration; a burst slows all of them
    // 20x, but a schedule's estimate rises only when it runs.
    three_schedules t{{1.0, 1.3, 1.6}};
    const auto& r = t.r;
    for (int i = 0; i < 5; ++i) CHECK(t.call(1.0) == 0);
    t.measured({0.0, 1.3, 1.6});
    // The burst: the pick rises and gives way to candidate 1, which rises in turn; the ranking ends at candidate 2.
    std::vector<int> picks;  // the picks it switched to
    for (int i = 0, was = 0; i < 40 && r.view().current != 2; ++i) {
        t.call(20.0);
        if (r.view().current != was) picks.push_back(was = r.view().current);
    }
    INFO("picks in the burst: " << Catch::Detail::stringify(picks));
    REQUIRE(r.view().current == 2);
    CHECK(picks.front() == 1);  // candidate 1 first, then (by way of the pick, risen less) candidate 2
    // The burst ends. The probes go to candidate 0, the fastest before it (not to candidate 1, left last), and the
    // first of them makes it the pick again.
    int back = -1;
    std::vector<int> ran;
    for (int i = 1; i <= 20 && back < 0; ++i) {
        ran.push_back(t.call(1.0));
        if (r.view().current == 0) back = i;
    }
    INFO("ran after the burst: " << Catch::Detail::stringify(ran));
    CHECK(back >= 1);
    CHECK(back <= 2 * tuning::rerank_probe_first_interval);
    CHECK(std::count(ran.begin(), ran.end(), 1) == 0);
}
