// Two levels of network: hierarchical groups by the communicator's node layout (nodes of comm::simulated's topology,
// uneven ones included, and a non-consecutive layout reported by a test communicator) and gives the serial
// reference's results, with only one rank per node sending across nodes, exactly what the leaders' ring sends;
// the two-level cost model against hand computations; automatic with given two-level constants picks the argmin
// of that model, hierarchical where the level between nodes is much slower and a flat schedule where both levels
// are equal; its saved state reads the format of one level.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/agree.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/simulated.hpp"
#include "hitch/core/binary.hpp"
#include "laid_out.hpp"
#include "reference.hpp"

using namespace hitch::allreduce;
using hitch::node_layout;
using hitch::comm::link_model;
using hitch::comm::local;
using hitch::comm::run_local;
using hitch::comm::run_simulated;
using hitch::comm::simulated;
using hitch::comm::simulated_network;
using hitch_test::expect;
using hitch_test::laid_out;
using hitch_test::node_map;

namespace {

template <class T>
auto exact(std::uint32_t salt) {
    return [salt](int r, std::size_t i) { return hitch_test::exact_value<T>(r, i, salt); };
}

/// One call of `schedule` on n elements of T from exact inputs, compared with the serial reference bytes.
template <class T, class Schedule, class C>
void check_exact(group<C>& g, const Schedule& schedule, std::size_t n, reduce_op op, const std::string& where) {
    const auto salt = static_cast<std::uint32_t>(n * 31 + static_cast<std::size_t>(op));
    const std::vector<T> want = hitch_test::reference<T>(g.size(), n, op, exact<T>(salt));
    std::vector<T> data = hitch_test::make_input<T>(g.rank(), n, exact<T>(salt));
    allreduce(g, hitch::view(data), op, schedule);
    const long bad = hitch_test::first_difference(std::span<const T>(data), std::span<const T>(want));
    expect(bad < 0, where + " " + std::string(hitch::name(hitch::dtype_of<T>())) + " " + std::string(name(op)) +
                        " n=" + std::to_string(n) + " rank " + std::to_string(g.rank()) + ": element " +
                        std::to_string(bad) + " differs from the reference");
}

/// Full-mantissa floats: within rounding of the reference (sums of p values in [-1, 1)).
template <class Schedule, class C>
void check_rough(group<C>& g, const Schedule& schedule, std::size_t n, const std::string& where) {
    const auto value = [](int r, std::size_t i) { return hitch_test::rough_value<float>(r, i, 77); };
    const std::vector<float> want = hitch_test::reference<float>(g.size(), n, reduce_op::sum, value);
    std::vector<float> data = hitch_test::make_input<float>(g.rank(), n, value);
    allreduce(g, hitch::view(data), reduce_op::sum, schedule);
    bool close = true;
    for (std::size_t i = 0; i < n; ++i)
        close = close && std::abs(data[i] - want[i]) <= 1e-5f * static_cast<float>(g.size());
    expect(close, where + ": rough floats within rounding of the reference");
}

template <class Schedule, class C>
void check_all(group<C>& g, const Schedule& schedule, const std::string& where) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{40003}})
        for (reduce_op op : {reduce_op::sum, reduce_op::average, reduce_op::max}) {
            check_exact<float>(g, schedule, n, op, where);
            check_exact<double>(g, schedule, n, op, where);
        }
    check_exact<hitch::bfloat16>(g, schedule, 1000, reduce_op::sum, where);
    check_rough(g, schedule, 30011, where);
}

/// Machines of g ranks: a fast fabric inside (1 us, 100 GB/s), a slower nic between (5 us, 10 GB/s).
simulated_network nodes_of(int g) {
    return simulated_network::nodes(g, link_model{1e-6, 1e11}, link_model{5e-6, 1e10});
}

}  // namespace

