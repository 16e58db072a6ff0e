// Every schedule (native included) and collective on GPU buffers over comm::mpi, 2 and 3 processes sharing the GPUs
// there are: against the serial reference and bit for bit against the host collective on the same data, on hitch's
// staged MPI path and on MPI messages; which path the calls take, decided alike on every rank from what the MPI
// library says (hitch/cuda/allreduce/mpi.hpp). Skips (every rank exits 77) unless every rank has a GPU.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "../../allreduce/reference.hpp"
#include "gpu_buffer.hpp"
#include "hitch/allreduce/allreduce.hpp"
#include "hitch/allreduce/native.hpp"
#include "hitch/comm/agree.hpp"
#include "hitch/comm/mpi.hpp"
#include "hitch/cuda/allreduce/collectives.cuh"
#include "hitch/cuda/allreduce/mpi.hpp"

using namespace hitch::allreduce;
using hitch_test::gpu_buffer;
namespace ca = hitch::cuda::allreduce;

namespace {

/// Runs `body` on every rank and fails the test case on every rank if any rank threw.
template <class Body>
void collective(hitch::comm::mpi& comm, Body&& body) {
    std::string error;
    try {
        body();
    } catch (const std::exception& e) {
        error = e.what();
    }
    const int failed = error.empty() ? 0 : 1;
    const std::vector<int> all = hitch::comm::allgather_value(comm, failed);
    INFO("rank " << comm.rank() << ": " << error);
    CHECK(error.empty());
    for (int f : all) REQUIRE(f == 0);
}

template <class T>
void expect_bytes(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
    const long at = hitch_test::first_difference<T>(got, want);
    hitch_test::expect(at < 0, what + ": first difference at element " + std::to_string(at));
}

template <class T>
auto exact(std::uint32_t salt) {
    return [salt](int r, std::size_t i) { return hitch_test::exact_value<T>(r, i, salt); };
}
template <class T>
auto rough(std::uint32_t salt) {
    return [salt](int r, std::size_t i) { return hitch_test::rough_value<T>(r, i, salt); };
}

template <class T, class Schedule>
void allreduce_case(group<hitch::comm::mpi>& g, const Schedule& schedule, std::size_t n, reduce_op op,
                    bool shared_memory, bool async) {
    call_options o;
    o.shared_memory = shared_memory;
    const int p = g.size(), r = g.rank();
    gpu_buffer<T> d(hitch_test::make_input<T>(r, n, exact<T>(9)));
    if (async)
        allreduce_async(g, d.view(), op, schedule, o).wait();
    else
        allreduce(g, d.view(), op, schedule, o);
    expect_bytes(d.download(), hitch_test::reference<T>(p, n, op, exact<T>(9)), "against the reference");
    auto host = hitch_test::make_input<T>(r, n, rough<T>(2));
    gpu_buffer<T> dr(host);
    allreduce(g, dr.view(), op, schedule, o);
    const ca::device_options opts = ca::options(g);
    const std::size_t bytes = n * sizeof(T);
    const ca::staging_plan plan = ca::staging_plan::make(bytes, sizeof(T), true, {0, bytes}, {0, bytes}, opts);
    const bool direct = ca::explain_allreduce(g, Schedule::name).direct;
    if (direct || plan.pieces() == 1) {  // the direct ring combines as the host ring does, on the whole buffer
        allreduce(g, hitch::view(host), op, schedule, o);
    } else {
        for (std::size_t i = 0; i < plan.pieces(); ++i) {
            const ca::staging_piece s = plan.piece(i);
            allreduce(g, hitch::view(host).subview(s.offset / sizeof(T), s.bytes / sizeof(T)), op, schedule, o);
        }
    }
    expect_bytes(dr.download(), host, "against the host schedule");
}

template <class Schedule>
void sweep(hitch::comm::mpi& comm, const Schedule& schedule) {
    for (bool shared_memory : {true, false})
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{33}, (std::size_t{1} << 20) + 3}) {
            INFO(Schedule::name << " p = " << comm.size() << " n = " << n << (shared_memory ? " staged" : " messages"));
            collective(comm, [&] {
                group g(comm);
                if constexpr (std::is_same_v<Schedule, automatic>) g.set_constants(hitch::cost_constants{});
                for (reduce_op op : {reduce_op::sum, reduce_op::average, reduce_op::min, reduce_op::max})
                    allreduce_case<float>(g, schedule, n, op, shared_memory, op == reduce_op::min);
                allreduce_case<hitch::half>(g, schedule, n, reduce_op::average, shared_memory, false);
                allreduce_case<hitch::bfloat16>(g, schedule, n, reduce_op::sum, shared_memory, true);
                allreduce_case<double>(g, schedule, n, reduce_op::max, shared_memory, false);
                // Pipelined in many pieces.
                ca::device_options o;
                o.chunk_bytes = std::size_t{64} << 10;
                o.slots = 2;
                ca::set_options(g, o);
                allreduce_case<float>(g, schedule, n, reduce_op::sum, shared_memory, true);
            });
        }
}

