#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "hitch/core/parallel.hpp"

TEST_CASE("static_chunk covers [0, n) in aligned contiguous pieces", "[parallel]") {
    for (std::size_t n : {0u, 1u, 15u, 16u, 17u, 1000u, 4097u, 100000u})
        for (std::size_t chunks : {1u, 2u, 3u, 7u})
            for (std::size_t align : {1u, 16u, 4096u}) {
                std::size_t next = 0;
                for (std::size_t c = 0; c < chunks; ++c) {
                    const auto [b, e] = hitch::static_chunk(n, chunks, c, align);
                    INFO("n " << n << " chunks " << chunks << " align " << align << " chunk " << c);
                    REQUIRE(b == next);
                    REQUIRE(b <= e);
                    if (c + 1 < chunks) REQUIRE(e % align == 0);
                    next = e;
                }
                REQUIRE(next == n);
            }
}

TEST_CASE("parallel_for visits every element exactly once on every width", "[parallel]") {
    hitch::thread_pool pool(4);
    for (std::size_t threads : {1u, 2u, 3u, 4u, 9u})
        for (std::size_t n : {0u, 1u, 100u, 70001u, 300000u}) {
            std::vector<int> hits(n, 0);
            hitch::parallel_for(n,
                                [&](std::size_t b, std::size_t e) {
                                    for (std::size_t i = b; i < e; ++i) ++hits[i];
                                },
                                {.threads = threads, .min_chunk = 1000, .pool = &pool});
            CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
        }
}

TEST_CASE("parallel_for uses several threads when asked", "[parallel]") {
    hitch::thread_pool pool(2);
    std::vector<std::thread::id> ids(2);
    std::atomic<int> arrived{0};
    // Each chunk waits for the other, so both must run at once on two threads. The wait is bounded in time (10 s),
    // not in spins, so a loaded machine that is slow to wake the worker does not fail the test.
    hitch::parallel_chunks(2,
                           [&](std::size_t c) {
                               ids[c] = std::this_thread::get_id();
                               ++arrived;
                               const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
                               while (arrived.load() < 2 && std::chrono::steady_clock::now() < until)
                                   std::this_thread::yield();
                           },
                           {.pool = &pool});
    CHECK(arrived.load() == 2);
    CHECK(ids[0] != ids[1]);
}

TEST_CASE("an exception in a chunk reaches the caller and the pool stays usable", "[parallel]") {
    hitch::thread_pool pool(3);
    CHECK_THROWS_WITH(hitch::parallel_chunks(8,
                                             [&](std::size_t c) {
                                                 if (c == 5) throw std::runtime_error("chunk 5 failed");
                                             },
                                             {.pool = &pool}),
                      "chunk 5 failed");
    std::atomic<std::size_t> sum{0};
    hitch::parallel_chunks(8, [&](std::size_t c) { sum += c; }, {.pool = &pool});
    CHECK(sum.load() == 28);
}

TEST_CASE("parallel_for is safe from several threads at once and when nested", "[parallel]") {
    hitch::thread_pool pool(2);
    std::vector<std::thread> callers;
    std::vector<long long> sums(4, 0);
    for (int k = 0; k < 4; ++k)
        callers.emplace_back([&, k] {
            for (int round = 0; round < 50; ++round) {
                std::vector<long long> part(8, 0);
                hitch::parallel_chunks(8,
                                       [&](std::size_t c) {
                                           // nested: each chunk runs its own parallel loop on the same pool
                                           std::atomic<long long> inner{0};
                                           hitch::parallel_for(1000,
                                                               [&](std::size_t b, std::size_t e) {
                                                                   long long s = 0;
                                                                   for (std::size_t i = b; i < e; ++i)
                                                                       s += static_cast<long long>(i);
                                                                   inner += s;
                                                               },
                                                               {.threads = 2, .min_chunk = 100, .pool = &pool});
                                           part[c] = inner.load() + static_cast<long long>(c);
                                       },
                                       {.pool = &pool});
                sums[static_cast<std::size_t>(k)] += std::accumulate(part.begin(), part.end(), 0LL);
            }
        });
    for (auto& t : callers) t.join();
    for (long long s : sums) CHECK(s == 50 * (8 * 499500LL + 28));
}

TEST_CASE("thread_pool and parallel_options validate their arguments", "[parallel]") {
    CHECK_THROWS_AS(hitch::thread_pool(0), hitch::config_error);
    CHECK_THROWS_WITH(hitch::parallel_for(10, [](std::size_t, std::size_t) {}, {.align = 0}),
                      Catch::Contains("align = 0"));
    CHECK(hitch::thread_pool::shared().size() >= 1);
}
