// Every schedule and collective on GPU buffers over comm::local, 1 to 4 thread ranks sharing the GPU: against the
// serial reference (inputs whose sums are exact in every order), and bit for bit against the same host collective on
// the same data (full-mantissa inputs): the host schedule on the whole buffer where the call is one piece, on each
// piece of the staging plan where it is pipelined. The direct path over a communicator that carries device memory
// (device_local.hpp), against the host ring. Non-blocking forms, the pinned cache, a rank that never arrives.
// Skips (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "../../allreduce/reference.hpp"
#include "device_local.hpp"
#include "gpu_buffer.hpp"
#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/cuda/allreduce/collectives.cuh"

using namespace hitch::allreduce;
using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;
using hitch_test::gpu_buffer;
namespace ca = hitch::cuda::allreduce;

namespace {

template <class T>
auto exact(std::uint32_t salt) {
    return [salt](int r, std::size_t i) { return hitch_test::exact_value<T>(r, i, salt); };
}
template <class T>
auto rough(std::uint32_t salt) {
    return [salt](int r, std::size_t i) { return hitch_test::rough_value<T>(r, i, salt); };
}

template <class T>
void expect_bytes(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
    const long at = hitch_test::first_difference<T>(got, want);
    expect(at < 0, what + ": first difference at element " + std::to_string(at));
}

ca::device_options chunked(std::size_t chunk, int slots = 3) {
    ca::device_options o;
    o.chunk_bytes = chunk;
    o.slots = slots;
    return o;
}

/// The host collective `run(view)` on each piece the staging plan cuts n elements of T into.
template <class T, class Run>
void per_piece(std::vector<T>& data, const ca::device_options& o, Run&& run) {
    const std::size_t bytes = data.size() * sizeof(T);
    const ca::staging_plan plan = ca::staging_plan::make(bytes, sizeof(T), true, {0, bytes}, {0, bytes}, o);
    for (std::size_t i = 0; i < plan.pieces(); ++i) {
        const ca::staging_piece s = plan.piece(i);
        run(hitch::view(data).subview(s.offset / sizeof(T), s.bytes / sizeof(T)));
    }
}

automatic fixed_automatic() {
    automatic::options_type o;
    o.rerank = false;  // the same size takes the same schedule on every call
    return automatic(o);
}

/// One schedule, one type, one op: exact inputs against the reference; full mantissas against the host schedule.
template <class T, class Schedule>
void allreduce_case(const Schedule& schedule, int p, std::size_t n, reduce_op op, const ca::device_options& o,
                    bool async) {
    INFO(Schedule::name << " p = " << p << " n = " << n << " " << name(op) << " chunk " << o.chunk_bytes
                        << (async ? " async" : ""));
    const auto want = hitch_test::reference<T>(p, n, op, exact<T>(7));
    REQUIRE_NOTHROW(run_local(p, [&](local& c) {
        group g(c);
        ca::set_options(g, o);
        // automatic: the model with default constants, without a calibration per group (the picks still vary
        // with the size, so pieces and whole buffers may take different schedules).
        if constexpr (std::is_same_v<Schedule, automatic>) g.set_constants(hitch::cost_constants{});
        gpu_buffer<T> d(hitch_test::make_input<T>(c.rank(), n, exact<T>(7)));
        if (async)
            allreduce_async(g, d.view(), op, schedule).wait();
        else
            allreduce(g, d.view(), op, schedule);
        expect_bytes(d.download(), want, "against the reference");

        auto host = hitch_test::make_input<T>(c.rank(), n, rough<T>(3));
        gpu_buffer<T> r(host);
        allreduce(g, r.view(), op, schedule);
        per_piece(host, o, [&](hitch::tensor_view<T> piece) { allreduce(g, piece, op, schedule); });
        expect_bytes(r.download(), host, "against the host schedule");
    }));
}

template <class Schedule>
void sweep(const Schedule& schedule) {
    const std::size_t sizes[] = {0, 1, 31, 32, 33, (std::size_t{1} << 20) + 3};
    for (int p : {1, 2, 3, 4})
        for (std::size_t n : sizes) {
            const bool big = n > 1000;
            for (reduce_op op : {reduce_op::sum, reduce_op::average, reduce_op::min, reduce_op::max})
                allreduce_case<float>(schedule, p, n, op, ca::device_options{}, op == reduce_op::max);
            if (big && p != 3) continue;
            allreduce_case<double>(schedule, p, n, reduce_op::average, ca::device_options{}, false);
            allreduce_case<hitch::half>(schedule, p, n, reduce_op::sum, ca::device_options{}, true);
            allreduce_case<hitch::half>(schedule, p, n, reduce_op::min, ca::device_options{}, false);
            allreduce_case<hitch::bfloat16>(schedule, p, n, reduce_op::average, ca::device_options{}, false);
        }
    // Pipelined: many pieces, two and three slots, a last piece shorter than the others.
    for (int p : {2, 3})
        for (int slots : {2, 3}) {
            allreduce_case<float>(schedule, p, 70001, reduce_op::sum, chunked(std::size_t{16} << 10, slots), false);
            allreduce_case<hitch::half>(schedule, p, 70001, reduce_op::average, chunked(std::size_t{16} << 10, slots),
                                        true);
        }
}

}  // namespace

