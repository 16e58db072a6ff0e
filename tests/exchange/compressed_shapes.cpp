// The compressed halving-doubling and hierarchical exchanges over comm::local with 1 to 8 ranks: bit for bit
// against their serial simulations (onebit and error_feedback<qsgd> with hop residuals, qsgd and terngrad
// without), conservation of inputs and residuals, the bytes each rank sends; hierarchical over interleaved, uneven
// and non-consecutive node layouts, one rank per node (the ring's bits) and one node (the exact sum); mismatched
// bucket sizes, bad layouts, and a rank with NaN (every rank throws, no state changes); double buckets and the mean.
#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

#include "compressed_shapes_suite.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/terngrad.hpp"

namespace hc = hitch::compress;
using hitch::node_layout;
using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::shape;

namespace {

node_layout layout(std::vector<int> node_of_rank) {
    node_layout l;
    l.nodes = 0;
    for (int k : node_of_rank) l.nodes = std::max(l.nodes, k + 1);
    l.node_of_rank = std::move(node_of_rank);
    return l;
}

node_layout singletons(int p) {
    std::vector<int> v;
    for (int r = 0; r < p; ++r) v.push_back(r);
    return layout(v);
}

}  // namespace

TEST_CASE("compressed halving-doubling equals its serial simulation, conserves, and sends what it should",
          "[compress][aggregate][shapes]") {
    for (int p = 1; p <= 8; ++p) {
        for (std::size_t n : {std::size_t{5}, std::size_t{1000}, std::size_t{4099}}) {
            INFO(p << " ranks, " << n << " elements");
            const node_layout none = singletons(p);
            REQUIRE_NOTHROW(run_local(p, [&](local& comm) {
                hitch_test::shape_matches_simulation(comm, shape::halving_doubling, hc::onebit{}, n, none);
                hitch_test::shape_matches_simulation(comm, shape::halving_doubling, hc::qsgd{}, n, none);
                hitch_test::shape_matches_simulation(comm, shape::halving_doubling, hc::terngrad{}, n, none);
                hitch_test::shape_matches_simulation(comm, shape::halving_doubling, hc::error_feedback<hc::qsgd>{}, n,
                                                     none);
            }));
        }
    }
}

TEST_CASE("compressed hierarchical equals its serial simulation over interleaved, uneven and scattered nodes",
          "[compress][aggregate][shapes]") {
    const std::vector<node_layout> layouts = {
        layout({0, 1, 0, 1}),           // {0,2},{1,3}
        layout({0, 0, 1, 1, 2}),        // 2-2-1
        layout({0, 1, 1, 0, 2, 1}),     // {0,3},{1,2,5},{4}
        layout({0, 1, 2, 0, 1, 2, 0}),  // 3-2-2, interleaved
        layout({0, 0, 0, 1, 1, 1, 1, 1}),
        singletons(3),      // one rank per node: the compressed ring
        layout({0, 0, 0}),  // one node: exact
    };
    for (const node_layout& nodes : layouts) {
        const int p = static_cast<int>(nodes.node_of_rank.size());
        for (std::size_t n : {std::size_t{7}, std::size_t{2000}}) {
            INFO(p << " ranks on " << nodes.nodes << " nodes, " << n << " elements");
            REQUIRE_NOTHROW(run_local(p, [&](local& comm) {
                hitch_test::shape_matches_simulation(comm, shape::hierarchical, hc::onebit{}, n, nodes);
                hitch_test::shape_matches_simulation(comm, shape::hierarchical, hc::qsgd{}, n, nodes, false);
                hitch_test::shape_matches_simulation(comm, shape::hierarchical, hc::terngrad{}, n, nodes);
                hitch_test::shape_matches_simulation(comm, shape::hierarchical, hc::error_feedback<hc::qsgd>{}, n,
                                                     nodes, false);
            }));
        }
    }
}

TEST_CASE("compressed hierarchical with one rank per node gives the compressed ring's bits",
          "[compress][aggregate][shapes]") {
    for (int p : {2, 3, 5}) {
        INFO(p << " ranks");
        REQUIRE_NOTHROW(run_local(p, [&](local& comm) {
            hitch::allreduce::group g(comm);
            const hc::onebit codec;
            auto a = hc::make_aggregation_state(codec, 999), b = a;
            for (int t = 0; t < 3; ++t) {
                auto x = hitch_test::data_of(999, t, comm.rank(), false), y = x;
                const auto ring = hc::aggregate_ring(g, codec, a, hitch::tensor_view<float>(x));
                const auto hier =
                    hc::aggregate_compressed_hierarchical(g, codec, b, hitch::tensor_view<float>(y), singletons(p));
                hitch_test::require(hitch_test::same_values(x, y) && a.ring_residual == b.ring_residual,
                                    "hierarchical over singletons equals the ring");
                hitch_test::require(ring.sent_bytes == hier.sent_bytes, "the same bytes as the ring");
            }
        }));
    }
}