TEST_CASE("hierarchical by node matches the serial reference on simulated nodes", "[allreduce][levels]") {
    // 2 x 4, 4 x 2, 2-2-1 and 4-2 (uneven), and one rank per node (the inter schedule alone).
    for (const auto& shape : std::vector<std::pair<int, int>>{{8, 4}, {8, 2}, {5, 2}, {6, 4}, {4, 1}}) {
        const int p = shape.first, g = shape.second;  // (lambdas may not capture structured bindings in C++20)
        INFO("p = " << p << ", " << g << " ranks per node");
        REQUIRE_NOTHROW(run_simulated(p, nodes_of(g), [&](simulated& comm) {
            const node_layout layout = comm.node_layout();
            expect(layout.nodes == (p + g - 1) / g, "the topology's nodes");
            group grp(comm);
            const std::string where = "p=" + std::to_string(p) + " g=" + std::to_string(g);
            check_all(grp, hierarchical<>{}, where);
            check_all(grp, hierarchical<ring, rabenseifner>{}, where + " ring/rabenseifner");
        }));
    }
}

TEST_CASE("hierarchical by node on one node runs Intra alone, and on comm::local", "[allreduce][levels]") {
    REQUIRE_NOTHROW(run_simulated(4, nodes_of(4), [](simulated& comm) {
        group g(comm);
        check_all(g, hierarchical<>{}, "one simulated node");
    }));
    REQUIRE_NOTHROW(run_local(5, [](local& comm) {
        group g(comm);
        check_all(g, hierarchical<>{}, "comm::local");
    }));
}

TEST_CASE("hierarchical by node sends across each nic exactly what the leaders' ring sends", "[allreduce][levels]") {
    // The bytes each node's nic carried up in a run of one call and of two (the first call also splits): the
    // difference is one call's traffic, which only the node's leader sends: the ring over the nodes, 2(N-1)/N n.
    constexpr std::size_t n = 3 * 4 * 1024;  // floats: whole ring blocks for 2 and 3 nodes
    for (const auto& shape : std::vector<std::pair<int, int>>{{8, 4}, {8, 2}, {5, 2}, {6, 2}}) {
        const int p = shape.first, g = shape.second;
        const int nodes = (p + g - 1) / g;
        const auto nic_up = [&, p = p, g = g](int calls) {
            const auto report = hitch::comm::simulate(p, nodes_of(g), [&](simulated& comm) {
                group grp(comm);
                call_options o;
                o.check = false;
                std::vector<float> data(n, 1.0f);
                for (int c = 0; c < calls; ++c) allreduce(grp, hitch::view(data), reduce_op::sum, hierarchical<>{}, o);
                expect(data[0] == static_cast<float>(calls == 1 ? p : p * p), "results");
            });
            REQUIRE(report.first_error() == nullptr);
            std::vector<double> out;
            for (const auto& link : report.links)
                if (link.name.find("nic up") != std::string::npos) out.push_back(static_cast<double>(link.bytes));
            return out;
        };
        const auto one = nic_up(1), two = nic_up(2);
        REQUIRE(one.size() == static_cast<std::size_t>(nodes));
        const double leaders_ring = ring{}.cost(nodes, n * sizeof(float)).sent_bytes;
        INFO("p = " << p << ", " << g << " ranks per node");
        for (std::size_t node = 0; node < one.size(); ++node) CHECK(two[node] - one[node] == leaders_ring);
        CHECK(leaders_ring == Approx(2.0 * (nodes - 1) / nodes * n * sizeof(float)));
    }
}

