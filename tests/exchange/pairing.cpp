// Which exchange a codec and a schedule make (exchange/pairing.hpp), the cost model automatic weighs them with
// (exchange/exchange_cost.hpp), and what aggregate reports it ran.
#include <catch2/catch.hpp>

#include <cmath>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../compress/helpers.hpp"
#include "../error_text.hpp"
#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/dgc.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/exchange/aggregate.hpp"

namespace hc = hitch::compress;
namespace ar = hitch::allreduce;
using hc::aggregation_path;
using hc::exchange_kind;
using hc::exchange_shape;
using hitch::comm::local;

TEST_CASE("pairing: each path takes the exchanges of the table, and only those", "[compress][pairing]") {
    using enum exchange_shape;
    for (const exchange_shape s : {none, ring, recursive_doubling, halving_doubling, hierarchical, automatic}) {
        INFO(hc::name(s));
        CHECK(hc::exchange_for(aggregation_path::allreduce, s) == exchange_kind::allreduce);
        CHECK(hc::exchange_for(aggregation_path::low_rank, s) == exchange_kind::low_rank);
    }
    const auto ring_codec = [](exchange_shape s) { return hc::exchange_for(aggregation_path::compressed_ring, s); };
    CHECK(ring_codec(ring) == exchange_kind::compressed_ring);
    CHECK(ring_codec(halving_doubling) == exchange_kind::compressed_halving_doubling);
    CHECK(ring_codec(hierarchical) == exchange_kind::compressed_hierarchical);
    CHECK_FALSE(ring_codec(recursive_doubling).has_value());
    CHECK_FALSE(ring_codec(none).has_value());
    const auto sparse = [](exchange_shape s) { return hc::exchange_for(aggregation_path::allgather, s); };
    CHECK(sparse(ring) == exchange_kind::allgather_ring);
    CHECK(sparse(recursive_doubling) == exchange_kind::sparse_recursive_doubling);
    CHECK(sparse(hierarchical) == exchange_kind::sparse_hierarchical);
    CHECK_FALSE(sparse(halving_doubling).has_value());
    CHECK_FALSE(sparse(none).has_value());

    STATIC_REQUIRE(hc::exchange_shape_of<ar::rabenseifner> == halving_doubling);
    STATIC_REQUIRE(hc::exchange_shape_of<ar::hierarchical<>> == hierarchical);
    STATIC_REQUIRE(hc::exchange_shape_of<ar::binary_tree> == none);
    STATIC_REQUIRE(hc::schedule_pairing<hc::topk, ar::recursive_doubling>::offered);
    STATIC_REQUIRE(hc::schedule_pairing<hc::error_feedback<hc::onebit>, ar::rabenseifner>::offered);
    STATIC_REQUIRE(hc::schedule_pairing<hc::fp16, ar::binary_tree>::offered);  // additive: every schedule
}

TEST_CASE("pairing: a refused pairing chosen at run time names both and what goes with the codec",
          "[compress][pairing]") {
    using Catch::Matchers::Contains;
    REQUIRE_THROWS_MATCHES(
        hc::require_pairing(aggregation_path::allgather, exchange_shape::none, "topk", "binary_tree"),
        hitch::config_error, Catch::Matchers::Predicate<hitch::config_error>([](const hitch::config_error& e) {
            const std::string w = e.what();
            return w.find("topk does not go with the schedule binary_tree") != std::string::npos &&
                   w.find("ring, recursive_doubling, hierarchical or automatic") != std::string::npos;
        }));
    REQUIRE_THROWS_WITH(hc::require_pairing(aggregation_path::compressed_ring, exchange_shape::recursive_doubling,
                                            "qsgd", "recursive_doubling"),
                        Contains("qsgd goes with ring, rabenseifner, hierarchical or automatic"));
    REQUIRE_NOTHROW(hc::require_pairing(aggregation_path::allreduce, exchange_shape::none, "fp16", "binary_tree"));
}

