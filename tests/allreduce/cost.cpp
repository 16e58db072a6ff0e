// The cost model: each schedule's messages and bytes, counted per rank through an instrumented communicator, equal
// what its cost() says the busiest rank sends; the alpha-beta-gamma coefficients equal the formulas of Thakur,
// Rabenseifner & Gropp (2005) for the textbook cases; automatic picks by the model with constants measured once
// (identical on every rank) or set by the user.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/local.hpp"
#include "instrumented.hpp"
#include "reference.hpp"

using namespace hitch::allreduce;
using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;
using hitch_test::instrumented;
using hitch_test::traffic_counters;

namespace {

struct counted {
    long long messages = 0;
    long long bytes = 0;
};

/// Runs one unchecked all-reduce of n floats with `schedule` on p ranks; returns what each rank sent.
template <class Schedule>
std::vector<counted> traffic(const Schedule& schedule, int p, std::size_t n) {
    return run_local(p, [&](local& c) {
        auto counters = std::make_shared<traffic_counters>();
        instrumented<local> wrapped(c.split(0, c.rank()), counters);
        group g(wrapped);
        std::vector<float> data(n, 1.0f);
        call_options o;
        o.check = false;
        wrapped.barrier();
        counters->reset();
        allreduce(g, hitch::view(data), reduce_op::sum, schedule, o);
        const counted mine{counters->messages.load(), counters->bytes.load()};
        expect(data.empty() || data[0] == static_cast<float>(p), "the counted call still reduces");
        return mine;
    });
}

template <class Schedule>
void matches_model(const Schedule& schedule, int p, std::size_t n) {
    const auto per_rank = traffic(schedule, p, n);
    counted busiest;
    for (const auto& c : per_rank) {
        busiest.messages = std::max(busiest.messages, c.messages);
        busiest.bytes = std::max(busiest.bytes, c.bytes);
    }
    const cost_estimate model = schedule.cost(p, n * sizeof(float), cost_constants{});
    INFO(Schedule::name << " p = " << p << " n = " << n << " floats");
    CHECK(static_cast<double>(busiest.messages) == model.sent_messages);
    CHECK(static_cast<double>(busiest.bytes) == model.sent_bytes);
}

template <class Schedule>
Schedule with_segment(std::size_t bytes) {
    typename Schedule::options_type o;
    o.segment_bytes = bytes;
    return Schedule(o);
}

}  // namespace

TEST_CASE("each schedule sends what its cost model says", "[allreduce][cost]") {
    // n divisible by every p used and by every power of two up to 8, so blocks and segments are even
    const std::size_t n = 8 * 9 * 5 * 7 * 16;
    for (int p : {1, 2, 3, 4, 5, 6, 7, 8}) {
        matches_model(ring{}, p, n);
        matches_model(with_segment<ring>(4096), p, n);
        matches_model(recursive_doubling{}, p, n);
        matches_model(with_segment<recursive_doubling>(8192), p, n);
        matches_model(rabenseifner{}, p, n);
        matches_model(with_segment<rabenseifner>(4096), p, n);
        matches_model(binary_tree{}, p, n);
        matches_model(with_segment<binary_tree>(2048), p, n);
        matches_model(double_binary_tree{}, p, n);
        matches_model(with_segment<double_binary_tree>(2048), p, n);
        matches_model(parameter_server{}, p, n);
        parameter_server::options_type servers;
        servers.servers = 3;
        servers.segment_bytes = 4096;
        matches_model(parameter_server(servers), p, n);
    }
}

TEST_CASE("hierarchical sends no more than its two levels together", "[allreduce][cost]") {
    const std::size_t n = 40320;
    for (int p : {2, 4, 6, 8}) {
        hierarchical<>::options_type o;
        o.ranks_per_group = 2;
        const hierarchical<> h(o);
        const auto per_rank = traffic(h, p, n);
        const cost_estimate model = h.cost(p, n * sizeof(float), cost_constants{});
        for (const auto& c : per_rank) {
            CHECK(static_cast<double>(c.messages) <= model.sent_messages);
            CHECK(static_cast<double>(c.bytes) <= model.sent_bytes);
        }
    }
}

