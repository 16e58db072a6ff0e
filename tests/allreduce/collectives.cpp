// reduce_scatter, allgather (in place and into a buffer), allgather_bytes, broadcast and reduce over comm::local,
// each against what the serial reference says every rank should hold; the non-blocking forms and their ordering;
// deadlines and argument errors.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/local.hpp"
#include "reference.hpp"

using namespace hitch::allreduce;
using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;

namespace {

template <class T>
auto exact(std::uint32_t salt) {
    return [salt](int r, std::size_t i) { return hitch_test::exact_value<T>(r, i, salt); };
}

}  // namespace

TEST_CASE("reduce_scatter leaves each rank its block of the reduction", "[allreduce][collectives]") {
    for (int p : {1, 2, 3, 4, 5, 7, 8})
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{65539}})
            for (bool direct : {true, false})
                for (reduce_op op : {reduce_op::sum, reduce_op::average, reduce_op::max}) {
                    const auto want = hitch_test::reference<float>(p, n, op, exact<float>(11));
                    INFO("p = " << p << " n = " << n << " " << name(op) << (direct ? " direct" : " messages"));
                    REQUIRE_NOTHROW(run_local(p, [&](local& c) {
                        group g(c);
                        call_options o;
                        o.shared_memory = direct;
                        auto data = hitch_test::make_input<float>(c.rank(), n, exact<float>(11));
                        const hitch::tensor_view<float> mine = reduce_scatter(g, hitch::view(data), op, o);
                        const block b = partition(n, p, c.rank());
                        expect(mine.data() == data.data() + b.offset && mine.size() == b.count, "returned block");
                        for (std::size_t i = 0; i < b.count; ++i)
                            expect(mine[i] == want[b.offset + i], "element " + std::to_string(b.offset + i));
                    }));
                }
}

TEST_CASE("allgather in place and into a buffer, any element type", "[allreduce][collectives]") {
    for (int p : {1, 2, 3, 5, 8})
        for (std::size_t m : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{40000}})
            for (bool direct : {true, false}) {
                INFO("p = " << p << " m = " << m << (direct ? " direct" : " messages"));
                REQUIRE_NOTHROW(run_local(p, [&](local& c) {
                    group g(c);
                    call_options o;
                    o.shared_memory = direct;
                    const auto value = [](int r, std::size_t i) {
                        return static_cast<std::int32_t>(r * 1000003 + static_cast<int>(i));
                    };
                    // into a buffer
                    std::vector<std::int32_t> mine(m), all(m * static_cast<std::size_t>(p), -1);
                    for (std::size_t i = 0; i < m; ++i) mine[i] = value(c.rank(), i);
                    allgather(g, hitch::tensor_view<const std::int32_t>(mine.data(), m), hitch::view(all), o);
                    for (int r = 0; r < p; ++r)
                        for (std::size_t i = 0; i < m; ++i)
                            expect(all[static_cast<std::size_t>(r) * m + i] == value(r, i), "allgather into");
                    // in place, uneven blocks of doubles
                    const std::size_t n = m * 3 + 2;
                    std::vector<double> data(n, -1.0);
                    const block b = partition(n, p, c.rank());
                    for (std::size_t i = 0; i < b.count; ++i)
                        data[b.offset + i] = 0.5 * static_cast<double>(b.offset + i);
                    allgather(g, hitch::view(data), o);
                    for (std::size_t i = 0; i < n; ++i)
                        expect(data[i] == 0.5 * static_cast<double>(i), "allgather in place");
                }));
            }
}

TEST_CASE("allgather_bytes gathers blobs of different sizes, empty ones included", "[allreduce][collectives]") {
    for (int p : {1, 2, 3, 4, 7})
        for (bool direct : {true, false}) {
            INFO("p = " << p << (direct ? " direct" : " messages"));
            REQUIRE_NOTHROW(run_local(p, [&](local& c) {
                group g(c);
                call_options o;
                o.shared_memory = direct;
                const auto blob_size = [](int r, int round) {
                    return static_cast<std::size_t>((r * 7919 + round * 104729) % 5000) * (r % 3 == 1 ? 0 : 1);
                };
                for (int round = 0; round < 3; ++round) {
                    std::vector<std::byte> mine(blob_size(c.rank(), round));
                    for (std::size_t i = 0; i < mine.size(); ++i)
                        mine[i] = static_cast<std::byte>((c.rank() * 31 + static_cast<int>(i) + round) & 0xff);
                    const byte_blocks all = allgather_bytes(g, std::span<const std::byte>(mine), o);
                    expect(all.ranks() == p, "one blob per rank");
                    for (int r = 0; r < p; ++r) {
                        const auto blob = all.blob(r);
                        expect(blob.size() == blob_size(r, round), "blob size of rank " + std::to_string(r));
                        for (std::size_t i = 0; i < blob.size(); ++i)
                            expect(blob[i] == static_cast<std::byte>((r * 31 + static_cast<int>(i) + round) & 0xff),
                                   "blob bytes");
                    }
                }
                // the non-blocking form
                std::vector<std::byte> mine(static_cast<std::size_t>(c.rank()) + 1, std::byte{0x5a});
                byte_blocks out;
                handle h = allgather_bytes_async(g, std::span<const std::byte>(mine), out, o);
                h.wait();
                for (int r = 0; r < p; ++r) expect(out.blob(r).size() == static_cast<std::size_t>(r) + 1, "async blob");
            }));
        }
}

