// Every schedule against the serial reference over comm::local: world sizes {1,2,3,4,5,7,8} x element counts
// {0,1,2,7,1000,(1<<20)+3} x {float, double, half, bfloat16} x {sum, average, min, max}, on both transport paths
// (messages, and the direct path that reads peers' memory). Inputs are small integers, so every order of
// combination must give the reference's exact bytes; a second sweep with full-mantissa inputs checks that every
// rank ends with identical bytes and stays within rounding of the reference.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/local.hpp"
#include "reference.hpp"

using namespace hitch::allreduce;
using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;

namespace {

const std::array<int, 7> world_sizes{1, 2, 3, 4, 5, 7, 8};
const std::array<std::size_t, 5> small_counts{0, 1, 2, 7, 1000};
constexpr std::size_t large_count = (std::size_t{1} << 20) + 3;
const std::array<reduce_op, 4> all_ops{reduce_op::sum, reduce_op::average, reduce_op::min, reduce_op::max};

template <class T>
auto exact(std::uint32_t salt) {
    return [salt](int r, std::size_t i) { return hitch_test::exact_value<T>(r, i, salt); };
}

template <class T>
std::string type_name() {
    return std::string(hitch::name(hitch::dtype_of<T>()));
}

/// One call of `schedule`, checked against the reference on this rank. Collective.
template <class T, class Schedule, class C>
void check_call(group<C>& g, const Schedule& schedule, const call_options& options, std::size_t n, reduce_op op,
                const std::vector<T>& want, std::uint32_t salt) {
    std::vector<T> data = hitch_test::make_input<T>(g.rank(), n, exact<T>(salt));
    allreduce(g, hitch::view(data), op, schedule, options);
    const long bad = hitch_test::first_difference(std::span<const T>(data), std::span<const T>(want));
    if (bad >= 0) {
        const auto i = static_cast<std::size_t>(bad);
        expect(false, std::string(Schedule::name) + " " + type_name<T>() + " " + std::string(name(op)) + " n=" +
                          std::to_string(n) + " p=" + std::to_string(g.size()) + " rank " + std::to_string(g.rank()) +
                          (options.shared_memory ? " direct" : " messages") + ": element " + std::to_string(i) +
                          " is " + hitch_test::show(data[i]) + ", reference " + hitch_test::show(want[i]));
    }
}

template <class T>
std::map<std::tuple<std::size_t, int>, std::vector<T>> references(int p, std::span<const std::size_t> counts,
                                                                  std::uint32_t salt) {
    std::map<std::tuple<std::size_t, int>, std::vector<T>> refs;
    for (std::size_t n : counts)
        for (reduce_op op : all_ops)
            refs[{n, static_cast<int>(op)}] = hitch_test::reference<T>(p, n, op, exact<T>(salt));
    return refs;
}

/// Small counts x every type x every op, for every world size, on both paths.
template <class Schedule>
void sweep_small(const Schedule& schedule) {
    for (int p : world_sizes) {
        const std::uint32_t salt = static_cast<std::uint32_t>(p) * 7919U;
        const auto rf = references<float>(p, small_counts, salt);
        const auto rd = references<double>(p, small_counts, salt);
        const auto rh = references<hitch::half>(p, small_counts, salt);
        const auto rb = references<hitch::bfloat16>(p, small_counts, salt);
        for (bool direct : {true, false}) {
            INFO(Schedule::name << ", p = " << p << (direct ? ", direct path" : ", message path"));
            REQUIRE_NOTHROW(run_local(p, [&](local& c) {
                group g(c);
                call_options options;
                options.shared_memory = direct;
                for (std::size_t n : small_counts)
                    for (reduce_op op : all_ops) {
                        const std::tuple<std::size_t, int> key{n, static_cast<int>(op)};
                        check_call<float>(g, schedule, options, n, op, rf.at(key), salt);
                        check_call<double>(g, schedule, options, n, op, rd.at(key), salt);
                        check_call<hitch::half>(g, schedule, options, n, op, rh.at(key), salt);
                        check_call<hitch::bfloat16>(g, schedule, options, n, op, rb.at(key), salt);
                    }
            }));
        }
    }
}

/// (1 << 20) + 3 elements: for world sizes `ps`, float on both paths and the 16-bit types on one.
template <class Schedule>
void sweep_large(const Schedule& schedule, std::initializer_list<int> ps) {
    const std::array<std::size_t, 1> counts{large_count};
    for (int p : ps) {
        const std::uint32_t salt = static_cast<std::uint32_t>(p) * 104729U;
        const auto rf = references<float>(p, counts, salt);
        const auto rh = references<hitch::half>(p, counts, salt);
        const auto rb = references<hitch::bfloat16>(p, counts, salt);
        const auto rd = references<double>(p, counts, salt);
        for (bool direct : {true, false}) {
            INFO(Schedule::name << ", p = " << p << ", n = " << large_count << (direct ? ", direct" : ", messages"));
            REQUIRE_NOTHROW(run_local(p, [&](local& c) {
                group g(c);
                call_options options;
                options.shared_memory = direct;
                const auto key = [](reduce_op op) {
                    return std::tuple<std::size_t, int>{large_count, static_cast<int>(op)};
                };
                check_call<float>(g, schedule, options, large_count, reduce_op::sum, rf.at(key(reduce_op::sum)), salt);
                check_call<float>(g, schedule, options, large_count, reduce_op::average, rf.at(key(reduce_op::average)),
                                  salt);
                if (direct) {
                    check_call<hitch::half>(g, schedule, options, large_count, reduce_op::max,
                                            rh.at(key(reduce_op::max)), salt);
                    check_call<double>(g, schedule, options, large_count, reduce_op::min, rd.at(key(reduce_op::min)),
                                       salt);
                } else {
                    check_call<hitch::bfloat16>(g, schedule, options, large_count, reduce_op::average,
                                                rb.at(key(reduce_op::average)), salt);
                }
            }));
        }
    }
}

/// Full-mantissa inputs: every rank must hold the same bytes, within rounding of the reference.
template <class T, class Schedule>
void identical_everywhere(const Schedule& schedule, int p, std::size_t n, reduce_op op, bool direct) {
    const std::uint32_t salt = 0xabcdefU + static_cast<std::uint32_t>(p);
    const auto value = [salt](int r, std::size_t i) { return hitch_test::rough_value<T>(r, i, salt); };
    const auto results = run_local(p, [&](local& c) {
        group g(c);
        call_options options;
        options.shared_memory = direct;
        std::vector<T> data = hitch_test::make_input<T>(c.rank(), n, value);
        allreduce(g, hitch::view(data), op, schedule, options);
        return data;
    });
    INFO(Schedule::name << " " << type_name<T>() << " " << name(op) << " p = " << p << " n = " << n);
    for (int r = 1; r < p; ++r)
        REQUIRE(hitch_test::first_difference(std::span<const T>(results[0]),
                                             std::span<const T>(results[static_cast<std::size_t>(r)])) == -1);
    const std::vector<T> want = hitch_test::reference<T>(p, n, op, value);
    // Each combination rounds once: at most p - 1 roundings of partial sums of magnitude <= p.
    const double unit = std::is_same_v<T, float>         ? 0x1p-24
                        : std::is_same_v<T, double>      ? 0x1p-53
                        : std::is_same_v<T, hitch::half> ? 0x1p-11
                                                         : 0x1p-8;
    const double tolerance = 2.0 * p * p * unit;
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i)
        worst = std::max(worst, std::abs(static_cast<double>(static_cast<float>(results[0][i])) -
                                         static_cast<double>(static_cast<float>(want[i]))));
    CHECK(worst <= tolerance);
}

