// hitch's schedules and collectives over cuda::nccl's engine on the fake NCCL (fake_nccl.hpp), 2 to 4 thread ranks,
// against the serial reference: every schedule (native and automatic included) x {float, double, half, bfloat16} x
// {sum, average, min, max} x sizes {0, 1, 7, 1000, 65539}, with the bytes as NCCL transfers (every buffer counts as
// device memory), inline on the control channel, and staged through device memory; reduce_scatter, both
// all-gathers, allgather_bytes, broadcast and reduce; non-blocking calls in flight beside point-to-point traffic on
// the parent communicator; native keeping NaN where NCCL's min and max drop it; automatic timing native.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "../../allreduce/reference.hpp"
#include "fake_nccl.hpp"
#include "harness.hpp"
#include "hitch/allreduce/allreduce.hpp"
#include "hitch/cuda/nccl/communicator.hpp"
#include "hitch/cuda/nccl/native.hpp"

namespace ar = hitch::allreduce;
using hitch::cuda::nccl;
using hitch_test::expect;
using hitch_test::fake_nccl_options;
using hitch_test::fake_nccl_world;
using hitch_test::run_fake_nccl;

namespace {

const std::array<ar::reduce_op, 4> all_ops{ar::reduce_op::sum, ar::reduce_op::average, ar::reduce_op::min,
                                           ar::reduce_op::max};

enum class mode { nccl_transfers, inline_host, staged_host };

fake_nccl_options fake_for(mode m) {
    fake_nccl_options o;
    o.all_device = m == mode::nccl_transfers;
    return o;
}
hitch::cuda::nccl_options options_for(mode m) {
    hitch::cuda::nccl_options o;
    if (m == mode::staged_host) o.stage_host_bytes = 0;
    return o;
}
const char* name_of(mode m) {
    return m == mode::nccl_transfers ? "NCCL transfers" : m == mode::inline_host ? "inline" : "staged";
}

template <class T>
auto exact(std::uint32_t salt) {
    return [salt](int r, std::size_t i) { return hitch_test::exact_value<T>(r, i, salt); };
}

template <class T, class Schedule>
void check_allreduce(ar::group<nccl>& g, const Schedule& schedule, std::size_t n, ar::reduce_op op,
                     std::uint32_t salt) {
    std::vector<T> data = hitch_test::make_input<T>(g.rank(), n, exact<T>(salt));
    ar::allreduce(g, hitch::view(data), op, schedule);
    const std::vector<T> want = hitch_test::reference<T>(g.size(), n, op, exact<T>(salt));
    const long bad = hitch_test::first_difference(std::span<const T>(data), std::span<const T>(want));
    if (bad >= 0)
        expect(false, std::string(Schedule::name) + " " + std::string(hitch::name(hitch::dtype_of<T>())) + " " +
                          std::string(hitch::name(op)) + " n=" + std::to_string(n) + " p=" + std::to_string(g.size()) +
                          " rank " + std::to_string(g.rank()) + ": element " + std::to_string(bad) + " is " +
                          hitch_test::show(data[static_cast<std::size_t>(bad)]) + ", reference " +
                          hitch_test::show(want[static_cast<std::size_t>(bad)]));
}

template <class Schedule>
void sweep(ar::group<nccl>& g, const Schedule& schedule, std::initializer_list<std::size_t> counts) {
    for (std::size_t n : counts)
        for (ar::reduce_op op : all_ops) {
            const auto salt = static_cast<std::uint32_t>(n * 31 + static_cast<std::size_t>(op));
            check_allreduce<float>(g, schedule, n, op, salt);
            check_allreduce<double>(g, schedule, n, op, salt);
            check_allreduce<hitch::half>(g, schedule, n, op, salt);
            check_allreduce<hitch::bfloat16>(g, schedule, n, op, salt);
        }
}

void every_schedule(nccl& comm, std::initializer_list<std::size_t> counts) {
    ar::group g(comm);
    sweep(g, ar::ring{}, counts);
    sweep(g, ar::recursive_doubling{}, counts);
    sweep(g, ar::rabenseifner{}, counts);
    sweep(g, ar::binary_tree{}, counts);
    sweep(g, ar::double_binary_tree{}, counts);
    sweep(g, ar::parameter_server{ar::parameter_server::options_type{.servers = 2}}, counts);
    sweep(g, ar::hierarchical<>{ar::hierarchical<>::options_type{.ranks_per_group = 2}}, counts);
    sweep(g, ar::native{}, counts);
    sweep(g, ar::automatic{}, counts);
}

/// reduce_scatter, both all-gathers, allgather_bytes, broadcast and reduce against what they must give.
void every_collective(nccl& comm) {
    ar::group g(comm);
    const int p = comm.size(), me = comm.rank();
    for (std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{1001}, std::size_t{65539}}) {
        const auto value = exact<float>(static_cast<std::uint32_t>(n));
        const std::vector<float> sum = hitch_test::reference<float>(p, n, ar::reduce_op::sum, value);
        {
            std::vector<float> data = hitch_test::make_input<float>(me, n, value);
            const auto mine = ar::reduce_scatter(g, hitch::view(data));
            const ar::block b = ar::partition(n, p, me);
            for (std::size_t i = 0; i < b.count; ++i)
                expect(mine[i] == sum[b.offset + i], "reduce_scatter block element " + std::to_string(i));
        }
        {
            std::vector<double> data(n, -1.0);
            for (int r = 0; r < p; ++r) {
                const ar::block b = ar::partition(n, p, r);
                if (r == me)
                    for (std::size_t i = 0; i < b.count; ++i) data[b.offset + i] = r * 1e6 + static_cast<double>(i);
            }
            ar::allgather(g, hitch::view(data));
            for (int r = 0; r < p; ++r) {
                const ar::block b = ar::partition(n, p, r);
                for (std::size_t i = 0; i < b.count; ++i)
                    expect(data[b.offset + i] == r * 1e6 + static_cast<double>(i), "allgather in place");
            }
        }
        {
            std::vector<std::int32_t> mine(n, me * 7 + 1);
            std::vector<std::int32_t> all(n * static_cast<std::size_t>(p), -1);
            ar::allgather(g, hitch::tensor_view<const std::int32_t>(mine.data(), n), hitch::view(all));
            for (int r = 0; r < p; ++r)
                for (std::size_t i = 0; i < n; ++i)
                    expect(all[static_cast<std::size_t>(r) * n + i] == r * 7 + 1, "allgather into");
        }
        for (int root = 0; root < p; ++root) {
            std::vector<float> data(n, me == root ? 3.5f : 0.0f);
            ar::broadcast(g, hitch::view(data), root);
            for (float x : data) expect(x == 3.5f, "broadcast (binary_tree)");
            std::fill(data.begin(), data.end(), me == root ? -2.0f : 9.0f);
            ar::broadcast(g, hitch::view(data), root, ar::ring{});
            for (float x : data) expect(x == -2.0f, "broadcast (ring)");
            std::vector<float> contribution = hitch_test::make_input<float>(me, n, value);
            ar::reduce(g, hitch::view(contribution), ar::reduce_op::sum, root);
            if (me == root)
                expect(
                    hitch_test::first_difference(std::span<const float>(contribution), std::span<const float>(sum)) < 0,
                    "reduce to root");
        }
    }
    std::vector<std::byte> blob(static_cast<std::size_t>(me) * 1000 + 3, std::byte{static_cast<unsigned char>(me)});
    const ar::byte_blocks blocks = ar::allgather_bytes(g, blob);
    for (int r = 0; r < p; ++r) {
        expect(blocks.blob(r).size() == static_cast<std::size_t>(r) * 1000 + 3, "allgather_bytes size");
        for (std::byte b : blocks.blob(r)) expect(b == std::byte{static_cast<unsigned char>(r)}, "allgather_bytes");
    }
}

}  // namespace

