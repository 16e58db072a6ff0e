// The sparse exchanges over comm::local with 1 to 8 ranks: exact data against decode-then-sum, random data bit for
// bit and byte for byte against the serial simulation (sparse_exchanges_suite.hpp), the dense switch when and only
// when the rule says, hierarchical layouts non-consecutive and uneven, NaN on one rank, mismatched buckets, and
// the sparse set's own merge and wire checks.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "../allreduce/laid_out.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/dgc.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/threshold.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/exchange/detail/sparse_set.hpp"
#include "sparse_exchanges_suite.hpp"

namespace hc = hitch::compress;
namespace hd = hitch::compress::detail;
using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::layout_of;
using hitch_test::sparse_exchange;

namespace {

/// The exchanges to try on p ranks: recursive doubling, and hierarchical over a few layouts.
std::vector<sparse_exchange> exchanges_for(int p) {
    std::vector<sparse_exchange> out{{false, {}}};
    std::vector<int> one(static_cast<std::size_t>(p), 0), alternating, pairs, singles;
    for (int r = 0; r < p; ++r) {
        alternating.push_back(r % 2);
        pairs.push_back(r / 2);
        singles.push_back(r);
    }
    out.push_back({true, layout_of(one)});
    if (p >= 2) out.push_back({true, layout_of(alternating)});  // {0, 2, ...}, {1, 3, ...}: not consecutive
    if (p >= 3) out.push_back({true, layout_of(pairs)});        // 2-2-1 at p = 5: uneven
    if (p >= 2) out.push_back({true, layout_of(singles)});
    return out;
}

}  // namespace

TEST_CASE("sparse exchanges: exact data equals decode-then-sum, 1 to 8 ranks", "[compress][sparse]") {
    for (int p = 1; p <= 8; ++p)
        for (const auto& x : exchanges_for(p)) {
            INFO(x.label() << " on " << p << " ranks");
            REQUIRE_NOTHROW(run_local(p, [&](local& comm) {
                hitch_test::sparse_exact_equals_decode_then_sum(comm, hc::topk({.density = 0.02}), 1031, x, 3);
                hitch_test::sparse_exact_equals_decode_then_sum(comm, hc::topk({.density = 0.3}), 1031, x, 3);
                hitch_test::sparse_exact_equals_decode_then_sum(comm, hc::threshold({.tau = 0.5f}), 1031, x, 3);
                hitch_test::sparse_exact_equals_decode_then_sum(comm, hc::threshold({.tau = 0.875f}), 1031, x, 3);
                hitch_test::sparse_exact_equals_decode_then_sum(
                    comm, hc::error_feedback<hc::topk>(hc::topk({.density = 0.05})), 1031, x, 3);
                // dgc's momentum leaves exact data only at its first step.
                hitch_test::sparse_exact_equals_decode_then_sum(comm, hc::dgc({.final_density = 0.02}), 1031, x, 1);
            }));
        }
}

TEST_CASE("sparse exchanges: random data equals the serial simulation bit for bit, bytes included",
          "[compress][sparse]") {
    for (int p = 1; p <= 8; ++p)
        for (const auto& x : exchanges_for(p))
            for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{1031}}) {
                INFO(x.label() << " on " << p << " ranks, " << n << " elements");
                REQUIRE_NOTHROW(run_local(p, [&](local& comm) {
                    using hitch_test::sparse_matches_simulation;
                    // 8 ranks of 1% stay below half the bucket: never dense (n = 1031).
                    sparse_matches_simulation(comm, hc::topk({.density = 0.01}), n, x, 3, n == 1031 ? 0 : -1);
                    // Two sets of 40% pass half the bucket: dense from the first merge on, where there is one.
                    sparse_matches_simulation(comm, hc::topk({.density = 0.4}), n, x, 3,
                                              n == 1031 ? (p > 1 ? 1 : 0) : -1);
                    sparse_matches_simulation(comm, hc::topk({.density = 0.6}), n, x, 2, n == 1031 ? 1 : -1);
                    sparse_matches_simulation(comm, hc::threshold({.tau = 3e-3f}), n, x, 2);
                    sparse_matches_simulation(comm, hc::threshold({.tau = 1e-3f}), n, x, 2);
                    sparse_matches_simulation(comm, hc::dgc({.final_density = 0.02}), n, x, 3);
                    sparse_matches_simulation(comm, hc::dgc({.final_density = 0.4}), n, x, 3);
                    sparse_matches_simulation(comm, hc::error_feedback<hc::topk>(hc::topk({.density = 0.05})), n, x, 3);
                }));
            }
}