template <class Schedule>
void identical_sweep(const Schedule& schedule) {
    for (int p : {3, 5, 8})
        for (bool direct : {true, false}) {
            identical_everywhere<float>(schedule, p, 1000, reduce_op::sum, direct);
            identical_everywhere<float>(schedule, p, 4099, reduce_op::average, direct);
            identical_everywhere<hitch::half>(schedule, p, 1000, reduce_op::sum, direct);
            identical_everywhere<hitch::bfloat16>(schedule, p, 777, reduce_op::average, direct);
            identical_everywhere<double>(schedule, p, 1000, reduce_op::min, direct);
        }
}

template <class Schedule>
Schedule tiny_segments(int depth) {
    typename Schedule::options_type o;
    o.segment_bytes = 64;
    o.pipeline_depth = depth;
    return Schedule(o);
}

}  // namespace

TEST_CASE("ring matches the serial reference", "[allreduce][ring]") {
    sweep_small(ring{});
    sweep_small(tiny_segments<ring>(2));
    sweep_large(ring{}, {2, 5, 8});
    identical_sweep(ring{});
}

TEST_CASE("recursive_doubling matches the serial reference", "[allreduce][recursive_doubling]") {
    sweep_small(recursive_doubling{});
    sweep_small(tiny_segments<recursive_doubling>(3));
    sweep_large(recursive_doubling{}, {3, 4});
    identical_sweep(recursive_doubling{});
}