TEST_CASE("exchange cost: the formulas of the file comment, by hand", "[compress][pairing]") {
    const ar::level_shape flat8 = ar::level_shape::one_node(8);
    const double n = 1e6, m = 8e4;  // density 1%
    const hitch::cost_estimate ag = hc::exchange_cost(exchange_kind::allgather_ring, flat8, 1000000, m);
    CHECK(ag.latency_terms == 7);
    CHECK(ag.bandwidth_bytes == Approx(7 * m));
    // Unions of 1, 2 and 4 independent selections of density 1%: 8 bytes an entry.
    const hitch::cost_estimate rd = hc::exchange_cost(exchange_kind::sparse_recursive_doubling, flat8, 1000000, m);
    const double want = 8 * n * (0.01 + (1 - 0.99 * 0.99) + (1 - std::pow(0.99, 4)));
    CHECK(rd.latency_terms == 3);
    CHECK(rd.bandwidth_bytes == Approx(want));
    // At 30% the union of two passes half the bucket: from round 1 on, the dense 4 n.
    const hitch::cost_estimate dense =
        hc::exchange_cost(exchange_kind::sparse_recursive_doubling, flat8, 1000000, 0.3 * 8 * n);
    CHECK(dense.bandwidth_bytes == Approx(8 * n * 0.3 + 4 * n + 4 * n));
    const hitch::cost_estimate cr = hc::exchange_cost(exchange_kind::compressed_ring, flat8, 1000000, m);
    CHECK(cr.latency_terms == 14);
    CHECK(cr.bandwidth_bytes == Approx(2.0 * 7 / 8 * m));
    const hitch::cost_estimate hd = hc::exchange_cost(exchange_kind::compressed_halving_doubling, flat8, 1000000, m);
    CHECK(hd.latency_terms == 6);
    CHECK(hd.bandwidth_bytes == Approx(2.0 * 7 / 8 * m));
    // 6 ranks: 4 in the halving and doubling, 2 folded in and out (two rounds of the whole message more).
    const hitch::cost_estimate hd6 =
        hc::exchange_cost(exchange_kind::compressed_halving_doubling, ar::level_shape::one_node(6), 1000000, m);
    CHECK(hd6.latency_terms == 6);
    CHECK(hd6.bandwidth_bytes == Approx(2.0 * 3 / 4 * m + 2 * m));
    // Ranks on two nodes: a flat exchange pays the between-node constants for every round.
    const hitch::cost_estimate across = hc::exchange_cost(exchange_kind::allgather_ring, {8, 2, 4}, 1000000, m);
    CHECK(across.latency_terms == 0);
    CHECK(across.inter_latency_terms == 7);
}

TEST_CASE("exchange cost: automatic's choice follows density, ranks and levels", "[compress][pairing]") {
    hitch::cost_constants k;
    k.alpha_s = 5e-6;
    k.beta_s_per_byte = 1e-10;
    const std::size_t n = 1 << 22;
    const auto m = [&](double d) { return d * 8.0 * static_cast<double>(n); };
    // Sparse and many ranks: merging beats forwarding every message.
    CHECK(hc::cheapest_exchange(aggregation_path::allgather, ar::level_shape::one_node(16), n, m(0.001), k) ==
          exchange_kind::sparse_recursive_doubling);
    // Two ranks: both exchanges send one message; the ring comes first.
    CHECK(hc::cheapest_exchange(aggregation_path::allgather, ar::level_shape::one_node(2), n, m(0.01), k) ==
          exchange_kind::allgather_ring);
    // Ring codecs: the same bytes, fewer rounds.
    CHECK(hc::cheapest_exchange(aggregation_path::compressed_ring, ar::level_shape::one_node(16), n, n / 4.0, k) ==
          exchange_kind::compressed_halving_doubling);
    // One level: never the hierarchical exchanges, however slow the network.
    hitch::cost_constants slow = k;
    slow.inter_alpha_s = 1e-2;
    slow.inter_beta_s_per_byte = 1e-7;
    CHECK(hc::cheapest_exchange(aggregation_path::allgather, ar::level_shape::one_node(16), n, m(0.01), slow) !=
          exchange_kind::sparse_hierarchical);
    // Two levels with a slow network between nodes: sum inside the nodes first.
    CHECK(hc::cheapest_exchange(aggregation_path::compressed_ring, {16, 4, 4}, n, n / 4.0, slow) ==
          exchange_kind::compressed_hierarchical);
    CHECK(hc::cheapest_exchange(aggregation_path::allgather, {16, 4, 4}, n, m(0.01), slow) ==
          exchange_kind::sparse_hierarchical);
}

