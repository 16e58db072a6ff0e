// compress::aggregate over comm::mpi (run under mpiexec with 2 and 3 processes): every path against its reference.
#include <catch2/catch.hpp>

#include <vector>

#include "../compress/codecs.hpp"
#include "aggregate_suite.hpp"
#include "hitch/allreduce/native.hpp"
#include "hitch/comm/mpi.hpp"

namespace hc = hitch::compress;

TEST_CASE("aggregate over MPI: all-gather path equals decode-then-sum for every codec", "[compress][aggregate][mpi]") {
    hitch::comm::mpi comm;
    hitch_test::for_each_codec([&](const auto& codec) {
        using codec_t = std::remove_cvref_t<decltype(codec)>;
        if constexpr (!std::is_same_v<codec_t, hc::powersgd>) {
            INFO(codec_t::name);
            REQUIRE_NOTHROW(hitch_test::allgather_equals_reference(comm, codec, 1031));
        }
    });
}

TEST_CASE("aggregate over MPI: all-reduce, low-rank and compressed-ring paths equal their references",
          "[compress][aggregate][mpi]") {
    hitch::comm::mpi comm;
    REQUIRE_NOTHROW(hitch_test::allreduce_equals_reference(comm, hc::fp16{}, 1000, 0x1p-11));
    REQUIRE_NOTHROW(hitch_test::allreduce_equals_reference(comm, hc::bf16{}, 1000, 0x1p-8));
    REQUIRE_NOTHROW(hitch_test::allreduce_equals_reference(comm, hc::none{}, 1000, 0x1p-24));
    REQUIRE_NOTHROW(hitch_test::allreduce_equals_reference(comm, hc::randomk({.density = 0.1}), 1000, 0x1p-24));
    const std::vector<hc::matrix_shape> shapes = {{40, 24}, {16, 1}, {30, 30}};
    REQUIRE_NOTHROW(hitch_test::low_rank_equals_reference(comm, hc::powersgd({.rank = 2}), shapes, 40 * 24 + 16 + 900));
    const auto max_bound = hitch_test::max_abs_bound;
    const auto qsgd_bound = hitch_test::qsgd_bound(512, 7);
    REQUIRE_NOTHROW(hitch_test::ring_matches_references(comm, hc::onebit{}, 2000, max_bound));
    REQUIRE_NOTHROW(hitch_test::ring_matches_references(comm, hc::qsgd{}, 2000, qsgd_bound));
    REQUIRE_NOTHROW(hitch_test::ring_matches_references(comm, hc::terngrad{}, 2000, max_bound));
    REQUIRE_NOTHROW(hitch_test::ring_matches_references(comm, hc::error_feedback<hc::onebit>{}, 2000, max_bound));
}

TEST_CASE("aggregate over MPI: a rank with NaN stops every rank", "[compress][aggregate][mpi][failure]") {
    hitch::comm::mpi comm;
    auto ef_residual = [](const auto& st) { return st.codec.residual; };
    REQUIRE_NOTHROW(hitch_test::failure_reaches_every_rank(comm, hc::error_feedback<hc::onebit>{}, 999, ef_residual));
    REQUIRE_NOTHROW(hitch_test::failure_reaches_every_rank(
        comm, hc::error_feedback<hc::topk>(hc::topk({.density = 0.05})), 999, ef_residual));
    REQUIRE_NOTHROW(hitch_test::failure_reaches_every_rank(comm, hc::error_feedback<hc::bf16>{}, 999, ef_residual));
}
