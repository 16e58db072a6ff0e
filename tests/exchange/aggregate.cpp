// compress::aggregate over comm::local with 1 to 8 ranks: every path against its reference (decode-then-sum,
// the serial ring, PowerSGD's primitives), the ring's conservation and bound, failures on one rank, mismatched
// bucket sizes.
#include <catch2/catch.hpp>

#include <vector>

#include "../compress/codecs.hpp"
#include "aggregate_suite.hpp"
#include "hitch/comm/local.hpp"

namespace hc = hitch::compress;
using hitch::comm::local;
using hitch::comm::run_local;

using hitch_test::max_abs_bound;
using hitch_test::qsgd_bound;

TEST_CASE("aggregate: the all-gather path equals decode-then-sum for every codec, 1 to 8 ranks",
          "[compress][aggregate]") {
    for (int p = 1; p <= 8; ++p) {
        hitch_test::for_each_codec([&](const auto& codec) {
            using codec_t = std::remove_cvref_t<decltype(codec)>;
            if constexpr (!std::is_same_v<codec_t, hc::powersgd>) {  // powersgd's message needs one rank's P
                INFO(codec_t::name << " on " << p << " ranks");
                REQUIRE_NOTHROW(
                    run_local(p, [&](local& comm) { hitch_test::allgather_equals_reference(comm, codec, 1031); }));
            }
        });
    }
}

TEST_CASE("aggregate: additive codecs through the all-reduce equal decode-then-sum", "[compress][aggregate]") {
    for (int p = 1; p <= 8; ++p) {
        INFO(p << " ranks");
        REQUIRE_NOTHROW(run_local(p, [&](local& comm) {
            hitch_test::allreduce_equals_reference(comm, hc::none{}, 1000, 0x1p-24);
            hitch_test::allreduce_equals_reference(comm, hc::fp16{}, 1000, 0x1p-11);
            hitch_test::allreduce_equals_reference(comm, hc::bf16{}, 1000, 0x1p-8);
            hitch_test::allreduce_equals_reference(comm, hc::randomk({.density = 0.1}), 1000, 0x1p-24);
            hitch_test::allreduce_equals_reference(comm, hc::error_feedback<hc::fp16>{}, 1000, 0x1p-11);
        }));
    }
}

TEST_CASE("aggregate: powersgd's two all-reduces equal its primitives called serially",
          "[compress][aggregate][powersgd]") {
    const std::vector<hc::matrix_shape> shapes = {{40, 24}, {16, 1}, {30, 30}};
    for (int p = 1; p <= 8; ++p) {
        INFO(p << " ranks");
        REQUIRE_NOTHROW(run_local(p, [&](local& comm) {
            hitch_test::low_rank_equals_reference(comm, hc::powersgd({.rank = 2}), shapes, 40 * 24 + 16 + 900);
        }));
    }
}

TEST_CASE("aggregate: the compression-aware ring equals its serial simulation, conserves, and stays within the bound",
          "[compress][aggregate][ring]") {
    for (int p = 1; p <= 8; ++p) {
        for (std::size_t n : {std::size_t{3}, std::size_t{1000}, std::size_t{4099}}) {
            INFO(p << " ranks, " << n << " elements");
            REQUIRE_NOTHROW(run_local(p, [&](local& comm) {
                hitch_test::ring_matches_references(comm, hc::onebit{}, n, max_abs_bound);
                hitch_test::ring_matches_references(comm, hc::qsgd{}, n, qsgd_bound(512, 7));
                hitch_test::ring_matches_references(comm, hc::qsgd({.levels = 3, .group_size = 0}), n,
                                                    qsgd_bound(0, 3));
                hitch_test::ring_matches_references(comm, hc::terngrad{}, n, max_abs_bound);
                hitch_test::ring_matches_references(comm, hc::error_feedback<hc::onebit>{}, n, max_abs_bound);
                hitch_test::ring_matches_references(comm, hc::error_feedback<hc::terngrad>{}, n, max_abs_bound);
            }));
        }
    }
}

TEST_CASE("aggregate: the ring over unbiased quantisers (no residual at the hops) is unbiased",
          "[compress][aggregate][ring][unbiased]") {
    for (int p : {2, 3}) {
        INFO(p << " ranks");
        REQUIRE_NOTHROW(run_local(p, [&](local& comm) {
            hitch_test::ring_is_unbiased(comm, hc::qsgd{}, 300, 400);
            hitch_test::ring_is_unbiased(comm, hc::terngrad{}, 300, 400);
            hitch_test::require(hc::make_aggregation_state(hc::qsgd{}, 300).ring_residual.empty(),
                                "qsgd keeps no ring residual");
            hitch_test::require(!hc::make_aggregation_state(hc::onebit{}, 300).ring_residual.empty(),
                                "onebit keeps one");
        }));
    }
}