TEST_CASE("the cost coefficients are the published formulas", "[allreduce][cost]") {
    const cost_constants k;
    for (int p : {2, 4, 8, 16, 64}) {
        const double lg = std::log2(p);
        for (double n : {1024.0, 65536.0}) {  // below the default segment size: one message per step
            const auto bytes = static_cast<std::size_t>(n);
            INFO("p = " << p << " n = " << n);
            const cost_estimate r = ring{}.cost(p, bytes, k);
            CHECK(r.latency_terms == Approx(2.0 * (p - 1)));
            CHECK(r.bandwidth_bytes == Approx(2.0 * (p - 1) / p * n));
            CHECK(r.reduced_bytes == Approx((p - 1.0) / p * n));
            const cost_estimate d = recursive_doubling{}.cost(p, bytes, k);
            CHECK(d.latency_terms == Approx(lg));
            CHECK(d.bandwidth_bytes == Approx(lg * n));
            CHECK(d.reduced_bytes == Approx(lg * n));
            const cost_estimate b = rabenseifner{}.cost(p, bytes, k);
            CHECK(b.latency_terms == Approx(2.0 * lg));
            CHECK(b.bandwidth_bytes == Approx(2.0 * (p - 1) / p * n));
            CHECK(b.reduced_bytes == Approx((p - 1.0) / p * n));
            // seconds() weighs the three terms
            const cost_constants w{1e-6, 1e-9, 1e-10, -1, -1};
            CHECK(r.seconds(w) ==
                  Approx(2.0 * (p - 1) * 1e-6 + 2.0 * (p - 1) / p * n * 1e-9 + (p - 1.0) / p * n * 1e-10));
        }
    }
    // the fold for world sizes that are not powers of two: two more steps and one more reduction
    const cost_estimate d = recursive_doubling{}.cost(6, 1000, k);
    CHECK(d.latency_terms == Approx(4.0));
    CHECK(d.reduced_bytes == Approx(3000.0));
}

TEST_CASE("automatic follows the model: recursive doubling for small buffers, bandwidth-optimal for large",
          "[allreduce][cost][automatic]") {
    const automatic a;
    const cost_constants cluster{20e-6, 1e-10, 2e-11, -1, -1};  // latency-heavy network, fast reduction
    CHECK(a.choose(8, 4096, cluster) == recursive_doubling::name);
    CHECK(a.choose(2, 4096, cluster) == recursive_doubling::name);
    for (int p : {4, 8, 16}) {
        const std::string_view big = a.choose(p, std::size_t{64} << 20, cluster);
        CHECK((big == rabenseifner::name || big == ring::name));
    }
    // the choice is the cheapest candidate by the candidates' own costs
    for (int p : {2, 3, 5, 8})
        for (std::size_t n : {std::size_t{256}, std::size_t{1} << 16, std::size_t{1} << 24}) {
            const double chosen = a.cost(p, n, cluster).seconds(cluster);
            for (double other : {ring{}.cost(p, n, cluster).seconds(cluster),
                                 recursive_doubling{}.cost(p, n, cluster).seconds(cluster),
                                 rabenseifner{}.cost(p, n, cluster).seconds(cluster),
                                 binary_tree{}.cost(p, n, cluster).seconds(cluster),
                                 double_binary_tree{}.cost(p, n, cluster).seconds(cluster)})
                CHECK(chosen <= other);
        }
    // a native all-reduce with a tiny fitted latency wins small buffers when the communicator has one
    cost_constants with_native = cluster;
    with_native.native_alpha_s = 1e-6;
    with_native.native_beta_s_per_byte = 1e-9;
    CHECK(a.choose(8, 256, with_native) == "native");
    CHECK(a.choose(8, std::size_t{64} << 20, with_native) != "native");
}

TEST_CASE("automatic times larger probes once a call outgrows the first ones, the same on every rank",
          "[allreduce][cost][automatic]") {
    using hitch::allreduce::automatic_profile;
    automatic::options_type o;
    o.calibration_budget_s = 600;  // every probe, however loaded the host
    const automatic a(o);
    const auto profiles = run_local(2, [&](local& c) {
        group g(c);
        std::vector<float> small(1000, 1.0f);
        allreduce(g, hitch::view(small), reduce_op::sum, a);
        const auto first = automatic::measured_profile(g.state());
        expect(first != nullptr && first->measured == automatic_profile::first_probes,
               "the first call measures up to 16 MiB");
        std::vector<float> big((std::size_t{20} << 20) / sizeof(float), 1.0f);
        allreduce(g, hitch::view(big), reduce_op::sum, a);
        const auto longer = automatic::measured_profile(g.state());
        expect(longer != first && longer->measured == automatic_profile::first_probes + 1,
               "a 20 MiB call adds the 64 MiB probe");
        for (int i = 0; i < automatic_profile::first_probes; ++i)
            for (std::size_t k = 0; k < automatic_profile::candidates; ++k)
                expect(
                    longer->seconds[k][static_cast<std::size_t>(i)] == first->seconds[k][static_cast<std::size_t>(i)],
                    "the earlier probes are kept");
        expect(longer->seconds[0][automatic_profile::first_probes] > 0, "the new probe is timed");
        allreduce(g, hitch::view(big), reduce_op::sum, a);
        expect(automatic::measured_profile(g.state()) == longer, "measured once");
        bool ok = true;
        for (float x : big) ok = ok && x == 4.0f;
        expect(ok, "results");
        return *longer;
    });
    CHECK(std::memcmp(&profiles[0], &profiles[1], sizeof(automatic_profile)) == 0);
}

