// comm::simulated: the communicator suite, virtual times against the alpha-beta formulas of the schedules
// (docs/allreduce.md) on an idle network, contention and topologies against the reservation model, results bit for
// bit against comm::local, the same times on every run, and each fault of simulated_faults ending in its error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/simulated.hpp"
#include "hitch/compress/topk.hpp"
#include "suite.hpp"

using hitch::seconds_f;
using hitch::comm::link_model;
using hitch::comm::run_simulated;
using hitch::comm::simulated;
using hitch::comm::simulated_network;
using hitch::comm::simulated_options;
using hitch_test::expect;
namespace ar = hitch::allreduce;

namespace {

// 5 us latency, 10 GB/s: 100 ps per byte, so every time below is a whole number of picoseconds.
constexpr double alpha = 5e-6;
constexpr double beta = 1e-10;
const simulated_network net = simulated_network::single_switch({alpha, 1.0 / beta});

// The start of the timed part of a run: later than any setup (group construction), so the network is idle there.
constexpr double t0 = 1.0;

/// Virtual times are integer picoseconds: two that agree to within half a picosecond are equal.
bool same_time(double a, double b) { return std::abs(a - b) < 0.5e-12; }

void start_at(simulated& comm, double t) { comm.advance_to(seconds_f(t)); }

/// Full-mantissa inputs, so a different order of combination would show in the bits.
float input(int rank, std::size_t i) {
    std::uint32_t h = static_cast<std::uint32_t>(rank) * 2654435761u ^ static_cast<std::uint32_t>(i) * 40503u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return static_cast<float>(h % 1000003u) / 1000003.0f - 0.5f;
}

/// Virtual seconds one all-reduce of n floats takes from t0 until the last rank has the result; with `even`, every
/// rank must end at that time.
template <class Schedule>
double allreduce_time(int p, std::size_t n, const Schedule& schedule, bool even = true,
                      const simulated_options& options = {}) {
    const auto times = run_simulated(
        p, net,
        [&](simulated& comm) {
            ar::group g(comm);
            std::vector<float> data(n, 1.0f);
            ar::call_options o;
            o.check = false;
            start_at(comm, t0);
            ar::allreduce(g, hitch::view(data), ar::reduce_op::sum, schedule, o);
            expect(data[n / 2] == static_cast<float>(comm.size()), "sum of ones");
            return comm.virtual_time().count() - t0;
        },
        options);
    if (even)
        for (double t : times) expect(same_time(t, times.front()), "every rank ends at the same virtual time");
    return *std::max_element(times.begin(), times.end());
}

}  // namespace

TEST_CASE("comm::simulated passes the communicator suite for 1 to 8 ranks", "[comm][simulated]") {
    for (int p = 1; p <= 8; ++p) {
        CAPTURE(p);
        REQUIRE_NOTHROW(run_simulated(p, net, [](simulated& comm) {
            hitch_test::ordered_delivery(comm);
            hitch_test::message_sizes(comm, {0, 1, 4, 7, 4096, 65536, 65540, 1 << 20});
            hitch_test::many_outstanding(comm);
            hitch_test::split_groups(comm);
            hitch_test::any_source_with_probe(comm);
            hitch_test::bad_arguments(comm);
            hitch_test::size_mismatch_reported(comm);
        }));
    }
}

TEST_CASE("comm::simulated: a receive nobody sends to times out in virtual time, at once in wall time",
          "[comm][simulated]") {
    const auto start = std::chrono::steady_clock::now();
    REQUIRE_NOTHROW(run_simulated(2, net, [](simulated& comm) { hitch_test::receive_times_out(comm, 30.0); }));
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 5.0);
}

TEST_CASE("comm::simulated: a barrier names the rank that did not arrive", "[comm][simulated]") {
    simulated_options options;
    options.timeout_s = 0.3;
    CHECK_THROWS_WITH(run_simulated(
                          3, net,
                          [](simulated& comm) {
                              if (comm.rank() != 2) comm.barrier();
                          },
                          options),
                      Catch::Contains("rank 2 did not arrive") && Catch::Contains("barrier #0"));
}