TEST_CASE("hierarchical groups by a non-consecutive node layout", "[allreduce][levels]") {
    // Nodes {0, 2} and {1, 3}; then {0, 3, 5}, {1, 4}, {2} (uneven, one node of one rank).
    for (const std::vector<int>& nodes : {std::vector<int>{0, 1, 0, 1}, std::vector<int>{0, 1, 2, 0, 1, 0}}) {
        const int p = static_cast<int>(nodes.size());
        auto map = std::make_shared<node_map>(nodes);
        const auto cross = run_local(p, [&](local& c) {
            laid_out comm(c.split(0, c.rank()), map);
            const node_layout layout = comm.node_layout();
            expect(layout.node_of_rank == (p == 4 ? std::vector<int>{0, 1, 0, 1} : std::vector<int>{0, 1, 2, 0, 1, 0}),
                   "the layout as reported");
            group g(comm);
            check_all(g, hierarchical<>{}, "custom layout p=" + std::to_string(p));
            // One counted call after the splits: only each node's lowest rank sends across nodes.
            call_options o;
            o.check = false;
            std::vector<float> data(6000, 1.0f);
            comm.barrier();
            map->cross_bytes[static_cast<std::size_t>(c.rank())] = 0;
            comm.barrier();
            allreduce(g, hitch::view(data), reduce_op::sum, hierarchical<>{}, o);
            expect(data[5999] == static_cast<float>(p), "results");
            comm.barrier();
            return map->cross_bytes[static_cast<std::size_t>(c.rank())].load();
        });
        const int node_count = *std::max_element(nodes.begin(), nodes.end()) + 1;
        const double leaders_ring = ring{}.cost(node_count, 6000 * sizeof(float)).sent_bytes;
        for (int r = 0; r < p; ++r) {
            const bool leader =
                std::find(nodes.begin(), nodes.end(), nodes[static_cast<std::size_t>(r)]) - nodes.begin() == r;
            INFO("rank " << r << (leader ? " (leader)" : ""));
            CHECK(static_cast<double>(cross[static_cast<std::size_t>(r)]) == (leader ? leaders_ring : 0.0));
        }
    }
}