TEST_CASE("automatic measures the constants once, the same on every rank, and runs its choice",
          "[allreduce][cost][automatic]") {
    for (int p : {2, 3, 5}) {
        const auto constants = run_local(p, [p](local& c) {
            group g(c);
            expect(!g.constants().has_value(), "nothing measured before the first automatic call");
            std::vector<float> v(100, 1.0f);
            allreduce<ring>(g, hitch::view(v));
            expect(!g.constants().has_value(), "other schedules do not measure");
            allreduce(g, hitch::view(v));
            expect(g.constants().has_value(), "measured by the first automatic call");
            const cost_constants k = *g.constants();
            allreduce(g, hitch::view(v));
            expect(*g.constants() == k, "measured once");
            expect(v[0] == static_cast<float>(p * p * p), "results");
            return k;
        });
        for (const auto& k : constants) {
            CHECK(k == constants[0]);
            CHECK(k.alpha_s > 0);
            CHECK(k.alpha_s < 0.1);
            CHECK(k.beta_s_per_byte > 0);
            CHECK(k.gamma_s_per_byte > 0);
            CHECK(!k.has_native());
        }
    }
    // User constants override, and automatic then sends exactly what its pick's model says (the model's pick in
    // every call: without re-ranking, which would try the runners-up from the second call on).
    const cost_constants latency_bound{1.0, 1e-12, 1e-12, -1, -1};    // every round costs a second: fewest rounds wins
    const cost_constants bandwidth_bound{1e-9, 1e-6, 1e-12, -1, -1};  // every byte costs a microsecond
    const std::size_t n = 8 * 1024;
    automatic::options_type model_only;
    model_only.rerank = false;
    const auto per_rank = run_local(8, [&](local& c) {
        auto counters = std::make_shared<traffic_counters>();
        instrumented<local> wrapped(c.split(0, c.rank()), counters);
        group g(wrapped);
        g.set_constants(latency_bound);
        std::vector<float> data(n, 1.0f);
        call_options o;
        o.check = false;
        std::array<long long, 3> messages{};
        for (int call = 0; call < 3; ++call) {  // the second call takes the remembered decision
            // The third call runs under constants where bandwidth dominates: the remembered pick must not be reused.
            if (call == 2) g.set_constants(bandwidth_bound);
            counters->reset();
            allreduce(g, hitch::view(data), reduce_op::sum, automatic(model_only), o);
            messages[static_cast<std::size_t>(call)] = counters->messages.load();
        }
        return messages;
    });
    const automatic a;
    const std::size_t bytes = n * sizeof(float);
    CHECK(a.choose(8, bytes, latency_bound) == recursive_doubling::name);
    const std::string_view wide = a.choose(8, bytes, bandwidth_bound);
    CHECK(wide != recursive_doubling::name);
    const double wide_messages = wide == ring::name ? ring{}.cost(8, bytes, bandwidth_bound).sent_messages
                                 : wide == rabenseifner::name
                                     ? rabenseifner{}.cost(8, bytes, bandwidth_bound).sent_messages
                                     : parameter_server({.servers = 8}).cost(8, bytes, bandwidth_bound).sent_messages;
    CHECK(wide_messages != recursive_doubling{}.cost(8, bytes, latency_bound).sent_messages);
    for (const auto& m : per_rank) {
        CHECK(static_cast<double>(m[0]) == recursive_doubling{}.cost(8, bytes, latency_bound).sent_messages);
        CHECK(m[1] == m[0]);
        CHECK(static_cast<double>(m[2]) == wide_messages);
    }
}
