// The bookkeeping of data_parallel's gradient events on a GPU (train/ready_events.hpp) with a fake backend that
// logs what the CUDA backend would do: which event each bucket's exchange waits for, that every wait follows the
// record it waits for, that layers a micro-batch did not report share one event recorded at step(), and that a read
// of a layer neither reported nor settled is refused. Then the engine's order of calls for a real bucket plan
// (train/buckets.hpp on layers in CUDA memory) with backward reporting layers last to first.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "hitch/core/layer.hpp"
#include "hitch/train/buckets.hpp"
#include "hitch/train/ready_events.hpp"

namespace {

/// What the CUDA backend would have done, in order: ("record", slot) on the compute stream, ("wait", slot) on the
/// exchange stream.
struct fake_events {
    struct call {
        std::string what;
        std::size_t slot;
        friend bool operator==(const call&, const call&) = default;
    };
    std::vector<call>* log;
    void record(std::size_t slot) { log->push_back({"record", slot}); }
    void wait(std::size_t slot) { log->push_back({"wait", slot}); }
};
using call = fake_events::call;

/// Every wait is for an event recorded before it (the last record of that slot), and no record happens between a
/// record and... nothing: records may be repeated (a slot re-recorded in a later micro-batch).
bool waits_follow_records(const std::vector<call>& log) {
    std::map<std::size_t, bool> recorded;
    for (const call& c : log) {
        if (c.what == "record") recorded[c.slot] = true;
        if (c.what == "wait" && !recorded[c.slot]) return false;
    }
    return true;
}

}  // namespace

TEST_CASE("reported layers wait for their own events, the others for one shared event", "[cuda][train][events]") {
    std::vector<call> log;
    hitch::train::detail::ready_events<fake_events> ev(fake_events{&log}, 4);
    ev.reported(3);
    ev.reported(1);
    CHECK(log == std::vector<call>{{"record", 3}, {"record", 1}});
    ev.settle();  // layers 0 and 2 were not reported: one event (slot 4) for both
    CHECK(log.back() == call{"record", 4});
    ev.settle();  // a second settle in the same micro-batch records nothing more
    CHECK(std::count(log.begin(), log.end(), call{"record", 4}) == 1);
    log.clear();
    const std::vector<std::size_t> bucket{3, 2, 1, 0};
    ev.wait_for(bucket);
    CHECK(log == std::vector<call>{{"wait", 3}, {"wait", 1}, {"wait", 4}});  // the shared event once
    CHECK(ev.reported_or_settled(0));
}

TEST_CASE("a micro-batch that reports every layer records no shared event", "[cuda][train][events]") {
    std::vector<call> log;
    hitch::train::detail::ready_events<fake_events> ev(fake_events{&log}, 3);
    for (std::size_t k = 3; k-- > 0;) ev.reported(k);
    ev.settle();
    CHECK(std::none_of(log.begin(), log.end(), [](const call& c) { return c.slot == 3; }));
    log.clear();
    ev.wait_for_all();
    CHECK(log == std::vector<call>{{"wait", 0}, {"wait", 1}, {"wait", 2}});
}

TEST_CASE("reading a layer neither reported nor settled is a logic error; reset starts afresh",
          "[cuda][train][events]") {
    std::vector<call> log;
    hitch::train::detail::ready_events<fake_events> ev(fake_events{&log}, 2);
    ev.reported(1);
    const std::vector<std::size_t> both{1, 0};
    CHECK_THROWS_AS(ev.wait_for(both), std::logic_error);
    CHECK_THROWS_WITH(ev.wait_for(both), Catch::Contains("layer 0 is read before it was reported or settled"));
    ev.settle();
    CHECK_NOTHROW(ev.wait_for(both));
    ev.reset();
    CHECK_FALSE(ev.reported_or_settled(1));
    log.clear();
    ev.settle();  // a micro-batch without gradient_ready: every layer takes the shared event, recorded again
    ev.wait_for(both);
    CHECK(log == std::vector<call>{{"record", 2}, {"wait", 2}});
}

TEST_CASE("the engine's order on a bucket plan of GPU layers: each bucket waits for exactly its layers' events",
          "[cuda][train][events]") {
    // Layers in CUDA memory (the plan reads sizes only; the pointers are never dereferenced).
    const std::vector<std::size_t> sizes{300, 5, 1000, 0, 70, 1024, 9, 2000};
    std::vector<hitch::layer> layers;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
        auto* fake = reinterpret_cast<float*>(std::uintptr_t{0x1000} * (k + 1));
        std::string name = "l";
        name += std::to_string(k);
        layers.push_back({name, hitch::tensor_view<float>(fake, sizes[k], hitch::memory_space::cuda),
                          hitch::tensor_view<float>(fake, sizes[k], hitch::memory_space::cuda)});
    }
    const auto plan = hitch::train::plan_buckets(layers, 4096);  // 1024 floats a bucket
    REQUIRE(plan.size() >= 3);
    for (const bool report_some : {true, false}) {
        std::vector<call> log;
        hitch::train::detail::ready_events<fake_events> ev(fake_events{&log}, layers.size());
        // Backward reports the last layers first; with report_some, layers 2 and 5 are never reported (a branch
        // not taken): their buckets launch only at step(), after settle().
        std::vector<std::size_t> ready_in_bucket(plan.size(), 0);
        std::size_t launched = 0;
        std::vector<std::size_t> bucket_of(layers.size());
        for (std::size_t b = 0; b < plan.size(); ++b)
            for (std::size_t k : plan[b].layers) bucket_of[k] = b;
        const auto launch = [&] {
            while (launched < plan.size() && ready_in_bucket[launched] == plan[launched].layers.size()) {
                ev.wait_for(plan[launched].layers);  // what the exchange worker does first for this bucket
                ++launched;
            }
        };
        for (std::size_t k = layers.size(); k-- > 0;) {
            if (report_some && (k == 2 || k == 5)) continue;
            ev.reported(k);
            ++ready_in_bucket[bucket_of[k]];
            launch();
        }
        ev.settle();
        for (std::size_t k : {std::size_t{2}, std::size_t{5}})
            if (report_some) ++ready_in_bucket[bucket_of[k]];
        launch();
        CHECK(launched == plan.size());
        CHECK(waits_follow_records(log));
        // Every layer's wait is its own event, or the shared one for the unreported layers.
        std::vector<std::size_t> waited;
        for (const call& c : log)
            if (c.what == "wait") waited.push_back(c.slot);
        std::vector<std::size_t> expected;
        for (const auto& bucket : plan) {
            bool shared = false;
            for (std::size_t k : bucket.layers) {
                if (report_some && (k == 2 || k == 5))
                    shared = true;
                else
                    expected.push_back(k);
            }
            if (shared) expected.push_back(layers.size());
        }
        CHECK(waited == expected);
        ev.reset();
    }
}