namespace {

/// A schedule that says its shape at run time (as the trainers' schedule chosen by name).
struct shape_by_value {
    struct options_type {
        void validate() const {}
        friend bool operator==(const options_type&, const options_type&) = default;
    };
    static constexpr std::string_view name = "shape_by_value";
    hc::exchange_shape shape = hc::exchange_shape::ring;
    [[nodiscard]] const options_type& options() const noexcept { return o; }
    [[nodiscard]] hitch::cost_estimate cost(int p, std::size_t n, const hitch::cost_constants& k) const {
        return ar::ring{}.cost(p, n, k);
    }
    template <class C, class T>
    void run(ar::transport<C>& t, std::span<T> data, ar::reduce_op op) const {
        ar::ring{}.run(t, data, op);
    }
    [[nodiscard]] hc::exchange_shape exchange_shape() const noexcept { return shape; }
    [[nodiscard]] std::string_view chosen() const noexcept { return hc::name(shape); }
    options_type o{};
};

template <class Codec, class Schedule>
exchange_kind ran(local& comm, const Codec& codec, const Schedule& schedule) {
    ar::group g(comm);
    std::vector<float> bucket = hitch_test::gradients(4099, 10 + static_cast<std::uint64_t>(comm.rank()));
    auto state = hc::make_aggregation_state(codec, bucket.size());
    return hc::aggregate(g, codec, state, hitch::tensor_view<float>(bucket), schedule).exchange;
}

}  // namespace

TEST_CASE("aggregate: the schedule shapes the exchange, and the stats say which ran", "[compress][pairing]") {
    const hc::error_feedback<hc::topk> topk(hc::topk({.density = 0.01}));
    const hc::qsgd qsgd;
    // Each rank's exchanges are checked on this thread: Catch's assertions are not for several threads at once.
    const auto per_rank = hitch::comm::run_local(4, [&](local& comm) {
        return std::vector<exchange_kind>{ran(comm, topk, ar::ring{}),
                                          ran(comm, topk, ar::recursive_doubling{}),
                                          ran(comm, topk, ar::hierarchical<>{}),
                                          ran(comm, qsgd, ar::ring{}),
                                          ran(comm, qsgd, ar::rabenseifner{}),
                                          ran(comm, qsgd, ar::hierarchical<>{}),
                                          ran(comm, hc::fp16{}, ar::binary_tree{}),
                                          ran(comm, topk, shape_by_value{exchange_shape::recursive_doubling})};
    });
    const std::vector<exchange_kind> want{exchange_kind::allgather_ring,
                                          exchange_kind::sparse_recursive_doubling,
                                          exchange_kind::sparse_hierarchical,
                                          exchange_kind::compressed_ring,
                                          exchange_kind::compressed_halving_doubling,
                                          exchange_kind::compressed_hierarchical,
                                          exchange_kind::allreduce,
                                          exchange_kind::sparse_recursive_doubling};
    for (const auto& got : per_rank) CHECK(got == want);
}

TEST_CASE("aggregate: automatic runs the exchange the model says is cheapest, on every rank", "[compress][pairing]") {
    hitch::cost_constants k;
    k.alpha_s = 5e-6;
    k.beta_s_per_byte = 1e-10;
    ar::automatic::options_type o;
    o.constants = k;
    const ar::automatic schedule(o);
    for (const double density : {0.001, 0.3}) {
        const hc::topk codec({.density = density});
        for (const int p : {2, 5, 8}) {
            const exchange_kind want =
                hc::cheapest_exchange(aggregation_path::allgather, ar::level_shape::one_node(p), 4099,
                                      static_cast<double>(codec.max_message_bytes(4099)), k);
            INFO("density " << density << ", " << p << " ranks: " << hc::name(want));
            // Each rank's answer is checked on this thread: Catch's assertions are not for several threads at once.
            for (const exchange_kind got :
                 hitch::comm::run_local(p, [&](local& comm) { return ran(comm, codec, schedule); }))
                CHECK(got == want);
        }
    }
}

TEST_CASE("aggregate: a pairing refused at run time throws before anything is sent", "[compress][pairing]") {
    using Catch::Matchers::Contains;
    // What each rank's call threw, checked on this thread (Catch's assertions are for one thread at a time); an
    // error of another type than config_error propagates and fails the case.
    const auto refusals = hitch::comm::run_local(2, [&](local& comm) {
        return std::pair{hitch_test::error_text(
                             [&] { (void)ran(comm, hc::qsgd{}, shape_by_value{exchange_shape::recursive_doubling}); }),
                         hitch_test::error_text<hitch::config_error>(
                             [&] { (void)ran(comm, hc::topk{}, shape_by_value{exchange_shape::none}); })};
    });
    for (const auto& [mismatched, none] : refusals) {
        CHECK_THAT(mismatched, Contains("the codec qsgd does not go with the schedule recursive_doubling"));
        CHECK(none != "no error");
    }
}