TEST_CASE("rabenseifner matches the serial reference", "[allreduce][rabenseifner]") {
    sweep_small(rabenseifner{});
    sweep_small(tiny_segments<rabenseifner>(2));
    sweep_large(rabenseifner{}, {2, 7});
    identical_sweep(rabenseifner{});
}

TEST_CASE("binary_tree matches the serial reference", "[allreduce][binary_tree]") {
    sweep_small(binary_tree{});
    sweep_small(tiny_segments<binary_tree>(2));
    sweep_large(binary_tree{}, {3, 8});
    identical_sweep(binary_tree{});
}

TEST_CASE("double_binary_tree matches the serial reference", "[allreduce][double_binary_tree]") {
    sweep_small(double_binary_tree{});
    sweep_small(tiny_segments<double_binary_tree>(3));
    sweep_large(double_binary_tree{}, {4, 5});
    identical_sweep(double_binary_tree{});
}

TEST_CASE("hierarchical matches the serial reference", "[allreduce][hierarchical]") {
    sweep_small(hierarchical<>({2}));
    hierarchical<ring, automatic>::options_type three;
    three.ranks_per_group = 3;
    sweep_small(hierarchical<ring, automatic>(three));
    hierarchical<binary_tree, rabenseifner>::options_type four;
    four.ranks_per_group = 4;
    four.intra.segment_bytes = 64;
    four.inter.segment_bytes = 64;
    sweep_small(hierarchical<binary_tree, rabenseifner>(four));
    sweep_large(hierarchical<>({2}), {5});
    identical_sweep(hierarchical<>({2}));
}

TEST_CASE("parameter_server matches the serial reference", "[allreduce][parameter_server]") {
    sweep_small(parameter_server{});
    parameter_server::options_type three;
    three.servers = 3;
    three.segment_bytes = 64;
    sweep_small(parameter_server(three));
    parameter_server::options_type three_large;
    three_large.servers = 3;
    sweep_large(parameter_server(three_large), {4});
    identical_sweep(parameter_server(three));
}

TEST_CASE("automatic matches the serial reference", "[allreduce][automatic]") {
    sweep_small(automatic{});
    sweep_large(automatic{}, {2, 3});
    identical_sweep(automatic{});
}

TEST_CASE("the default schedule is automatic and the default op is sum", "[allreduce]") {
    const auto results = run_local(3, [](local& c) {
        group g(c);
        std::vector<float> v{1.0f * static_cast<float>(c.rank()), 2.0f};
        allreduce(g, hitch::view(v));
        return v;
    });
    for (const auto& v : results) {
        CHECK(v[0] == 3.0f);
        CHECK(v[1] == 6.0f);
    }
}