TEST_CASE("sparse exchanges: average, double buckets", "[compress][sparse]") {
    for (int p : {1, 3, 4}) {
        for (const auto& x : exchanges_for(p)) {
            INFO(x.label() << " on " << p << " ranks");
            REQUIRE_NOTHROW(run_local(p, [&](local& comm) {
                hitch_test::sparse_average_and_double(comm, hc::topk({.density = 0.05}), 500, x);
            }));
        }
    }
}

TEST_CASE("sparse exchanges: a rank with NaN stops every rank and changes no state", "[compress][sparse][failure]") {
    hitch::comm::local_options quick;
    quick.timeout_s = 20;  // a hang shows as a timeout long before the test's own limit
    for (int p : {2, 3, 5}) {
        for (const auto& x : exchanges_for(p)) {
            INFO(x.label() << " on " << p << " ranks");
            REQUIRE_NOTHROW(run_local(
                p,
                [&](local& comm) {
                    hitch_test::sparse_failure_reaches_every_rank(
                        comm, hc::error_feedback<hc::topk>(hc::topk({.density = 0.05})), 999, x,
                        [](const auto& st) { return st.codec.residual; });
                    hitch_test::sparse_failure_reaches_every_rank(comm, hc::dgc({.final_density = 0.02}), 999, x,
                                                                  [](const auto& st) { return st.codec.v; });
                    hitch_test::sparse_failure_reaches_every_rank(
                        comm, hc::threshold({.tau = 1e-3f}), 999, x,
                        [](const auto& st) { return std::vector<std::size_t>{st.codec.count}; });
                },
                quick));
        }
    }
}

TEST_CASE("sparse exchanges: ranks with different bucket sizes get mismatch_error", "[compress][sparse][failure]") {
    for (const auto& x : exchanges_for(3)) {
        INFO(x.label());
        std::atomic<bool> all = true;
        REQUIRE_NOTHROW(run_local(3, [&](local& comm) {
            if (!hitch_test::sparse_mismatch_everywhere(comm, hc::topk({.density = 0.1}), x)) all = false;
        }));
        CHECK(all);
    }
}

TEST_CASE("sparse exchanges: ranks that pass different layouts get mismatch_error", "[compress][sparse][failure]") {
    std::atomic<bool> all = true;
    REQUIRE_NOTHROW(run_local(3, [&](local& comm) {
        hitch::allreduce::group g(comm);
        const hc::topk codec({.density = 0.1});
        auto st = hc::make_aggregation_state(codec, 100);
        auto bucket = hitch_test::data_of(100, 0, comm.rank(), false);
        const auto layout = comm.rank() == 0 ? layout_of({0, 0, 1}) : layout_of({0, 1, 1});
        try {
            hc::aggregate_sparse_hierarchical(g, codec, st, hitch::tensor_view<float>(bucket), layout);
            all = false;
        } catch (const hitch::mismatch_error&) {}
    }));
    CHECK(all);
}