TEST_CASE("aggregate: average divides by the number of ranks; half and double buckets", "[compress][aggregate]") {
    REQUIRE_NOTHROW(run_local(3, [](local& comm) {
        hitch::allreduce::group g(comm);
        const hc::error_feedback<hc::threshold> codec(hc::threshold({.tau = 1e-3f}));
        auto a = hc::make_aggregation_state(codec, 500), b = hc::make_aggregation_state(codec, 500);
        auto x = hitch_test::data_of(500, 0, comm.rank(), false), y = x;
        hc::aggregate(g, codec, a, hitch::tensor_view<float>(x));
        hc::aggregate(g, codec, b, hitch::tensor_view<float>(y), hitch::allreduce::automatic{}, {.average = true});
        for (std::size_t i = 0; i < x.size(); ++i) hitch_test::require(y[i] == x[i] * (1.0f / 3.0f), "mean = sum / p");
        // A half bucket through the fp16 all-reduce and a double bucket through the ring.
        std::vector<hitch::half> h(64, hitch::half(0.25f * static_cast<float>(comm.rank() + 1)));
        auto sh = hc::make_aggregation_state(hc::fp16{}, 64);
        hc::aggregate(g, hc::fp16{}, sh, hitch::tensor_view<hitch::half>(h));
        for (auto v : h) hitch_test::require(static_cast<float>(v) == 1.5f, "half bucket sum");
        std::vector<double> d(100, 1.0);
        const hc::onebit ob;
        auto sd = hc::make_aggregation_state(ob, 100);
        hc::aggregate(g, ob, sd, hitch::tensor_view<double>(d));
        for (double v : d) hitch_test::require(v == 3.0, "double bucket through the ring");
    }));
}

TEST_CASE("aggregate: a rank with NaN stops every rank promptly and changes no state, on every path",
          "[compress][aggregate][failure]") {
    auto ef_residual = [](const auto& st) { return st.codec.residual; };
    for (int p : {2, 3}) {
        INFO(p << " ranks");
        hitch::comm::local_options quick;
        quick.timeout_s = 20;  // a hang would show as a timeout long before the test's own limit
        REQUIRE_NOTHROW(run_local(
            p,
            [&](local& comm) {
                hitch_test::failure_reaches_every_rank(
                    comm, hc::error_feedback<hc::threshold>(hc::threshold({.tau = 1e-3f})), 999, ef_residual);
                hitch_test::failure_reaches_every_rank(comm, hc::error_feedback<hc::fp16>{}, 999, ef_residual);
                hitch_test::failure_reaches_every_rank(comm, hc::error_feedback<hc::onebit>{}, 999, ef_residual);
                hitch_test::failure_reaches_every_rank(comm, hc::onebit{}, 999,
                                                       [](const auto& st) { return st.ring_residual; });
                hitch_test::failure_reaches_every_rank(
                    comm, hc::qsgd{}, 999, [](const auto& st) { return std::vector<std::uint64_t>{st.codec.step}; });
                hitch_test::failure_reaches_every_rank(comm, hc::dgc({.final_density = 0.01}), 999,
                                                       [](const auto& st) { return st.codec.v; });
                hitch_test::failure_reaches_every_rank(comm, hc::powersgd{}, 999,
                                                       [](const auto& st) { return st.codec.residual; });
            },
            quick));
    }
}

TEST_CASE("aggregate: ranks with different bucket sizes get mismatch_error, on every path",
          "[compress][aggregate][failure]") {
    auto mismatched = [](const auto& codec) {
        bool all_mismatch = true;
        try {
            run_local(3, [&](local& comm) {
                hitch::allreduce::group g(comm);
                const std::size_t n = comm.rank() == 1 ? 101 : 100;
                auto st = hc::make_aggregation_state(codec, n);
                auto bucket = hitch_test::data_of(n, 0, comm.rank(), false);
                try {
                    hc::aggregate(g, codec, st, hitch::tensor_view<float>(bucket));
                    all_mismatch = false;
                } catch (const hitch::mismatch_error&) {}
            });
        } catch (...) {
            all_mismatch = false;
        }
        return all_mismatch;
    };
    CHECK(mismatched(hc::topk({.density = 0.1})));
    CHECK(mismatched(hc::fp16{}));
    CHECK(mismatched(hc::none{}));
    CHECK(mismatched(hc::onebit{}));
    CHECK(mismatched(hc::randomk({.density = 0.1})));
}

TEST_CASE("aggregate: the aggregation state (codec state and ring residual) saves and loads", "[compress][aggregate]") {
    REQUIRE_NOTHROW(run_local(3, [](local& comm) {
        hitch::allreduce::group g(comm);
        const hc::onebit codec;
        auto a = hc::make_aggregation_state(codec, 777);
        for (int t = 0; t < 2; ++t) {
            auto x = hitch_test::data_of(777, t, comm.rank(), false);
            hc::aggregate(g, codec, a, hitch::tensor_view<float>(x));
        }
        std::vector<std::byte> blob;
        hc::save_state(codec, a, blob);
        auto b = hc::make_aggregation_state(codec, 777);
        hc::load_state(codec, blob, b);
        hitch_test::require(!a.ring_residual.empty() && b.ring_residual == a.ring_residual, "restored");
        // Both continue identically (every rank restored its own state).
        auto x = hitch_test::data_of(777, 5, comm.rank(), false), y = x;
        hc::aggregate(g, codec, a, hitch::tensor_view<float>(x));
        hc::aggregate(g, codec, b, hitch::tensor_view<float>(y));
        hitch_test::require(x == y && a.ring_residual == b.ring_residual, "continues identically");
        auto other = hc::make_aggregation_state(codec, 776);
        bool refused = false;
        try {
            hc::load_state(codec, blob, other);
        } catch (const hitch::corrupt_message_error&) {
            refused = true;
        }
        hitch_test::require(refused, "a blob for another bucket size is refused");
        blob[40] ^= std::byte{1};
        refused = false;
        try {
            hc::load_state(codec, blob, b);
        } catch (const hitch::corrupt_message_error&) {
            refused = true;
        }
        hitch_test::require(refused && b.ring_residual == a.ring_residual, "a damaged blob is refused, state kept");
    }));
}