TEST_CASE("ring on GPU buffers", "[cuda][allreduce]") { sweep(ring{}); }
TEST_CASE("recursive_doubling on GPU buffers", "[cuda][allreduce]") { sweep(recursive_doubling{}); }
TEST_CASE("rabenseifner on GPU buffers", "[cuda][allreduce]") { sweep(rabenseifner{}); }
TEST_CASE("binary_tree on GPU buffers", "[cuda][allreduce]") { sweep(binary_tree{}); }
TEST_CASE("double_binary_tree on GPU buffers", "[cuda][allreduce]") { sweep(double_binary_tree{}); }
TEST_CASE("hierarchical on GPU buffers", "[cuda][allreduce]") { sweep(hierarchical<>{}); }
TEST_CASE("parameter_server on GPU buffers", "[cuda][allreduce]") { sweep(parameter_server{}); }
TEST_CASE("automatic on GPU buffers", "[cuda][allreduce]") { sweep(fixed_automatic()); }

TEST_CASE("reduce_scatter, allgather, broadcast and reduce on GPU buffers", "[cuda][allreduce]") {
    for (int p : {1, 2, 3, 4})
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{33}, std::size_t{70001}})
            for (bool async : {false, true}) {
                INFO("p = " << p << " n = " << n << (async ? " async" : ""));
                REQUIRE_NOTHROW(run_local(p, [&](local& c) {
                    group g(c);
                    ca::set_options(g, chunked(std::size_t{16} << 10));  // pieces for broadcast
                    const int root = (p + 1) / 2 % p;
                    // reduce_scatter: the whole buffer as the host leaves it (the block, and the partials).
                    auto rs_host = hitch_test::make_input<float>(c.rank(), n, rough<float>(1));
                    gpu_buffer<float> rs(rs_host);
                    if (async)
                        reduce_scatter_async(g, rs.view(), reduce_op::average).wait();
                    else
                        expect(reduce_scatter(g, rs.view(), reduce_op::average).data() ==
                                   rs.data() + partition(n, p, c.rank()).offset,
                               "reduce_scatter's block");
                    (void)reduce_scatter(g, hitch::view(rs_host), reduce_op::average);
                    expect_bytes(rs.download(), rs_host, "reduce_scatter");
                    // allgather in place
                    std::vector<double> ag_host(n, -1.0);
                    const block own = partition(n, p, c.rank());
                    for (std::size_t i = 0; i < own.count; ++i) ag_host[own.offset + i] = 0.5 * double(own.offset + i);
                    gpu_buffer<double> ag(ag_host);
                    if (async)
                        allgather_async(g, ag.view()).wait();
                    else
                        allgather(g, ag.view());
                    allgather(g, hitch::view(ag_host));
                    expect_bytes(ag.download(), ag_host, "allgather in place");
                    // allgather into: GPU to GPU, host to GPU, GPU to host
                    const std::size_t m = n / 4 + 1;
                    std::vector<std::int32_t> mine(m);
                    for (std::size_t i = 0; i < m; ++i) mine[i] = c.rank() * 1000003 + static_cast<std::int32_t>(i);
                    std::vector<std::int32_t> want(m * static_cast<std::size_t>(p));
                    for (int r = 0; r < p; ++r)
                        for (std::size_t i = 0; i < m; ++i)
                            want[static_cast<std::size_t>(r) * m + i] = r * 1000003 + static_cast<std::int32_t>(i);
                    gpu_buffer<std::int32_t> mine_gpu(mine), all_gpu(want.size());
                    allgather(g, mine_gpu.const_view(), all_gpu.view());
                    expect_bytes(all_gpu.download(), want, "allgather GPU to GPU");
                    gpu_buffer<std::int32_t> all_gpu2(want.size());
                    if (async)
                        allgather_async(g, hitch::tensor_view<const std::int32_t>(mine.data(), m), all_gpu2.view())
                            .wait();
                    else
                        allgather(g, hitch::tensor_view<const std::int32_t>(mine.data(), m), all_gpu2.view());
                    expect_bytes(all_gpu2.download(), want, "allgather host to GPU");
                    std::vector<std::int32_t> all_host(want.size(), -1);
                    allgather(g, mine_gpu.const_view(), hitch::view(all_host));
                    expect_bytes(all_host, want, "allgather GPU to host");
                    // broadcast, tree and chain
                    for (bool chain : {false, true}) {
                        std::vector<hitch::half> bc_want(n);
                        for (std::size_t i = 0; i < n; ++i) bc_want[i] = hitch::half(float(i % 2048) * 0.25f);
                        gpu_buffer<hitch::half> bc(c.rank() == root ? bc_want
                                                                    : std::vector<hitch::half>(n, hitch::half(-1.0f)));
                        if (chain)
                            broadcast(g, bc.view(), root, ring{});
                        else if (async)
                            broadcast_async(g, bc.view(), root).wait();
                        else
                            broadcast(g, bc.view(), root);
                        expect_bytes(bc.download(), bc_want, chain ? "broadcast (ring)" : "broadcast (tree)");
                    }
                    // reduce: the root holds the host's result, the others their own data
                    for (bool chain : {false, true}) {
                        auto rd_host = hitch_test::make_input<float>(c.rank(), n, rough<float>(2));
                        const auto before = rd_host;
                        gpu_buffer<float> rd(rd_host);
                        if (chain) {
                            reduce(g, rd.view(), reduce_op::sum, root, ring{});
                            reduce(g, hitch::view(rd_host), reduce_op::sum, root, ring{});
                        } else {
                            if (async)
                                reduce_async(g, rd.view(), reduce_op::max, root).wait();
                            else
                                reduce(g, rd.view(), reduce_op::max, root);
                            reduce(g, hitch::view(rd_host), reduce_op::max, root);
                        }
                        expect_bytes(rd.download(), rd_host, "reduce");
                        if (c.rank() != root) expect_bytes(rd_host, before, "reduce leaves the others");
                    }
                }));
            }
}