TEST_CASE("sparse exchanges: a layout that does not fit the group is a config_error", "[compress][sparse][failure]") {
    REQUIRE_NOTHROW(run_local(2, [](local& comm) {
        hitch::allreduce::group g(comm);
        const hc::topk codec({.density = 0.1});
        auto st = hc::make_aggregation_state(codec, 10);
        std::vector<float> b(10, 1.0f);
        for (const auto& bad : {layout_of({0}), hitch::node_layout{{0, 2}, 2}}) {
            bool refused = false;
            try {
                hc::aggregate_sparse_hierarchical(g, codec, st, hitch::tensor_view<float>(b), bad);
            } catch (const hitch::config_error& e) {
                refused = std::string(e.what()).find("nodes.") != std::string::npos;
            }
            hitch_test::require(refused, "a bad layout is refused naming the field");
        }
    }));
}

TEST_CASE("sparse exchanges: hierarchical over a communicator's layout sends across nodes from leaders only",
          "[compress][sparse]") {
    const std::vector<std::vector<int>> worlds = {{0, 1, 0, 1}, {0, 0, 1, 1, 2}, {1, 0, 0, 1, 2, 2}, {0, 1, 2}};
    for (const auto& nodes : worlds) {
        auto map = std::make_shared<hitch_test::node_map>(nodes);
        const int p = static_cast<int>(nodes.size());
        INFO(p << " ranks");
        REQUIRE_NOTHROW(run_local(p, [&](local& c) {
            hitch_test::laid_out comm(c.split(0, c.rank()), map);
            const hitch::node_layout layout = comm.node_layout();
            hitch::allreduce::group g(comm);
            const int me = g.rank();
            const std::size_t n = 1031;
            const hc::topk codec({.density = 0.02});
            auto st = hc::make_aggregation_state(codec, n);
            auto bucket = hitch_test::data_of(n, 0, me, false);
            // Messages only (the wrapper sees what crosses), and no agreement round, which every rank sends.
            hc::aggregate_options o;
            o.call.shared_memory = false;
            o.call.check = false;
            const long long before = map->cross_bytes[static_cast<std::size_t>(me)];
            hc::aggregate_sparse_hierarchical(g, codec, st, hitch::tensor_view<float>(bucket), layout, o);
            const long long crossed = map->cross_bytes[static_cast<std::size_t>(me)] - before;
            // The simulation's bytes of this rank, less what a leader sends back inside its node.
            std::vector<std::vector<float>> decoded;
            std::vector<std::byte> m;
            for (int r = 0; r < p; ++r) {
                auto s = hitch_test::state_for_rank(codec, n, r);
                const auto gr = hitch_test::data_of(n, 0, r, false);
                codec.encode(hitch::tensor_view<const float>(gr), s, m);
                decoded.emplace_back(n);
                codec.decode(m, hitch::tensor_view<float>(decoded.back()));
            }
            const auto sim = hitch_test::simulate_sparse(decoded, {true, layout});
            const auto members = layout.ranks_on(layout.node_of(me));
            const bool leader = members.front() == me;
            const std::size_t back =
                leader ? (members.size() - 1) * (8 + sim.sets[static_cast<std::size_t>(me)].bytes()) : 0;
            const auto want = leader ? static_cast<long long>(sim.bytes[static_cast<std::size_t>(me)] - back) : 0LL;
            hitch_test::require(crossed == want, hitch::detail::concat("rank ", me, " sent ", crossed,
                                                                       " bytes across nodes, want ", want));
            hitch_test::require(hitch_test::same_values(bucket, sim.sets[static_cast<std::size_t>(me)].v), "result");
        }));
    }
}

namespace {

hd::sparse_set sparse_of(std::vector<std::uint32_t> index, std::vector<float> value) {
    hd::sparse_set s;
    s.index = std::move(index);
    s.value = std::move(value);
    return s;
}

}  // namespace