TEST_CASE("broadcast and reduce with every root, tree and chain", "[allreduce][collectives]") {
    for (int p : {1, 2, 3, 5, 8})
        for (std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{3001}})
            for (bool direct : {true, false}) {
                INFO("p = " << p << " n = " << n << (direct ? " direct" : " messages"));
                binary_tree::options_type small_tree;
                small_tree.segment_bytes = 256;
                ring::options_type small_chain;
                small_chain.segment_bytes = 256;
                const auto want = hitch_test::reference<float>(p, n, reduce_op::average, exact<float>(5));
                REQUIRE_NOTHROW(run_local(p, [&](local& c) {
                    group g(c);
                    call_options o;
                    o.shared_memory = direct;
                    for (int root = 0; root < p; ++root) {
                        std::vector<std::uint16_t> words(n, 0);
                        if (c.rank() == root)
                            for (std::size_t i = 0; i < n; ++i)
                                words[i] = static_cast<std::uint16_t>(i * 3 + static_cast<std::size_t>(root));
                        std::vector<hitch::bfloat16> b16(n, hitch::bfloat16(-1.0f));
                        if (c.rank() == root)
                            for (std::size_t i = 0; i < n; ++i) b16[i] = hitch::bfloat16(static_cast<float>(i % 50));
                        std::vector<std::uint8_t> raw(n);
                        for (std::size_t i = 0; i < n; ++i)
                            raw[i] = static_cast<std::uint8_t>(c.rank() == root ? i : 0);
                        broadcast(g, hitch::view(b16), root, binary_tree(small_tree), o);
                        broadcast(g, hitch::view(raw), root, ring(small_chain), o);
                        std::vector<float> words_as_float(n);  // broadcast a float buffer with the default tree
                        for (std::size_t i = 0; i < n; ++i)
                            words_as_float[i] = c.rank() == root ? static_cast<float>(words[i]) : 0.0f;
                        broadcast(g, hitch::view(words_as_float), root);
                        for (std::size_t i = 0; i < n; ++i) {
                            expect(static_cast<float>(b16[i]) == static_cast<float>(i % 50), "tree broadcast");
                            expect(raw[i] == static_cast<std::uint8_t>(i), "chain broadcast");
                            expect(words_as_float[i] == static_cast<float>(i * 3 + static_cast<std::size_t>(root)),
                                   "default broadcast");
                        }
                        for (int variant = 0; variant < 2; ++variant) {
                            auto data = hitch_test::make_input<float>(c.rank(), n, exact<float>(5));
                            const auto before = data;
                            if (variant == 0)
                                reduce(g, hitch::view(data), reduce_op::average, root, binary_tree(small_tree), o);
                            else
                                reduce(g, hitch::view(data), reduce_op::average, root, ring(small_chain), o);
                            if (c.rank() == root)
                                expect(data == want, "reduce result on the root");
                            else
                                expect(data == before, "reduce leaves the other ranks' data as it was");
                        }
                    }
                }));
            }
}

