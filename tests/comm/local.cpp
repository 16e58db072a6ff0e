// comm::local: the communicator suite for world sizes 1 to 8, the helper's failure semantics, and the optional
// capabilities (concepts/communicator.hpp) with stand-in types that do and do not model them.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hitch/allreduce/transport.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/node_layout.hpp"
#include "suite.hpp"

using hitch::comm::local;
using hitch::comm::run_local;

TEST_CASE("comm::local passes the communicator suite for 1 to 8 ranks", "[comm][local]") {
    for (int p = 1; p <= 8; ++p) {
        CAPTURE(p);
        REQUIRE_NOTHROW(run_local(p, [](local& comm) {
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

TEST_CASE("comm::local moves 64 MiB messages", "[comm][local]") {
    for (int p : {2, 3})
        REQUIRE_NOTHROW(run_local(p, [](local& comm) { hitch_test::message_sizes(comm, {std::size_t{64} << 20}); }));
}

TEST_CASE("comm::local: a receive nobody sends to times out within its deadline", "[comm][local]") {
    REQUIRE_NOTHROW(run_local(2, [](local& comm) { hitch_test::receive_times_out(comm, 0.3); }));
}

// Tagged [abort]: its in-place send to rank 0 is never received; the lease on the sender's buffer travels as the
// message's attachment (allreduce/transport/direct_path.hpp) and goes with the mailbox, so LeakSanitizer finds no
// leak (make test-sanitizers-fast runs it under AddressSanitizer).
TEST_CASE("comm::local: a rank that throws releases every other rank and the caller sees the original error",
          "[comm][local][abort]") {
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_MATCHES(run_local(4,
                                   [](local& comm) {
                                       if (comm.rank() == 2) {
                                           std::this_thread::sleep_for(std::chrono::milliseconds(50));
                                           throw std::logic_error("rank 2 gave up");
                                       }
                                       float x = 0;
                                       comm.irecv(std::span<float>(&x, 1), 2, 0).wait();  // never sent
                                   }),
                         std::logic_error, Catch::Matchers::Message("rank 2 gave up"));
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(took < 5.0);  // released long before the 60 s deadline

    // Ranks blocked in a barrier, a probe, a large send and an all-reduce's direct (in place) send are released
    // too, each with the reason, long before the deadline.
    hitch::comm::local_options options;
    options.timeout_s = 60;
    const auto world = std::make_shared<hitch::comm::local_world>(5, options);
    std::vector<std::string> messages(5);
    std::vector<double> seconds(5, 0.0);
    std::vector<std::thread> threads;
    for (int r = 0; r < 5; ++r)
        threads.emplace_back([&, r] {
            local comm = world->communicator(r);
            const auto begin = std::chrono::steady_clock::now();
            try {
                if (r == 0) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the others are waiting by then
                    world->abort("rank 0 failed");
                    return;
                }
                if (r == 1) comm.barrier();
                if (r == 2) (void)comm.probe(0, 1);
                if (r == 3) {
                    std::vector<float> big(1 << 20);
                    comm.isend(std::span<const float>(big), 0, 1).wait();
                }
                if (r == 4) {
                    // The direct path's send waits for rank 0 to read it in place (not on a request).
                    hitch::allreduce::shared_state<local> state;
                    std::vector<float> data(1 << 16, 1.0f);
                    hitch::allreduce::transport<local> t(comm, 1, hitch::deadline(hitch::seconds_f(60)), true, state);
                    if (!t.direct()) throw std::logic_error("not the direct path");
                    auto out = t.send<float>(0, 0, std::span<const float>(data));
                    out.wait(t.limit());
                }
            } catch (const std::exception& e) {
                messages[static_cast<std::size_t>(r)] = e.what();
            }
            seconds[static_cast<std::size_t>(r)] =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
        });
    for (auto& t : threads) t.join();
    for (int r = 1; r < 5; ++r) {
        INFO("rank " << r << ": " << messages[static_cast<std::size_t>(r)]);
        CHECK(messages[static_cast<std::size_t>(r)].find("was released because the world was aborted: rank 0 failed") !=
              std::string::npos);
        CHECK(seconds[static_cast<std::size_t>(r)] < 5.0);  // the deadline is 60 s
    }
}

TEST_CASE("comm::local: run_local returns each rank's result in rank order", "[comm][local]") {
    const auto results = run_local(5, [](local& comm) { return comm.rank() * comm.rank(); });
    REQUIRE(results == std::vector<int>{0, 1, 4, 9, 16});
}

TEST_CASE("comm::local: a barrier names the rank that did not arrive", "[comm][local]") {
    hitch::comm::local_options options;
    options.timeout_s = 0.3;
    CHECK_THROWS_WITH(run_local(
                          3,
                          [](local& comm) {
                              if (comm.rank() != 2) comm.barrier();
                          },
                          options),
                      Catch::Contains("rank 2 did not arrive") && Catch::Contains("barrier #0"));
}

TEST_CASE("comm::local: invalid world options are config_error", "[comm][local]") {
    CHECK_THROWS_AS(hitch::comm::local_world(0), hitch::config_error);
    hitch::comm::local_options bad;
    bad.timeout_s = 0;
    CHECK_THROWS_WITH(hitch::comm::local_world(2, bad), Catch::Contains("timeout_s"));
    hitch::comm::local_world world(2);
    CHECK_THROWS_AS(world.communicator(2), hitch::config_error);
}

TEST_CASE("comm::local: a pending request destroyed early is cancelled, not left dangling", "[comm][local]") {
    REQUIRE_NOTHROW(run_local(2, [](local& comm) {
        const int peer = 1 - comm.rank();
        {
            std::vector<float> scratch(4);
            auto abandoned = comm.irecv(std::span<float>(scratch), peer, 5);
        }  // cancelled here; the message below must go to the next receive
        comm.barrier();
        std::vector<float> out(4, static_cast<float>(comm.rank())), in(4);
        auto s = comm.isend(std::span<const float>(out), peer, 5);
        comm.irecv(std::span<float>(in), peer, 5).wait();
        s.wait();
        hitch_test::expect(in[0] == static_cast<float>(peer), "delivered to the live receive");
    }));
}

namespace capability_stand_ins {
struct nothing {};
struct one_address_space {
    static constexpr bool shares_address_space = true;
};
struct separate_address_spaces {
    static constexpr bool shares_address_space = false;
};
struct knows_layout {
    hitch::node_layout node_layout();
};
struct layout_as_int {
    int node_layout();
};
struct mapping {
    std::byte* part(int) const;
};
struct maps_memory {
    std::shared_ptr<mapping> map_node_memory(std::size_t bytes_per_rank);
};
struct maps_to_void {
    void* map_node_memory(std::size_t bytes_per_rank);
};
struct carries_cuda {
    bool carries(hitch::memory_space) const;
};
struct carries_nothing_typed {
    void carries(hitch::memory_space) const;
};
}  // namespace capability_stand_ins

TEST_CASE("communicator capabilities: stand-ins that do and do not model each", "[comm][concepts]") {
    namespace s = capability_stand_ins;
    STATIC_REQUIRE(hitch::shares_address_space<s::one_address_space>);
    STATIC_REQUIRE_FALSE(hitch::shares_address_space<s::separate_address_spaces>);
    STATIC_REQUIRE_FALSE(hitch::shares_address_space<s::nothing>);
    STATIC_REQUIRE(hitch::has_node_layout<s::knows_layout>);
    STATIC_REQUIRE_FALSE(hitch::has_node_layout<s::layout_as_int>);
    STATIC_REQUIRE_FALSE(hitch::has_node_layout<s::nothing>);
    STATIC_REQUIRE(hitch::maps_node_memory<s::maps_memory>);
    STATIC_REQUIRE_FALSE(hitch::maps_node_memory<s::maps_to_void>);
    STATIC_REQUIRE_FALSE(hitch::maps_node_memory<s::nothing>);
    STATIC_REQUIRE(hitch::carries_device_memory<s::carries_cuda>);
    STATIC_REQUIRE_FALSE(hitch::carries_device_memory<s::carries_nothing_typed>);
    STATIC_REQUIRE_FALSE(hitch::carries_device_memory<s::nothing>);

    STATIC_REQUIRE(hitch::shares_address_space<local>);
    STATIC_REQUIRE(hitch::has_node_layout<local>);
    STATIC_REQUIRE_FALSE(hitch::maps_node_memory<local>);
    STATIC_REQUIRE_FALSE(hitch::carries_device_memory<local>);
}

TEST_CASE("comm::local: every rank is on one node, in the world and in a split", "[comm][local]") {
    for (int p : {1, 2, 3, 5}) {
        CAPTURE(p);
        REQUIRE_NOTHROW(run_local(p, [p](local& comm) {
            const hitch::node_layout layout = comm.node_layout();
            if (layout.nodes != 1 || layout.node_of_rank != std::vector<int>(static_cast<std::size_t>(p), 0) ||
                !layout.single_node() || layout.ranks_on(0).size() != static_cast<std::size_t>(p))
                throw std::logic_error("comm::local: not one node");
            local half = comm.split(comm.rank() % 2, comm.rank());
            if (half.node_layout().node_of_rank.size() != static_cast<std::size_t>(half.size()) ||
                half.node_layout().nodes != 1)
                throw std::logic_error("comm::local split: not one node");
        }));
    }
}

TEST_CASE("local_rank and local_size: a rank's place on its node, from the layout", "[comm][concepts]") {
    hitch::node_layout layout;
    layout.node_of_rank = {0, 0, 1, 1, 1, 0, 2};
    layout.nodes = 3;
    const std::vector<int> local_rank = {0, 1, 0, 1, 2, 2, 0};
    const std::vector<int> local_size = {3, 3, 3, 3, 3, 3, 1};
    for (int r = 0; r < 7; ++r) {
        CAPTURE(r);
        CHECK(layout.local_rank(r) == local_rank[static_cast<std::size_t>(r)]);
        CHECK(layout.local_size(r) == local_size[static_cast<std::size_t>(r)]);
    }
    // comm::local is one node: local rank = rank, local size = size; in a split, the split's.
    REQUIRE_NOTHROW(run_local(3, [](local& comm) {
        if (hitch::local_rank(comm) != comm.rank() || hitch::local_size(comm) != 3)
            throw std::logic_error("comm::local: local rank or size wrong");
        local half = comm.split(comm.rank() % 2, comm.rank());
        if (hitch::local_rank(half) != half.rank() || hitch::local_size(half) != half.size())
            throw std::logic_error("comm::local split: local rank or size wrong");
    }));
}

namespace {
/// comm::local without its node_layout(): a communicator that cannot tell where its ranks run.
struct layoutless {
    local* c;
    [[nodiscard]] int rank() const { return c->rank(); }
    [[nodiscard]] int size() const { return c->size(); }
};
}  // namespace

TEST_CASE("a communicator without a node layout counts as one node per rank", "[comm][concepts]") {
    STATIC_REQUIRE_FALSE(hitch::has_node_layout<layoutless>);
    REQUIRE_NOTHROW(run_local(3, [](local& comm) {
        layoutless l{&comm};
        const hitch::node_layout layout = hitch::node_layout_of(l);
        if (layout.nodes != 3 || hitch::local_rank(l) != 0 || hitch::local_size(l) != 1)
            throw std::logic_error("layoutless: not one node per rank");
    }));
}