TEST_CASE("comm::simulated: one message costs alpha + n beta; full duplex; a shared link serializes",
          "[comm][simulated]") {
    constexpr std::size_t n = 4000;  // bytes
    run_simulated(3, net, [](simulated& comm) {
        std::vector<std::byte> out(n, std::byte{1}), a(n), b(n);
        if (comm.rank() == 0) {
            // 1 -> 0 and 2 -> 0 share 0's down link: the second arrives n beta after the first.
            auto r1 = comm.irecv(std::span<std::byte>(a), 1, 0);
            auto r2 = comm.irecv(std::span<std::byte>(b), 2, 0);
            auto s = comm.isend(std::span<const std::byte>(out), 1, 1);
            r1.wait();
            expect(same_time(comm.virtual_time().count(), alpha + n * beta), "first arrival");
            r2.wait();
            expect(same_time(comm.virtual_time().count(), alpha + 2 * n * beta), "second arrival, serialized");
            s.wait();
        } else {
            auto s = comm.isend(std::span<const std::byte>(out), 0, 0);
            if (comm.rank() == 1) {
                // 0 -> 1 runs on the other direction of the links 1 -> 0 uses: no wait.
                comm.irecv(std::span<std::byte>(a), 0, 1).wait();
                expect(same_time(comm.virtual_time().count(), alpha + n * beta), "full duplex");
            }
            s.wait();
            if (comm.rank() == 2)  // it waited for 0's down link to free, then took n beta to leave
                expect(same_time(comm.virtual_time().count(), 2 * n * beta),
                       "a send completes when its bytes have left");
        }
    });
}

TEST_CASE("comm::simulated: ring all-reduce takes 2(p-1) alpha + 2(p-1)/p n beta exactly", "[comm][simulated]") {
    for (int p : {2, 3, 4, 5, 8}) {
        CAPTURE(p);
        const std::size_t count = static_cast<std::size_t>(p) * 1000;
        const double n = static_cast<double>(count * sizeof(float));
        const double want = 2 * (p - 1) * alpha + 2.0 * (p - 1) / p * n * beta;
        const double got = allreduce_time(p, count, ar::ring{});
        CAPTURE(got, want);
        CHECK(same_time(got, want));
    }
}

TEST_CASE("comm::simulated: recursive doubling and Rabenseifner match their formulas", "[comm][simulated]") {
    for (int p : {2, 4, 8, 16}) {
        CAPTURE(p);
        const double lg = std::log2(p);
        const std::size_t count = static_cast<std::size_t>(p) * 512;
        const double n = static_cast<double>(count * sizeof(float));
        const double rd = allreduce_time(p, count, ar::recursive_doubling{});
        CHECK(same_time(rd, lg * (alpha + n * beta)));
        const double rab = allreduce_time(p, count, ar::rabenseifner{});
        CHECK(same_time(rab, 2 * lg * alpha + 2.0 * (p - 1) / p * n * beta));
    }
    // Not a power of two: folded in and out. docs/allreduce.md's (floor(lg p) + 2)(alpha + n beta) counts the fold
    // as steps of their own; the ranks outside the fold start their rounds at once, so the last rank ends between
    // (floor(lg p) + 1) and (floor(lg p) + 2) steps.
    const std::size_t count = 3000;
    const double n = static_cast<double>(count * sizeof(float));
    const double step = alpha + n * beta;
    for (int p : {3, 5, 6}) {
        CAPTURE(p);
        const double t = allreduce_time(p, count, ar::recursive_doubling{}, false);
        const double lg = std::floor(std::log2(p));
        CHECK(t >= (lg + 1) * step - 0.5e-12);
        CHECK(t <= (lg + 2) * step + 0.5e-12);
    }
    // p = 3, worked through: 0 folds into 1 while 2 already sends its round to 1; the two share 1's down link, so
    // 1 has both at n beta + step, and its result reaches 0 one step later.
    CHECK(same_time(allreduce_time(3, count, ar::recursive_doubling{}, false), n * beta + 2 * step));
}