TEST_CASE("the two-level cost model against hand computations", "[allreduce][levels][cost]") {
    // Inside a node 1 us and 1 ns/B; between nodes 20 us and 10 ns/B; combining 0.1 ns/B.
    cost_constants k{1e-6, 1e-9, 1e-10, -1, -1};
    k.inter_alpha_s = 20e-6;
    k.inter_beta_s_per_byte = 1e-8;
    const double a = 1e-6, b = 1e-9, c = 1e-10, A = 20e-6, B = 1e-8;
    const double n = 12288;  // below ring's segment: one message per step
    const auto bytes = static_cast<std::size_t>(n);
    // Three nodes of 4, 4 and 2 ranks.
    const node_layout layout{{0, 0, 0, 0, 1, 1, 1, 1, 2, 2}, 3};
    const level_shape shape = level_shape::of(layout);
    CHECK(shape == level_shape{10, 3, 4, false});
    CHECK(shape.two_level());
    CHECK(!level_shape::one_node(10).two_level());
    CHECK(!level_shape::of(node_layout{{0, 1, 2}, 3}).two_level());

    // hierarchical<ring, ring>: the ring inside the largest node (4) at intra constants, over 3 leaders at inter.
    const hierarchical<ring, ring> h;
    const double intra = 6 * a + 1.5 * n * b + 0.75 * n * c;
    const double inter = 4 * A + (4.0 / 3.0) * n * B + (2.0 / 3.0) * n * c;
    CHECK(h.cost(layout, bytes, k).seconds(k) == Approx(intra + inter));
    CHECK(cost_on(h, shape, bytes, k).seconds(k) == Approx(intra + inter));
    // One node: the intra schedule alone; one rank per node: the inter schedule alone, at inter constants.
    CHECK(h.cost(node_layout{std::vector<int>(4, 0), 1}, bytes, k).seconds(k) == Approx(intra));
    CHECK(h.cost(4, bytes, k).seconds(k) == Approx(intra));
    CHECK(h.cost(node_layout{{0, 1, 2}, 3}, bytes, k).seconds(k) == Approx(inter));
    // Consecutive groups of 5 (ranks_per_group): 2 groups, costed as nodes.
    hierarchical<ring, ring>::options_type five;
    five.ranks_per_group = 5;
    CHECK(hierarchical<ring, ring>(five).cost(layout, bytes, k).seconds(k) ==
          Approx(8 * a + 1.6 * n * b + 0.8 * n * c + 2 * A + n * B + 0.5 * n * c));

    // A flat ring over the 10 ranks: a chunk crosses between nodes on 3 of every 10 hops (the nodes' ranks are
    // contiguous), so 3/10 of its 18 hops' latency is between nodes; one rank per node sends across at a time, and
    // its bytes go at the between-node beta.
    CHECK(shape.contiguous);
    CHECK(cost_on(ring{}, shape, bytes, k).seconds(k) == Approx(12.6 * a + 5.4 * A + 1.8 * n * B + 0.9 * n * c));
    // Ranks dealt out to the nodes in turn: every hop crosses, and 4 ranks of a node share its nic (upper bound).
    const level_shape turns = level_shape::of(node_layout{{0, 1, 2, 0, 1, 2, 0, 1, 2, 0}, 3});
    CHECK(!turns.contiguous);
    CHECK(cost_on(ring{}, turns, bytes, k).seconds(k) == Approx(18 * A + 4 * 1.8 * n * B + 0.9 * n * c));
    CHECK(cost_on(ring{}, level_shape::one_node(10), bytes, k).seconds(k) ==
          Approx(18 * a + 1.8 * n * b + 0.9 * n * c));
    // Recursive doubling and rabenseifner pair every r with r ^ mask at once. On 2 nodes of 4 ranks numbered in
    // blocks masks 1 and 2 stay inside the nodes; in the round of mask 4 the 4 ranks of a node cross through its
    // nic together, 4 times a message's bytes. Rabenseifner's far round carries the large halves: n/2 each way.
    const level_shape blocks = level_shape::of(node_layout{{0, 0, 0, 0, 1, 1, 1, 1}, 2});
    CHECK(blocks.blocks);
    CHECK(cost_on(recursive_doubling{}, blocks, bytes, k).seconds(k) ==
          Approx(2 * (a + n * b) + (A + 4 * n * B) + 3 * n * c));
    CHECK(cost_on(rabenseifner{}, blocks, bytes, k).seconds(k) ==
          Approx(4 * a + 0.75 * n * b + 2 * A + 4 * n * B + 0.875 * n * c));
    // Nodes not in blocks (ranks dealt out in turn): every round counted across, shared by 4, an upper bound; the
    // 10 ranks above the same, recursive doubling's fold in and out included (5 rounds).
    const level_shape dealt = level_shape::of(node_layout{{0, 1, 0, 1, 0, 1, 0, 1}, 2});
    CHECK(!dealt.blocks);
    CHECK(!dealt.contiguous);
    CHECK(cost_on(recursive_doubling{}, dealt, bytes, k).seconds(k) == Approx(3 * (A + 4 * n * B) + 3 * n * c));
    CHECK(cost_on(recursive_doubling{}, shape, bytes, k).seconds(k) == Approx(5 * (A + 4 * n * B) + 4 * n * c));
    // One rank a node: every round crosses from one rank, as before.
    CHECK(cost_on(recursive_doubling{}, level_shape::of(node_layout{{0, 1, 2, 3}, 4}), bytes, k).seconds(k) ==
          Approx(2 * (A + n * B) + 2 * n * c));
    // Constants of one level (inter 0): the same seconds whatever the layout.
    const cost_constants flat{1e-6, 1e-9, 1e-10, -1, -1};
    CHECK(cost_on(ring{}, shape, bytes, flat).seconds(flat) == Approx(ring{}.cost(10, bytes, flat).seconds(flat)));
    CHECK(flat.between_alpha_s() == 1e-6);
    CHECK(flat.between_beta_s_per_byte() == 1e-9);
    // Out-of-range inter constants are refused, naming the field.
    cost_constants bad = k;
    bad.inter_beta_s_per_byte = -1;
    CHECK_THROWS_WITH(bad.validate(), Catch::Contains("inter_beta_s_per_byte"));
}

namespace {

/// The argmin of the two-level model over automatic's candidates (the first of equally cheap ones, in
/// candidate_names order), computed here: its name and seconds.
std::pair<std::string_view, double> model_argmin(const node_layout& layout, std::size_t n, const cost_constants& k) {
    const level_shape shape = level_shape::of(layout);
    std::vector<std::pair<std::string_view, double>> costs{
        {recursive_doubling::name, cost_on(recursive_doubling{}, shape, n, k).seconds(k)},
        {ring::name, cost_on(ring{}, shape, n, k).seconds(k)},
        {rabenseifner::name, cost_on(rabenseifner{}, shape, n, k).seconds(k)},
        {binary_tree::name, cost_on(binary_tree{}, shape, n, k).seconds(k)},
        {double_binary_tree::name, cost_on(double_binary_tree{}, shape, n, k).seconds(k)},
        {parameter_server::name,
         cost_on(parameter_server(parameter_server::options_type{.servers = 1 << 20}), shape, n, k).seconds(k)}};
    // automatic's two-level candidate: Rabenseifner between the leaders of a power-of-two number of nodes.
    const bool halving = (layout.nodes & (layout.nodes - 1)) == 0;
    if (shape.two_level())
        costs.emplace_back(hierarchical<>::name,
                           halving ? hierarchical<binary_tree, rabenseifner>{}.cost(layout, n, k).seconds(k)
                                   : hierarchical<>{}.cost(layout, n, k).seconds(k));
    auto best = costs.front();
    for (const auto& c : costs)
        if (c.second < best.second) best = c;
    return best;
}

node_layout nodes_layout(int nodes, int g) {
    node_layout out;
    for (int r = 0; r < nodes * g; ++r) out.node_of_rank.push_back(r / g);
    out.nodes = nodes;
    return out;
}

}  // namespace