TEST_CASE("several non-blocking calls in flight complete in order, the copies included", "[cuda][allreduce]") {
    REQUIRE_NOTHROW(run_local(3, [&](local& c) {
        group g(c);
        ca::set_options(g, chunked(std::size_t{64} << 10));
        std::vector<std::unique_ptr<gpu_buffer<float>>> buffers;
        std::vector<handle> handles;
        for (int k = 0; k < 6; ++k) {
            const std::size_t n = 1000 + 40000 * static_cast<std::size_t>(k);
            buffers.push_back(std::make_unique<gpu_buffer<float>>(
                hitch_test::make_input<float>(c.rank(), n, exact<float>(static_cast<std::uint32_t>(k)))));
            handles.push_back(allreduce_async(g, buffers.back()->view(), reduce_op::sum, ring{}));
        }
        for (int k = 0; k < 6; ++k) {
            handles[static_cast<std::size_t>(k)].wait();
            const std::size_t n = buffers[static_cast<std::size_t>(k)]->size();
            expect_bytes(
                buffers[static_cast<std::size_t>(k)]->download(),
                hitch_test::reference<float>(3, n, reduce_op::sum, exact<float>(static_cast<std::uint32_t>(k))),
                "call " + std::to_string(k));
        }
    }));
}

TEST_CASE("the group keeps its pinned buffer: one piece pins the buffer, pieces pin their slots", "[cuda][allreduce]") {
    REQUIRE_NOTHROW(run_local(2, [&](local& c) {
        group g(c);
        expect(ca::pinned_bytes(g) == 0, "nothing pinned before the first call");
        gpu_buffer<float> a(hitch_test::make_input<float>(c.rank(), 10000, exact<float>(1)));
        allreduce(g, a.view(), reduce_op::sum, ring{});
        expect(ca::pinned_bytes(g) == 40000, "one piece: the buffer");
        allreduce(g, a.view(), reduce_op::sum, ring{});
        expect(ca::pinned_bytes(g) == 40000, "reused");
        ca::set_options(g, chunked(std::size_t{4} << 10, 2));
        gpu_buffer<float> big(hitch_test::make_input<float>(c.rank(), 100000, exact<float>(2)));
        allreduce(g, big.view(), reduce_op::sum, ring{});
        expect(ca::pinned_bytes(g) == 40000, "two slots of 4 KiB fit in what is held");
        expect_bytes(big.download(), hitch_test::reference<float>(2, 100000, reduce_op::sum, exact<float>(2)),
                     "pipelined through a held buffer");
    }));
}