TEST_CASE("comm::simulated: with gamma, the schedules match their alpha-beta-gamma formulas", "[comm][simulated]") {
    // 25 ps a byte combined: a quarter of beta, and whole picoseconds for every chunk below.
    constexpr double gamma = 2.5e-11;
    simulated_options options;
    options.combine_s_per_byte = gamma;
    for (int p : {2, 4, 8}) {
        CAPTURE(p);
        const double lg = std::log2(p);
        const std::size_t count = static_cast<std::size_t>(p) * 1000;
        const double n = static_cast<double>(count * sizeof(float));
        // Each rank combines what it receives once: (p - 1)/p n in the ring and Rabenseifner, n a round in
        // recursive doubling (Thakur, Rabenseifner and Gropp 2005).
        const double ring = allreduce_time(p, count, ar::ring{}, true, options);
        CHECK(same_time(ring, 2 * (p - 1) * alpha + 2.0 * (p - 1) / p * n * beta + (p - 1.0) / p * n * gamma));
        const double rd = allreduce_time(p, count, ar::recursive_doubling{}, true, options);
        CHECK(same_time(rd, lg * (alpha + n * beta + n * gamma)));
        const double rab = allreduce_time(p, count, ar::rabenseifner{}, true, options);
        CHECK(same_time(rab, 2 * lg * alpha + 2.0 * (p - 1) / p * n * beta + (p - 1.0) / p * n * gamma));
    }
    // A rank three times slower combines three times slower; a combine draws no injected stall; gamma out of
    // range is refused.
    options.faults.slow.push_back({1, 3.0});
    options.faults.delays.push_back({-1, 1.0, 1e-3, 2.0, 7});  // every compute step stalls; combines do not
    const auto spent = run_simulated(
        2, net,
        [](simulated& comm) {
            comm.charge_combine(4000);
            return comm.virtual_time().count();
        },
        options);
    CHECK(same_time(spent[0], 4000 * gamma));
    CHECK(same_time(spent[1], 3 * 4000 * gamma));
    simulated_options bad;
    bad.combine_s_per_byte = -1.0;
    CHECK_THROWS_WITH(run_simulated(2, net, [](simulated&) {}, bad), Catch::Contains("combine_s_per_byte"));
}

TEST_CASE("comm::simulated: results equal comm::local's bit for bit", "[comm][simulated]") {
    constexpr std::size_t n = 100003;
    const auto run = [&](auto schedule, int p) {
        const auto body = [&](auto& comm) {
            ar::group g(comm);
            std::vector<float> data(n);
            for (std::size_t i = 0; i < n; ++i) data[i] = input(comm.rank(), i);
            ar::allreduce(g, hitch::view(data), ar::reduce_op::average, schedule);
            return data;
        };
        const auto on_local = hitch::comm::run_local(p, [&](hitch::comm::local& c) { return body(c); });
        const auto on_simulated = run_simulated(p, net, [&](simulated& c) { return body(c); });
        for (int r = 0; r < p; ++r)
            CHECK(std::memcmp(on_local[r].data(), on_simulated[r].data(), n * sizeof(float)) == 0);
    };
    for (int p : {3, 5, 8}) {
        CAPTURE(p);
        run(ar::ring{}, p);
        run(ar::recursive_doubling{}, p);
        run(ar::rabenseifner{}, p);
        run(ar::binary_tree{}, p);
        run(ar::double_binary_tree{}, p);
    }
}

TEST_CASE("comm::simulated: the same virtual times on every run", "[comm][simulated]") {
    // Contention everywhere: an oversubscribed fat tree, uneven all-to-all traffic, then a ring all-reduce.
    const auto network = simulated_network::fat_tree({alpha, 1.0 / beta}, 4, 4.0);
    const auto once = [&] {
        return hitch::comm::simulate(12, network, [](simulated& comm) {
            const int p = comm.size();
            std::vector<std::vector<std::byte>> in(static_cast<std::size_t>(p)), out(static_cast<std::size_t>(p));
            std::vector<simulated::request> requests;
            for (int k = 0; k < p; ++k) {
                const std::size_t bytes = 1000 * static_cast<std::size_t>((comm.rank() * 7 + k * 3) % 11);
                out[static_cast<std::size_t>(k)].assign(bytes, std::byte{3});
                in[static_cast<std::size_t>(k)].resize(1000 * static_cast<std::size_t>((k * 7 + comm.rank() * 3) % 11));
                requests.push_back(comm.irecv(std::span<std::byte>(in[static_cast<std::size_t>(k)]), k, 4));
                requests.push_back(comm.isend(std::span<const std::byte>(out[static_cast<std::size_t>(k)]), k, 4));
            }
            hitch::wait_all(requests, comm.timeout());
            comm.compute(seconds_f(1e-5 * comm.rank()));
            ar::group g(comm);
            std::vector<float> data(50000, 1.0f);
            ar::allreduce(g, hitch::view(data), ar::reduce_op::sum, ar::ring{});
            return 0;
        });
    };
    const auto a = once(), b = once();
    REQUIRE(a.first_error() == nullptr);
    for (std::size_t r = 0; r < a.ranks.size(); ++r) {
        CHECK(a.ranks[r].finish_s == b.ranks[r].finish_s);
        CHECK(a.ranks[r].idle_s == b.ranks[r].idle_s);
    }
    for (std::size_t l = 0; l < a.links.size(); ++l) CHECK(a.links[l].busy_s == b.links[l].busy_s);
    CHECK(a.makespan_s() > 0);
}