automatic fixed_automatic() {
    automatic::options_type o;
    o.rerank = false;
    return automatic(o);
}

}  // namespace

TEST_CASE("every schedule on GPU buffers over MPI", "[cuda][allreduce][mpi]") {
    hitch::comm::mpi comm;
    sweep(comm, ring{});
    sweep(comm, recursive_doubling{});
    sweep(comm, rabenseifner{});
    sweep(comm, binary_tree{});
    sweep(comm, double_binary_tree{});
    sweep(comm, hierarchical<>{});
    sweep(comm, parameter_server{});
    sweep(comm, native{});
    sweep(comm, fixed_automatic());
}

TEST_CASE("the collectives on GPU buffers over MPI", "[cuda][allreduce][mpi]") {
    hitch::comm::mpi comm;
    const int p = comm.size(), r = comm.rank();
    for (std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{100003}})
        for (bool async : {false, true}) {
            INFO("n = " << n << (async ? " async" : ""));
            collective(comm, [&] {
                group g(comm);
                auto rs_host = hitch_test::make_input<float>(r, n, rough<float>(4));
                gpu_buffer<float> rs(rs_host);
                if (async)
                    reduce_scatter_async(g, rs.view(), reduce_op::sum).wait();
                else
                    (void)reduce_scatter(g, rs.view(), reduce_op::sum);
                (void)reduce_scatter(g, hitch::view(rs_host), reduce_op::sum);
                expect_bytes(rs.download(), rs_host, "reduce_scatter");

                std::vector<double> ag_host(n, -1.0);
                const block own = partition(n, p, r);
                for (std::size_t i = 0; i < own.count; ++i) ag_host[own.offset + i] = double(own.offset + i) / 3.0;
                gpu_buffer<double> ag(ag_host);
                if (async)
                    allgather_async(g, ag.view()).wait();
                else
                    allgather(g, ag.view());
                allgather(g, hitch::view(ag_host));
                expect_bytes(ag.download(), ag_host, "allgather");

                std::vector<float> mine(n / 3 + 1, float(r) + 0.5f);
                gpu_buffer<float> mine_gpu(mine), all(mine.size() * static_cast<std::size_t>(p));
                allgather(g, mine_gpu.const_view(), all.view());
                const auto gathered = all.download();
                for (std::size_t i = 0; i < gathered.size(); ++i)
                    hitch_test::expect(gathered[i] == float(i / mine.size()) + 0.5f, "allgather into");

                for (int root = 0; root < p; ++root) {
                    std::vector<hitch::bfloat16> want(n);
                    for (std::size_t i = 0; i < n; ++i) want[i] = hitch::bfloat16(float(i % 512) + float(root));
                    gpu_buffer<hitch::bfloat16> bc(r == root ? want
                                                             : std::vector<hitch::bfloat16>(n, hitch::bfloat16(-1.0f)));
                    if (async)
                        broadcast_async(g, bc.view(), root, ring{}).wait();
                    else
                        broadcast(g, bc.view(), root);
                    expect_bytes(bc.download(), want, "broadcast");

                    auto rd_host = hitch_test::make_input<float>(r, n, rough<float>(5));
                    gpu_buffer<float> rd(rd_host);
                    if (async)
                        reduce_async(g, rd.view(), reduce_op::sum, root).wait();
                    else
                        reduce(g, rd.view(), reduce_op::sum, root);
                    reduce(g, hitch::view(rd_host), reduce_op::sum, root);
                    expect_bytes(rd.download(), rd_host, "reduce");
                }
            });
        }
}

TEST_CASE("every rank takes the same path, from what the MPI library says", "[cuda][allreduce][mpi]") {
    hitch::comm::mpi comm;
    group g(comm);
    const ca::path_choice choice = ca::explain_allreduce(g, "ring");
    const ca::mpi_cuda_query q = ca::installed_mpi_cuda_query();
    CHECK(q.installed);
    INFO("rank " << comm.rank() << ": " << (choice.direct ? "direct" : "staged") << " (" << choice.reason << ")");
    const std::vector<int> all = hitch::comm::allgather_value(comm, choice.direct ? 1 : 0);
    for (int d : all) CHECK(d == all.front());
    if (!ca::cuda_aware_environment()) {
        const bool aware = q.declared && q.query != nullptr && q.query() == 1;
        CHECK(choice.direct == aware);
    }
    CHECK_FALSE(ca::explain_allreduce(g, "binary_tree").direct);
}