TEST_CASE("automatic weighs hierarchical by node and picks the two-level model's argmin", "[allreduce][levels]") {
    const automatic a;
    cost_constants equal{2e-6, 1e-10, 5e-11, -1, -1};
    cost_constants slow = equal;
    slow.inter_alpha_s = 50e-6;
    slow.inter_beta_s_per_byte = 1e-8;  // 100x slower between nodes
    const std::size_t big = std::size_t{64} << 20;
    for (const node_layout& layout : {nodes_layout(4, 8), nodes_layout(2, 4), nodes_layout(4, 2)}) {
        INFO(layout.nodes << " nodes of " << layout.node_of_rank.size() / static_cast<std::size_t>(layout.nodes));
        CHECK(a.choose(layout, big, slow) == hierarchical<>::name);
        CHECK(a.choose(layout, big, equal) != hierarchical<>::name);
        for (std::size_t n = 256; n <= big; n *= 4) {
            for (const cost_constants& k : {slow, equal}) {
                const auto [name, seconds] = model_argmin(layout, n, k);
                CHECK(a.choose(layout, n, k) == name);
                CHECK(a.cost(layout, n, k).seconds(k) == Approx(seconds));
            }
        }
    }
    // One level (one node, or a rank per node): hierarchical is no candidate, and the pick is the flat one.
    CHECK(a.choose(nodes_layout(1, 8), big, slow) == a.choose(8, big, slow));
    CHECK(a.choose(nodes_layout(8, 1), big, slow) != hierarchical<>::name);
    // The concept's form (p ranks, no layout) is one node.
    CHECK(a.choose(32, big, slow) == model_argmin(nodes_layout(1, 32), big, slow).first);
}

TEST_CASE("automatic on simulated nodes runs the two-level model's pick with given constants", "[allreduce][levels]") {
    // 4 nodes of 2: the given constants make the nic 100x slower, so 4 MiB goes hierarchical; with equal levels
    // the same call goes flat. Either way the results are the reference's.
    cost_constants equal{2e-6, 1e-10, 5e-11, -1, -1};
    cost_constants slow = equal;
    slow.inter_alpha_s = 50e-6;
    slow.inter_beta_s_per_byte = 1e-8;
    constexpr std::size_t n = std::size_t{1} << 20;  // floats
    for (const cost_constants& k : {slow, equal}) {
        automatic::options_type o;
        o.constants = k;
        const automatic a(o);
        const std::string_view want = a.choose(nodes_layout(4, 2), n * sizeof(float), k);
        CHECK((k == slow) == (want == hierarchical<>::name));
        const auto ran = run_simulated(8, nodes_of(2), [&](simulated& comm) {
            group g(comm);
            std::vector<float> data(n);
            for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<float>((comm.rank() + 1) * (i % 7));
            allreduce(g, hitch::view(data), reduce_op::sum, a);
            bool right = true;
            for (std::size_t i = 0; i < n; ++i) right = right && data[i] == static_cast<float>(36 * (i % 7));
            expect(right, "results");
            const auto r = a.ranking(g.state(), g.size(), n * sizeof(float));
            return r ? std::string(automatic::candidate_names[static_cast<std::size_t>(r->last)]) : std::string();
        });
        for (const std::string& name : ran) CHECK(name == want);
    }
}