TEST_CASE("every schedule over cuda::nccl matches the serial reference: 2 to 4 ranks, three ways of moving bytes",
          "[cuda][nccl][allreduce]") {
    for (mode m : {mode::nccl_transfers, mode::inline_host, mode::staged_host})
        for (int p : {2, 3, 4}) {
            INFO(name_of(m) << ", p = " << p);
            REQUIRE_NOTHROW(run_fake_nccl(
                p,
                [&](nccl& comm, fake_nccl_world& world) {
                    if (m == mode::nccl_transfers || p == 3)
                        every_schedule(comm, {0, 1, 7, 1000, 65539});
                    else
                        every_schedule(comm, {7, 1000});
                    comm.barrier();
                    expect(world.collectives_run(comm.rank()) > 0, "native ran as an NCCL all-reduce");
                    if (m == mode::inline_host)
                        expect(world.groups_started(comm.rank()) == 0, "inline: no NCCL transfer");
                    else
                        expect(world.bytes_sent(comm.rank()) > 0, "the schedules' bytes went over NCCL");
                },
                fake_for(m), options_for(m)));
            const auto world_done = hitch_test::fake_nccl_world::make(1);  // nothing: the worlds above are gone
            (void)world_done;
        }
}

TEST_CASE("every collective over cuda::nccl: reduce_scatter, all-gathers, broadcast, reduce",
          "[cuda][nccl][allreduce]") {
    for (mode m : {mode::nccl_transfers, mode::inline_host})
        for (int p : {2, 3, 4}) {
            INFO(name_of(m) << ", p = " << p);
            REQUIRE_NOTHROW(
                run_fake_nccl(p, [](nccl& comm, fake_nccl_world&) { every_collective(comm); }, fake_for(m)));
        }
}