TEST_CASE("comm::simulated: topologies route as modelled and give their node layout", "[comm][simulated]") {
    constexpr std::size_t n = 8000;
    SECTION("fat tree: leaves share an oversubscribed uplink") {
        // Leaves of 4 with oversubscription 4: the leaf uplink carries one nic's rate, so four messages from leaf 0
        // to leaf 1 pass one after another; inside a leaf nothing is shared.
        const double spine = 1e-6;
        const auto network = simulated_network::fat_tree({alpha, 1.0 / beta}, 4, 4.0, spine);
        run_simulated(8, network, [&](simulated& comm) {
            std::vector<std::byte> buf(n);
            if (comm.rank() < 4) {
                comm.isend(std::span<const std::byte>(buf), comm.rank() + 4, 0).wait();
            } else {
                comm.irecv(std::span<std::byte>(buf), comm.rank() - 4, 0).wait();
                const double k = comm.rank() - 4;  // its place in the queue on the uplink
                expect(same_time(comm.virtual_time().count(), k * n * beta + alpha + spine + n * beta),
                       "serialized on the leaf uplink");
            }
            expect(comm.node_layout().nodes == 8, "a machine per rank");
        });
    }
    SECTION("nodes: a fast fabric inside, one shared nic outside") {
        const link_model nvlink{1e-6, 1e11}, nic{alpha, 1.0 / beta};
        const auto network = simulated_network::nodes(2, nvlink, nic);
        run_simulated(4, network, [&](simulated& comm) {
            const hitch::node_layout layout = comm.node_layout();
            expect(layout.nodes == 2 && layout.node_of(0) == 0 && layout.node_of(1) == 0 && layout.node_of(3) == 1,
                   "two machines of two ranks");
            std::vector<std::byte> buf(n);
            // 0 -> 1 inside node 0; 2 -> 0 and 3 -> 1 share node 1's nic up and node 0's nic down.
            if (comm.rank() == 0) {
                auto r = comm.irecv(std::span<std::byte>(buf), 2, 0);
                comm.isend(std::span<const std::byte>(buf), 1, 0).wait();
                r.wait();
                expect(same_time(comm.virtual_time().count(), alpha + n * beta), "first over the nic");
            } else if (comm.rank() == 1) {
                std::vector<std::byte> other(n);
                comm.irecv(std::span<std::byte>(buf), 0, 0).wait();
                expect(same_time(comm.virtual_time().count(), 1e-6 + n * 1e-11), "inside the node");
                comm.irecv(std::span<std::byte>(other), 3, 0).wait();
                expect(same_time(comm.virtual_time().count(), alpha + 2 * n * beta), "second over the shared nic");
            } else {
                comm.isend(std::span<const std::byte>(buf), comm.rank() - 2, 0).wait();
            }
            simulated half = comm.split(comm.rank() % 2, comm.rank());
            expect(half.node_layout().nodes == 2, "a split keeps the machines of its members");
        });
    }
}

TEST_CASE("comm::simulated: automatic calibrates on virtual time and measures the model's constants",
          "[comm][simulated]") {
    const auto once = [] {
        return run_simulated(8, net, [](simulated& comm) {
            ar::group g(comm);
            std::vector<float> data(200000, 1.0f);
            ar::allreduce(g, hitch::view(data), ar::reduce_op::sum);  // automatic: calibrates in this call
            expect(data[1234] == 8.0f, "sum");
            const hitch::cost_constants k = *g.constants();
            return std::vector<double>{comm.virtual_time().count(), k.alpha_s, k.beta_s_per_byte};
        });
    };
    const auto a = once(), b = once();
    CHECK(a == b);  // the same choices and times on every run
    // Half a round trip of one float is alpha + 4 beta (timings read the clock to the nanosecond). An exchange of
    // n bytes, less that, per byte is beta, less what the partner's head start saves: the partners start their
    // exchanges at different times, and automatic keeps the fastest of its attempts.
    CHECK(std::abs(a[0][1] / (alpha + 4 * beta) - 1) < 1e-4);
    CHECK(a[0][2] <= beta);
    CHECK(a[0][2] > 0.9 * beta);
}

