// comm::local: the communicator suite for world sizes 1 to 8, and the helper's failure semantics.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "hitch/comm/local.hpp"
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
    for (int p : {2, 3}) REQUIRE_NOTHROW(run_local(p, [](local& comm) {
        hitch_test::message_sizes(comm, {std::size_t{64} << 20});
    }));
}

TEST_CASE("comm::local: a receive nobody sends to times out within its deadline", "[comm][local]") {
    REQUIRE_NOTHROW(run_local(2, [](local& comm) { hitch_test::receive_times_out(comm, 0.3); }));
}

TEST_CASE("comm::local: a rank that throws releases every other rank and the caller sees the original error",
          "[comm][local]") {
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

    // Ranks blocked in a barrier, a probe and a large send are released too.
    CHECK_THROWS_AS(run_local(4,
                              [](local& comm) {
                                  if (comm.rank() == 0) throw std::runtime_error("fail");
                                  if (comm.rank() == 1) comm.barrier();
                                  if (comm.rank() == 2) (void)comm.probe(0, 1);
                                  if (comm.rank() == 3) {
                                      std::vector<float> big(1 << 20);
                                      comm.isend(std::span<const float>(big), 0, 1).wait();
                                  }
                              }),
                    std::runtime_error);
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