TEST_CASE("cuda::nccl: staging given back, jitter in the streams, odd world sizes", "[cuda][nccl][allreduce]") {
    fake_nccl_options jitter;
    jitter.all_device = false;
    jitter.jitter_us = 200;
    hitch::cuda::nccl_options staged;
    staged.stage_host_bytes = 0;
    const auto world = fake_nccl_world::make(3, jitter);
    hitch::comm::run_local(3, [&](hitch::comm::local& c) {
        nccl comm = hitch_test::make_fake_nccl(c, world, staged);
        every_schedule(comm, {1, 1000});
        every_collective(comm);
    });
    CHECK(world->live_allocations() == 0);
}

TEST_CASE("native over cuda::nccl keeps NaN in min and max, which NCCL drops", "[cuda][nccl][allreduce]") {
    for (bool device : {true, false}) {
        INFO((device ? "device buffers" : "host buffers (staged)"));
        fake_nccl_options o;
        o.all_device = device;
        REQUIRE_NOTHROW(run_fake_nccl(
            3,
            [](nccl& comm, fake_nccl_world&) {
                const float nan = std::numeric_limits<float>::quiet_NaN();
                for (ar::reduce_op op : {ar::reduce_op::min, ar::reduce_op::max, ar::reduce_op::sum}) {
                    std::vector<float> f(9, static_cast<float>(comm.rank()));
                    std::vector<hitch::bfloat16> b(9, hitch::bfloat16(static_cast<float>(comm.rank())));
                    if (comm.rank() == 1) {
                        f[2] = nan;
                        b[2] = hitch::bfloat16(nan);
                    }
                    if (comm.rank() == 2) {
                        f[5] = nan;
                        b[5] = hitch::bfloat16(nan);
                    }
                    comm.allreduce_native(std::span<float>(f), op, hitch::deadline(comm.timeout()));
                    comm.allreduce_native(std::span<hitch::bfloat16>(b), op, hitch::deadline(comm.timeout()));
                    for (std::size_t i = 0; i < f.size(); ++i) {
                        const bool want_nan = i == 2 || i == 5;
                        expect(std::isnan(f[i]) == want_nan, "float element " + std::to_string(i));
                        expect(std::isnan(static_cast<float>(b[i])) == want_nan,
                               "bfloat16 element " + std::to_string(i));
                        if (!want_nan) {
                            const float want = op == ar::reduce_op::min ? 0.0f : op == ar::reduce_op::max ? 2.0f : 3.0f;
                            expect(f[i] == want, "float value");
                        }
                    }
                }
            },
            o));
    }
}

TEST_CASE("automatic over cuda::nccl times native among its candidates", "[cuda][nccl][allreduce]") {
    REQUIRE_NOTHROW(run_fake_nccl(3, [](nccl& comm, fake_nccl_world& world) {
        ar::group g(comm);
        std::vector<float> data(4096, 1.0f);
        ar::automatic::options_type generous;  // a slow host (a sanitizer) must still measure the first probes
        generous.calibration_budget_s = 60;
        generous.calibration_timeout_s = 120;
        ar::allreduce(g, hitch::view(data), ar::reduce_op::sum, ar::automatic(generous));
        for (float x : data) expect(x == 3.0f, "automatic's sum");
        const auto profile = ar::automatic::measured_profile(g.state());
        expect(profile != nullptr && profile->measured > 0, "automatic calibrated");
        expect(profile->seconds[7][0] > 0, "native (candidate 7) was timed");
        expect(world.collectives_run(comm.rank()) > 0, "as an NCCL all-reduce");
    }));
}

TEST_CASE("non-blocking collectives over cuda::nccl run beside point-to-point traffic on the parent",
          "[cuda][nccl][allreduce]") {
    REQUIRE_NOTHROW(run_fake_nccl(4, [](nccl& comm, fake_nccl_world&) {
        ar::group g(comm);  // its calls run on the group's progress thread, on a split of comm
        const int p = comm.size(), me = comm.rank();
        std::vector<std::vector<float>> buffers;
        for (int k = 0; k < 6; ++k)
            buffers.emplace_back(10000 + static_cast<std::size_t>(k), static_cast<float>(k + me));
        std::vector<ar::handle> handles;
        for (auto& b : buffers)
            handles.push_back(ar::allreduce_async(g, hitch::view(b), ar::reduce_op::sum, ar::ring{}));
        for (int round = 0; round < 20; ++round) {  // meanwhile, this thread talks on the parent
            std::vector<double> out(777, me + round), in(777, -1);
            auto r = comm.irecv(std::span<double>(in), (me - 1 + p) % p, 1000 + round);
            auto s = comm.isend(std::span<const double>(out), (me + 1) % p, 1000 + round);
            r.wait();
            s.wait();
            for (double x : in) expect(x == (me - 1 + p) % p + round, "parent traffic");
        }
        for (auto& h : handles) h.wait();
        for (std::size_t k = 0; k < buffers.size(); ++k) {
            const float want = static_cast<float>(p * static_cast<int>(k)) + static_cast<float>(p * (p - 1) / 2);
            for (float x : buffers[k]) expect(x == want, "async all-reduce " + std::to_string(k));
        }
    }));
}