TEST_CASE("comm::simulated: messages from timing-only memory carry no bytes and take the same time",
          "[comm][simulated]") {
    constexpr std::size_t n = 100000;
    std::vector<float> shared(2 * n, 3.0f);  // rank 0 sends from the first half; rank 1 receives into the second
    simulated_options options;
    options.timing_only_memory.push_back(std::as_bytes(std::span<const float>(shared)));
    const auto run = [&](const simulated_options& o) {
        return run_simulated(
            2, net,
            [&](simulated& comm) {
                start_at(comm, t0);
                float control = 0.0f;
                if (comm.rank() == 0) {
                    shared[0] = 7.0f;
                    comm.send(std::span<const float>(shared.data(), n), 1, 0);
                    control = 5.0f;
                    comm.send(std::span<const float>(&control, 1), 1, 1);  // from elsewhere: carries its bytes
                } else {
                    shared[n] = 0.0f;
                    comm.recv(std::span<float>(shared.data() + n, n), 0, 0);
                    comm.recv(std::span<float>(&control, 1), 0, 1);
                }
                return std::pair<float, double>(comm.rank() == 1 ? shared[n] + control : 0.0f,
                                                comm.virtual_time().count() - t0);
            },
            o);
    };
    const auto timing_only = run(options);
    CHECK(timing_only[1].first == 5.0f);  // the bucket's first element stayed 0; the control message arrived
    const auto with_data = run({});
    CHECK(with_data[1].first == 12.0f);
    CHECK(same_time(timing_only[1].second, with_data[1].second));
    CHECK(same_time(with_data[1].second, alpha + (n + 1) * 4 * beta));  // the second waits for the first
}

TEST_CASE("comm::simulated: buffered switches free a sender's port while its message queues at the receiver",
          "[comm][simulated]") {
    constexpr std::size_t n = 4000;  // bytes
    // Ranks 1 and 2 both send to rank 0 at t0; rank 1 then sends to rank 3. Rank 2's message holds rank 0's down
    // link first, so rank 1's waits for it. As a circuit it holds rank 1's port meanwhile and rank 1's next message
    // leaves late; through a buffered switch rank 1's port is free once its bytes have left.
    const auto arrival_at_3 = [&](simulated_network::switching mode) {
        simulated_network network = net;
        network.mode = mode;
        const auto times = run_simulated(4, network, [&](simulated& comm) {
            std::vector<std::byte> out(n, std::byte{1}), a(n), b(n);
            if (comm.rank() == 2)
                start_at(comm, t0 - 1e-9);  // first onto rank 0's link
            else
                start_at(comm, t0);
            if (comm.rank() == 0) {
                auto r1 = comm.irecv(std::span<std::byte>(a), 1, 0);
                auto r2 = comm.irecv(std::span<std::byte>(b), 2, 0);
                r1.wait();
                r2.wait();
            } else if (comm.rank() == 1) {
                comm.send(std::span<const std::byte>(out), 0, 0);
                comm.send(std::span<const std::byte>(out), 3, 0);
            } else if (comm.rank() == 2) {
                comm.send(std::span<const std::byte>(out), 0, 0);
            } else {
                comm.recv(std::span<std::byte>(a), 1, 0);
            }
            return comm.virtual_time().count() - t0;
        });
        return times[3];
    };
    const double lead = -1e-9 + n * beta;  // rank 2's message holds rank 0's link until then
    CHECK(same_time(arrival_at_3(simulated_network::switching::circuit), lead + 2 * n * beta + alpha));
    CHECK(same_time(arrival_at_3(simulated_network::switching::buffered), 2 * n * beta + alpha));
    // On an idle network both are the alpha-beta model.
    for (auto mode : {simulated_network::switching::circuit, simulated_network::switching::buffered}) {
        simulated_network network = net;
        network.mode = mode;
        const auto ends = run_simulated(8, network, [&](simulated& comm) {
            ar::group g(comm);
            std::vector<float> data(1 << 16, 1.0f);
            ar::call_options o;
            o.check = false;
            start_at(comm, t0);
            ar::allreduce(g, hitch::view(data), ar::reduce_op::sum, ar::rabenseifner{}, o);
            return comm.virtual_time().count() - t0;
        });
        const double bytes = 4.0 * (1 << 16);
        for (double t : ends) CHECK(same_time(t, 2 * 3 * alpha + 2.0 * 7 / 8 * bytes * beta));
    }
}