TEST_CASE("automatic's state of one level (format 1) loads: inter constants 0, native's times kept",
          "[allreduce][levels][automatic]") {
    std::vector<std::byte> blob;
    {
        hitch::frame_writer f(blob, "HAUT", 1);
        hitch::byte_writer& w = f.payload();
        w.put(std::uint32_t{3});
        for (double v : {2e-6, 3e-10, 4e-10, 1e-6, 2e-10}) w.put(v);
        w.put(std::int32_t{2}).put(std::int32_t{0});
        for (int i = 0; i < automatic_profile::probes; ++i) w.put(i < 2 ? 4096.0 * (1 << (2 * i)) : 0.0);
        for (int c = 0; c < 7; ++c)
            for (int i = 0; i < automatic_profile::probes; ++i) w.put(i < 2 ? 1e-5 * (c + 1) : 0.0);
        f.finish();
    }
    const detail::automatic_state s = detail::decode_automatic_state(blob);
    REQUIRE(s.constants.has_value());
    CHECK(s.constants->alpha_s == 2e-6);
    CHECK(s.constants->native_beta_s_per_byte == 2e-10);
    CHECK(s.constants->inter_alpha_s == 0.0);
    CHECK(s.constants->inter_beta_s_per_byte == 0.0);
    REQUIRE(s.profile.has_value());
    CHECK(s.profile->measured == 2);
    CHECK(s.profile->seconds[5][1] == 1e-5 * 6);
    CHECK(s.profile->seconds[detail::hierarchical_candidate][0] == 0.0);  // not measured
    CHECK(s.profile->seconds[detail::native_candidate_index][0] == 1e-5 * 7);
    // It loads into an automatic, which saves it in the current format with the same content.
    automatic a;
    a.load_state(blob);
    std::vector<std::byte> again;
    a.save_state(again);
    const detail::automatic_state t = detail::decode_automatic_state(again);
    CHECK(*t.constants == *s.constants);
    CHECK(std::memcmp(&*t.profile, &*s.profile, sizeof(automatic_profile)) == 0);
}

TEST_CASE("automatic measures both levels on simulated nodes and times hierarchical",
          "[allreduce][levels][automatic]") {
    // Inside a node 1 us and 100 GB/s, between nodes 5 us and 10 GB/s (nodes_of): half a round trip of one float is
    // alpha + 4 beta of its level; an exchange's per-byte time is at most its level's beta (automatic keeps the
    // fastest of its attempts, and partners start them at different times) and above 0.9 of it.
    automatic::options_type o;
    o.calibration_budget_s = 0.05;  // virtual seconds: a few probe sizes
    const automatic a(o);
    const auto measured = run_simulated(8, nodes_of(4), [&](simulated& comm) {
        group g(comm);
        std::vector<float> data(100000, 1.0f);
        allreduce(g, hitch::view(data), reduce_op::sum, a);
        expect(data[4321] == 8.0f, "sum");
        const auto profile = automatic::measured_profile(g.state());
        expect(profile != nullptr && profile->seconds[detail::hierarchical_candidate][0] > 0,
               "the two-level candidate is timed at the probes");
        return *g.constants();
    });
    for (const cost_constants& k : measured) CHECK(k == measured[0]);
    const cost_constants k = measured[0];
    CHECK(k.alpha_s == Approx(1e-6 + 4 * 1e-11).epsilon(1e-4));
    CHECK(k.inter_alpha_s == Approx(5e-6 + 4 * 1e-10).epsilon(1e-4));
    CHECK(k.beta_s_per_byte <= 1e-11);
    CHECK(k.beta_s_per_byte > 0.9e-11);
    CHECK(k.inter_beta_s_per_byte <= 1e-10);
    CHECK(k.inter_beta_s_per_byte > 0.9e-10);
    // One rank per node: one level, as before.
    const auto flat = run_simulated(4, nodes_of(1), [&](simulated& comm) {
        group g(comm);
        std::vector<float> data(1000, 1.0f);
        allreduce(g, hitch::view(data), reduce_op::sum, automatic(o));
        return *g.constants();
    });
    CHECK(flat[0].inter_alpha_s == 0.0);
    CHECK(flat[0].inter_beta_s_per_byte == 0.0);
}