TEST_CASE("compressed hierarchical on one node is the exact sum", "[compress][aggregate][shapes]") {
    for (int p = 1; p <= 4; ++p) {
        INFO(p << " ranks");
        REQUIRE_NOTHROW(run_local(p, [&](local& comm) {
            hitch_test::one_node_is_exact(comm, hc::onebit{}, 1001);
            hitch_test::one_node_is_exact(comm, hc::error_feedback<hc::qsgd>{}, 1001);
        }));
    }
}

TEST_CASE("compressed shapes: mismatched sizes, bad layouts and NaN fail on every rank and change no state",
          "[compress][aggregate][shapes][failure]") {
    hitch::comm::local_options quick;
    quick.timeout_s = 20;  // a hang shows as a timeout long before the test's own limit
    for (int p : {2, 3, 4, 5}) {
        INFO(p << " ranks");
        const node_layout none = singletons(p);
        const node_layout two = p == 2   ? layout({0, 1})
                                : p == 3 ? layout({0, 1, 0})
                                : p == 4 ? layout({0, 1, 0, 1})
                                         : layout({0, 0, 1, 1, 0});
        REQUIRE_NOTHROW(run_local(
            p,
            [&](local& comm) {
                for (shape sh : {shape::halving_doubling, shape::hierarchical}) {
                    hitch_test::shape_rejects_mismatched_sizes(comm, sh, hc::onebit{}, two);
                    for (int failing : {0, p - 1}) {
                        hitch_test::shape_failure_changes_nothing(comm, sh, hc::onebit{}, 999, two, failing);
                        hitch_test::shape_failure_changes_nothing(comm, sh, hc::error_feedback<hc::qsgd>{}, 999, two,
                                                                  failing);
                        hitch_test::shape_failure_changes_nothing(comm, sh, hc::terngrad{}, 999, none, failing);
                    }
                }
            },
            quick));
    }
    // A layout that does not fit the group is a config_error naming the field, before any traffic.
    REQUIRE_NOTHROW(run_local(2, [](local& comm) {
        hitch::allreduce::group g(comm);
        const hc::onebit codec;
        auto st = hc::make_aggregation_state(codec, 10);
        std::vector<float> x(10, 1.0f);
        for (const node_layout& bad : {layout({0, 0, 0}), node_layout{{0, 2}, 3}, node_layout{{0, 5}, 2}}) {
            bool threw = false;
            try {
                hc::aggregate_compressed_hierarchical(g, codec, st, hitch::tensor_view<float>(x), bad);
            } catch (const hitch::config_error& e) {
                threw = std::string(e.what()).find("nodes.") != std::string::npos;
            }
            hitch_test::require(threw, "a bad layout is a config_error naming nodes.*");
        }
    }));
}

TEST_CASE("compressed shapes: a double bucket and the mean give the float bucket's sum, converted and divided",
          "[compress][aggregate][shapes]") {
    REQUIRE_NOTHROW(run_local(3, [](local& comm) {
        hitch::allreduce::group g(comm);
        const hc::error_feedback<hc::qsgd> codec;
        const node_layout nodes = layout({0, 1, 0});
        for (shape sh : {shape::halving_doubling, shape::hierarchical}) {
            auto sf = hc::make_aggregation_state(codec, 777), sd = sf, sm = sf;
            for (int t = 0; t < 2; ++t) {
                auto f = hitch_test::data_of(777, t, comm.rank(), false), m = f;
                std::vector<double> d(f.begin(), f.end());
                hitch_test::run_shape(sh, g, codec, sf, f, nodes);
                hitch_test::run_shape(sh, g, codec, sd, d, nodes);
                hc::aggregate_options mean;
                mean.average = true;
                if (sh == shape::halving_doubling)
                    hc::aggregate_compressed_halving_doubling(g, codec, sm, hitch::tensor_view<float>(m), mean);
                else
                    hc::aggregate_compressed_hierarchical(g, codec, sm, hitch::tensor_view<float>(m), nodes, mean);
                for (std::size_t i = 0; i < f.size(); ++i) {
                    hitch_test::require(d[i] == static_cast<double>(f[i]), "double bucket equals the float one");
                    hitch_test::require(m[i] == f[i] * (1.0f / 3.0f), "the mean is the sum divided by p");
                }
            }
        }
    }));
}