TEST_CASE("sparse set: merge is the union with a + b, dense exactly when 8 k >= 4 n", "[compress][sparse][set]") {
    const std::size_t n = 10;
    const auto a = sparse_of({1, 4}, {1.5f, 2.0f}), b = sparse_of({4, 7}, {0.25f, -3.0f});
    hd::sparse_set ab, ba;
    hd::merge(a, b, n, ab);
    hd::merge(b, a, n, ba);
    CHECK(!ab.dense);
    CHECK(ab.index == std::vector<std::uint32_t>{1, 4, 7});
    CHECK(ab.value == std::vector<float>{1.5f, 2.25f, -3.0f});
    CHECK(ba.index == ab.index);
    CHECK(ba.value == ab.value);
    // 4 entries over 10 elements: 32 sparse bytes < 40 dense bytes; 5 entries: 40 >= 40, dense.
    const auto c = sparse_of({0, 9}, {1.0f, 1.0f});
    hd::sparse_set four, five;
    hd::merge(ab, sparse_of({0}, {1.0f}), n, four);
    CHECK(!four.dense);
    CHECK(four.index.size() == 4);
    hd::merge(ab, c, n, five);
    REQUIRE(five.dense);
    CHECK(five.value == std::vector<float>{1.0f, 1.5f, 0, 0, 2.25f, 0, 0, -3.0f, 0, 1.0f});
    // Dense stays dense, whatever it meets; sparse and dense forms give the same values.
    hd::sparse_set d, e;
    hd::merge(five, sparse_of({}, {}), n, d);
    CHECK(d.dense);
    CHECK(d.value == five.value);
    hd::merge(sparse_of({2}, {4.0f}), five, n, e);
    CHECK(e.dense);
    CHECK(e.value[2] == 4.0f);
    // The own set: nonzeros only, dense where they are not sparse.
    hd::sparse_set own;
    const std::vector<float> mostly_zero{0, -0.0f, 3, 0, 0, 0};
    hd::sparse_from_dense(mostly_zero, own);
    CHECK((!own.dense && own.index == std::vector<std::uint32_t>{2}));
    const std::vector<float> half_full{1, 0, 2, 0, 3, 0};
    hd::sparse_from_dense(half_full, own);
    CHECK(own.dense);
    CHECK(hd::stays_sparse(2, 5));
    CHECK(!hd::stays_sparse(3, 6));
}

TEST_CASE("sparse set: the wire form round-trips and a corrupt one is corrupt_message_error",
          "[compress][sparse][set]") {
    const std::size_t n = 10;
    const auto s = sparse_of({1, 4, 7}, {1.5f, 2.25f, -3.0f});
    std::vector<std::byte> wire;
    hd::write_sparse(s, wire);
    CHECK(wire.size() == 24);
    hd::sparse_set back;
    hd::read_sparse(wire, n, back, "test");
    CHECK((!back.dense && back.index == s.index && back.value == s.value));
    hd::sparse_set dense = s;
    hd::make_dense(dense, n);
    hd::write_sparse(dense, wire);
    CHECK(wire.size() == 40);
    hd::read_sparse(wire, n, back, "test");
    CHECK((back.dense && back.value == dense.value));

    const auto corrupt = [&](std::vector<std::byte> bytes) {
        try {
            hd::read_sparse(bytes, n, back, "test");
        } catch (const hitch::corrupt_message_error&) {
            return true;
        }
        return false;
    };
    hd::write_sparse(s, wire);
    CHECK(corrupt(std::vector<std::byte>(wire.begin(), wire.end() - 1)));  // not a multiple of 8
    CHECK(corrupt(std::vector<std::byte>(48)));                            // above the dense size
    auto out_of_range = wire;
    const std::uint32_t ten = 10;
    std::memcpy(out_of_range.data() + 8, &ten, 4);
    CHECK(corrupt(out_of_range));
    auto descending = wire;
    const std::uint32_t three = 3;
    std::memcpy(descending.data() + 8, &three, 4);  // 1, 4, 3
    CHECK(corrupt(descending));
    auto repeated = wire;
    const std::uint32_t four = 4;
    std::memcpy(repeated.data() + 8, &four, 4);  // 1, 4, 4
    CHECK(corrupt(repeated));
    CHECK(!hd::plausible_wire_bytes(12, n));
    CHECK(hd::plausible_wire_bytes(40, n));
    CHECK(hd::plausible_wire_bytes(32, n));
    CHECK(!hd::plausible_wire_bytes(48, n));
}