TEST_CASE("non-blocking collectives run in issue order and overlap the caller", "[allreduce][async]") {
    for (int p : {1, 2, 3, 4}) {
        INFO("p = " << p);
        REQUIRE_NOTHROW(run_local(p, [&](local& c) {
            group g(c);
            constexpr int calls = 24;
            std::vector<std::vector<float>> buffers(calls);
            std::vector<handle> handles;
            for (int k = 0; k < calls; ++k) {
                buffers[static_cast<std::size_t>(k)].assign(static_cast<std::size_t>(1 + 997 * k),
                                                            static_cast<float>(c.rank() + k));
                const reduce_op op = k % 3 == 0 ? reduce_op::max : reduce_op::sum;
                if (k % 4 == 1)
                    handles.push_back(allreduce_async<ring>(g, hitch::view(buffers[static_cast<std::size_t>(k)]), op));
                else if (k % 4 == 2)
                    handles.push_back(
                        allreduce_async<binary_tree>(g, hitch::view(buffers[static_cast<std::size_t>(k)]), op));
                else
                    handles.push_back(allreduce_async(g, hitch::view(buffers[static_cast<std::size_t>(k)]), op));
                expect(handles.back().sequence() == static_cast<std::uint64_t>(k),
                       "sequence numbers follow issue order");
            }
            // a blocking call issued after them runs after them
            std::vector<double> last(10, 1.0);
            allreduce<recursive_doubling>(g, hitch::view(last));
            for (double v : last) expect(v == p, "blocking call behind the queue");
            for (int k = calls - 1; k >= 0; --k) handles[static_cast<std::size_t>(k)].wait();  // any order of waiting
            for (int k = 0; k < calls; ++k) {
                float sum = 0, max = 0;
                for (int r = 0; r < p; ++r) {
                    sum += static_cast<float>(r + k);
                    max = std::max(max, static_cast<float>(r + k));
                }
                const float want = k % 3 == 0 ? max : sum;
                for (float v : buffers[static_cast<std::size_t>(k)])
                    expect(v == want, "async result " + std::to_string(k));
            }
            expect(g.calls() == calls + 1, "calls counted");
            // test() polls without blocking; a finished handle reports true and can be waited again
            std::vector<float> x(100000, 1.0f);
            handle h = allreduce_async<ring>(g, hitch::view(x));
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
            while (!h.test()) expect(std::chrono::steady_clock::now() < deadline, "test() eventually true");
            h.wait();
            expect(x[0] == static_cast<float>(p), "polled result");
        }));
    }
}

TEST_CASE("a rank that never arrives is a timeout naming the call, not a hang", "[allreduce][deadline]") {
    hitch::comm::local_options options;
    options.timeout_s = 0.3;
    for (bool async : {false, true}) {
        const auto start = std::chrono::steady_clock::now();
        std::string message;
        try {
            run_local(
                3,
                [&](local& c) {
                    group g(c);
                    std::vector<float> v(1000, 1.0f);
                    if (c.rank() == 2) return;  // never calls
                    if (async)
                        allreduce_async<ring>(g, hitch::view(v)).wait();
                    else
                        allreduce<ring>(g, hitch::view(v));
                },
                options);
        } catch (const hitch::timeout_error& e) {
            message = e.what();
        }
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        INFO(message);
        CHECK(message.find("allreduce #0") != std::string::npos);
        CHECK(waited < 10.0);
    }
}

TEST_CASE("bad arguments are config_error before anything is sent", "[allreduce][errors]") {
    REQUIRE_NOTHROW(run_local(2, [](local& c) {
        group g(c);
        std::vector<float> v(10), all(15);
        const auto config = [](auto&& f) {
            try {
                f();
            } catch (const hitch::config_error&) {
                return true;
            }
            return false;
        };
        expect(config([&] { allreduce(g, hitch::view(v), static_cast<reduce_op>(9)); }), "bad op");
        expect(config([&] { broadcast(g, hitch::view(v), 2); }), "root out of range");
        expect(config([&] { reduce(g, hitch::view(v), reduce_op::sum, -1); }), "negative root");
        expect(config([&] { allgather(g, hitch::tensor_view<const float>(v.data(), 10), hitch::view(all)); }),
               "allgather size");
        expect(config([&] { allreduce(g, hitch::tensor_view<float>(v.data(), 10, hitch::memory_space::cuda)); }),
               "device memory");
        expect(config([&] {
                   ring::options_type o;
                   o.segment_bytes = 1;
                   ring{o};
               }),
               "ring segment too small");
        expect(config([&] {
                   parameter_server::options_type o;
                   o.servers = 0;
                   parameter_server{o};
               }),
               "no servers");
        expect(config([&] {
                   call_options o;
                   o.timeout_s = -1;
                   allreduce(g, hitch::view(v), reduce_op::sum, ring{}, o);
               }),
               "timeout");
        expect(config([&] {
                   cost_constants k;
                   k.alpha_s = -1;
                   g.set_constants(k);
               }),
               "negative alpha");
        // nothing was issued by the failed calls: the group still works
        allreduce<ring>(g, hitch::view(v));
        expect(g.calls() == 1, "rejected calls take no sequence number");
    }));
}