TEST_CASE("the direct path over a communicator that carries device memory gives the host ring's bits",
          "[cuda][allreduce]") {
    for (int p : {2, 3, 4})
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{33}, std::size_t{300007}})
            for (bool staged : {false, true}) {
                INFO("p = " << p << " n = " << n << (staged ? " staged" : " direct"));
                REQUIRE_NOTHROW(run_local(p, [&](local& c) {
                    hitch_test::device_local carrier(c.split(0, c.rank()));
                    group<hitch_test::device_local> g(carrier);
                    group<local> h(c);
                    ca::device_options o;
                    o.path = staged ? ca::device_path::staged : ca::device_path::automatic;
                    o.segment_bytes = 64 << 10;  // several messages per chunk
                    ca::set_options(g, o);
                    const ca::path_choice choice = ca::explain_allreduce(g, "ring");
                    expect(choice.direct == !staged, "the path: " + choice.reason);
                    expect(ca::explain_allreduce(g, "rabenseifner").direct == false, "no direct rabenseifner");
                    for (reduce_op op : {reduce_op::sum, reduce_op::average, reduce_op::min}) {
                        auto host = hitch_test::make_input<float>(c.rank(), n, rough<float>(4));
                        gpu_buffer<float> d(host);
                        allreduce(g, d.view(), op, ring{});
                        allreduce(h, hitch::view(host), op, ring{});
                        expect_bytes(d.download(), host, std::string("allreduce ") + std::string(name(op)));
                    }
                    auto half_host = hitch_test::make_input<hitch::half>(c.rank(), n, rough<hitch::half>(5));
                    gpu_buffer<hitch::half> hd(half_host);
                    allreduce_async(g, hd.view(), reduce_op::average, ring{}).wait();
                    allreduce(h, hitch::view(half_host), reduce_op::average, ring{});
                    expect_bytes(hd.download(), half_host, "allreduce half");
                    auto rs_host = hitch_test::make_input<double>(c.rank(), n, rough<double>(6));
                    gpu_buffer<double> rs(rs_host);
                    (void)reduce_scatter(g, rs.view(), reduce_op::sum);
                    (void)reduce_scatter(h, hitch::view(rs_host), reduce_op::sum);
                    expect_bytes(rs.download(), rs_host, "reduce_scatter");
                    std::vector<float> ag_host(n, 0.0f);
                    const block own = partition(n, p, c.rank());
                    for (std::size_t i = 0; i < own.count; ++i) ag_host[own.offset + i] = float(own.offset + i);
                    gpu_buffer<float> ag(ag_host);
                    allgather(g, ag.view());
                    allgather(h, hitch::view(ag_host));
                    expect_bytes(ag.download(), ag_host, "allgather");
                    std::vector<float> mine(n / 7 + 1, float(c.rank()));
                    gpu_buffer<float> all(mine.size() * static_cast<std::size_t>(p));
                    allgather(g, hitch::tensor_view<const float>(mine.data(), mine.size()), all.view());
                    const auto gathered = all.download();
                    for (std::size_t i = 0; i < gathered.size(); ++i)
                        expect(gathered[i] == float(i / mine.size()), "allgather into");
                    std::vector<float> bc_want(n);
                    for (std::size_t i = 0; i < n; ++i) bc_want[i] = float(i) * 0.5f;
                    gpu_buffer<float> bc(c.rank() == 1 ? bc_want : std::vector<float>(n, -3.0f));
                    broadcast(g, bc.view(), 1, ring{});
                    expect_bytes(bc.download(), bc_want, "broadcast (ring chain)");
                    // A schedule without a direct form is staged on the same group.
                    auto other = hitch_test::make_input<float>(c.rank(), n, exact<float>(8));
                    gpu_buffer<float> od(other);
                    allreduce(g, od.view(), reduce_op::sum, rabenseifner{});
                    expect_bytes(od.download(), hitch_test::reference<float>(p, n, reduce_op::sum, exact<float>(8)),
                                 "rabenseifner staged");
                }));
            }
}

TEST_CASE("a rank that never arrives is a timeout, not a hang, and the buffer is left alone", "[cuda][allreduce]") {
    std::atomic<int> timeouts{0};
    REQUIRE_NOTHROW(run_local(2, [&](local& c) {
        group g(c);
        g.set_timeout(hitch::seconds_f(0.5));
        std::vector<float> values(5000, 1.0f);
        gpu_buffer<float> d(values);
        if (c.rank() == 0) {
            try {
                allreduce(g, d.view(), reduce_op::sum, ring{});
            } catch (const hitch::timeout_error&) {
                ++timeouts;
            }
            expect_bytes(d.download(), values, "the buffer after the timeout");
        }
        c.barrier();
    }));
    CHECK(timeouts == 1);
}
