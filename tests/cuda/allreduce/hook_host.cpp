// The collectives' hook for buffers outside host memory (hitch/allreduce/space.hpp), without a GPU: a stand-in
// backend for memory_space::cuda stages "device" buffers (host memory labelled cuda) through the staging plan and
// run_pipeline over simulated streams, as the CUDA backend does with real ones. Over comm::local threads: every
// collective, blocking and not, against the serial reference; one piece gives the host call's very bytes (ranks with
// host and device buffers meet in one call); ranks that cut differently get mismatch_error, not a hang; a call's
// messages (space_messages) carry a backend's own traffic; a space without a backend is a config_error that says
// what to include.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "../../allreduce/reference.hpp"
#include "hitch/allreduce/allreduce.hpp"
#include "hitch/allreduce/space.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/cuda/allreduce/options.hpp"
#include "hitch/cuda/allreduce/staging_plan.hpp"
#include "simulated_streams.hpp"

using namespace hitch::allreduce;
using hitch::memory_space;
using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;
namespace ca = hitch::cuda::allreduce;

namespace {

/// Stages like the CUDA backend, with memcpy for copies; optionally runs in-place allgathers with its own messages.
class stand_in_backend final : public space_backend {
public:
    std::function<ca::device_options(int rank)> options = [](int) { return ca::device_options{}; };
    bool own_allgather = false;
    std::atomic<int> runs{0};
    std::atomic<int> pipelined{0};

    [[nodiscard]] std::uint64_t plan(const space_call& call) override {
        if (own(call)) return 0x5eed;
        return make(call).fingerprint();
    }
    void run(const space_call& call, const host_runner& host, space_messages& messages) override {
        ++runs;
        expect(call.slots != nullptr && call.communicator == "comm::local" && !call.carries, "call fields");
        if (own(call)) return allgather(call, messages);
        if (call.buffer.space == memory_space::host) {
            if (call.input.bytes != 0)
                std::memcpy(static_cast<std::byte*>(call.buffer.data) + call.input_offset, call.input.data,
                            call.input.bytes);
            host(static_cast<std::byte*>(call.buffer.data), 0, call.buffer.bytes);
            return;
        }
        const ca::staging_plan p = make(call);
        if (p.pipelined()) ++pipelined;
        std::vector<std::byte> pinned(p.pinned_bytes());
        hitch_test::simulated_streams streams(pinned.data(), pinned.size(), p.slots(),
                                              static_cast<std::uint64_t>(call.rank) + 1);
        ca::run_pipeline(p, call, host, pinned.data(), streams);
        expect(streams.hazards == 0 && streams.deadlocks == 0, "staging hazards");
    }

private:
    [[nodiscard]] bool own(const space_call& call) const {
        return own_allgather && call.what == operation::allgather && call.input.bytes == 0 && call.size > 1;
    }
    [[nodiscard]] ca::staging_plan make(const space_call& call) const {
        return ca::staging_plan::make(call.buffer.bytes, call.element_bytes, call.piecewise, call.reads, call.writes,
                                      options(call.rank));
    }
    /// Every rank sends its block to every other rank and receives theirs in place.
    static void allgather(const space_call& call, space_messages& m) {
        expect(m.rank() == call.rank && m.size() == call.size, "messages' rank and size");
        auto* data = static_cast<std::byte*>(call.buffer.data);
        const std::size_t n = call.buffer.bytes / call.element_bytes;
        std::vector<std::size_t> ids;
        for (int peer = 0; peer < call.size; ++peer) {
            if (peer == call.rank) continue;
            const block theirs = partition(n, call.size, peer), mine = partition(n, call.size, call.rank);
            ids.push_back(
                m.receive(data + theirs.offset * call.element_bytes, theirs.count * call.element_bytes, peer, 5));
            ids.push_back(m.send(data + mine.offset * call.element_bytes, mine.count * call.element_bytes, peer, 5));
        }
        for (std::size_t id : ids) m.wait(id);
        for (std::size_t id : ids) expect(m.test(id), "a waited message tests complete");
        m.wait_all();
    }
};

/// Installs a backend for memory_space::cuda for the scope.
class installed {
public:
    explicit installed(space_backend* b) : previous_(set_space_backend(memory_space::cuda, b)) {}
    installed(const installed&) = delete;
    installed& operator=(const installed&) = delete;
    ~installed() { set_space_backend(memory_space::cuda, previous_); }

private:
    space_backend* previous_;
};

template <class T>
hitch::tensor_view<T> on_gpu(std::vector<T>& v) {
    return {v.data(), v.size(), memory_space::cuda};
}

template <class T>
auto exact(std::uint32_t salt) {
    return [salt](int r, std::size_t i) { return hitch_test::exact_value<T>(r, i, salt); };
}

template <class T>
void expect_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
    const long at = hitch_test::first_difference<T>(got, want);
    expect(at < 0, what + ": first difference at " + std::to_string(at));
}

ca::device_options small_pieces() {
    ca::device_options o;
    o.chunk_bytes = 4096;
    return o;
}

template <class Schedule, class T>
void allreduce_case(stand_in_backend& b, int p, std::size_t n, reduce_op op, bool async) {
    INFO("p = " << p << " n = " << n << " " << name(op) << " " << Schedule::name << (async ? " async" : ""));
    const auto want = hitch_test::reference<T>(p, n, op, exact<T>(3));
    REQUIRE_NOTHROW(run_local(p, [&](local& c) {
        group g(c);
        auto data = hitch_test::make_input<T>(c.rank(), n, exact<T>(3));
        if (async) {
            handle h = allreduce_async(g, on_gpu(data), op, Schedule{});
            h.wait();
        } else {
            allreduce(g, on_gpu(data), op, Schedule{});
        }
        expect_equal(data, want, "allreduce");
    }));
    (void)b;
}

}  // namespace

TEST_CASE("all-reduce of device buffers through the hook, every op, staged in pieces", "[cuda][allreduce][host]") {
    stand_in_backend b;
    b.options = [](int) { return small_pieces(); };
    const installed on(&b);
    for (int p : {1, 2, 3, 4})
        for (std::size_t n :
             {std::size_t{0}, std::size_t{1}, std::size_t{31}, std::size_t{32}, std::size_t{33}, std::size_t{70001}})
            for (reduce_op op : {reduce_op::sum, reduce_op::average, reduce_op::min, reduce_op::max}) {
                allreduce_case<ring, float>(b, p, n, op, false);
                allreduce_case<rabenseifner, float>(b, p, n, op, n % 2 == 1);
            }
    for (int p : {2, 3}) {
        allreduce_case<binary_tree, hitch::half>(b, p, 70001, reduce_op::sum, true);
        allreduce_case<recursive_doubling, double>(b, p, 33, reduce_op::average, false);
        allreduce_case<parameter_server, hitch::bfloat16>(b, p, 70001, reduce_op::max, false);
    }
    CHECK(b.pipelined > 0);
}

TEST_CASE("one piece gives the host call's bytes, so host and device ranks meet in one call",
          "[cuda][allreduce][host]") {
    stand_in_backend b;
    const installed on(&b);
    for (int p : {2, 3, 4})
        REQUIRE_NOTHROW(run_local(p, [&](local& c) {
            group g(c);
            const auto rough = [](int r, std::size_t i) { return hitch_test::rough_value<float>(r, i, 9); };
            auto host = hitch_test::make_input<float>(c.rank(), 5003, rough);
            auto device = host;
            allreduce(g, hitch::view(host), reduce_op::sum, ring{});
            allreduce(g, on_gpu(device), reduce_op::sum, ring{});
            expect_equal(device, host, "device against host");
            // Even ranks on "device", odd on host: the same call.
            auto mixed = hitch_test::make_input<float>(c.rank(), 5003, rough);
            allreduce(g, c.rank() % 2 == 0 ? on_gpu(mixed) : hitch::view(mixed), reduce_op::sum, ring{});
            expect_equal(mixed, host, "mixed ranks");
        }));
}

TEST_CASE("ranks that cut a call differently get mismatch_error on every rank", "[cuda][allreduce][host]") {
    stand_in_backend b;
    b.options = [](int rank) {
        ca::device_options o;
        o.chunk_bytes = rank == 0 ? 4096 : 8192;
        return o;
    };
    const installed on(&b);
    std::mutex m;
    int mismatches = 0;
    REQUIRE_NOTHROW(run_local(3, [&](local& c) {
        group g(c);
        std::vector<float> data(100000, 1.0f);
        try {
            allreduce(g, on_gpu(data), reduce_op::sum, ring{});
        } catch (const hitch::mismatch_error& e) {
            expect(std::string(e.what()).find("fingerprint") != std::string::npos, "the message names the cut");
            std::lock_guard lock(m);
            ++mismatches;
        }
        // The group is still usable: the next call agrees (one piece everywhere).
        std::vector<float> small(100, 1.0f);
        allreduce(g, on_gpu(small), reduce_op::sum, ring{});
        expect(small[99] == 3.0f, "a call after the mismatch");
    }));
    CHECK(mismatches == 3);
    // A host rank and a device rank that cuts: a mismatch, not a hang.
    b.options = [](int) { return small_pieces(); };
    mismatches = 0;
    REQUIRE_NOTHROW(run_local(2, [&](local& c) {
        group g(c);
        std::vector<float> data(100000, 1.0f);
        try {
            allreduce(g, c.rank() == 0 ? on_gpu(data) : hitch::view(data), reduce_op::sum, ring{});
        } catch (const hitch::mismatch_error&) {
            std::lock_guard lock(m);
            ++mismatches;
        }
    }));
    CHECK(mismatches == 2);
}

TEST_CASE("reduce_scatter, allgather, broadcast and reduce of device buffers through the hook",
          "[cuda][allreduce][host]") {
    stand_in_backend b;
    b.options = [](int) { return small_pieces(); };
    const installed on(&b);
    for (int p : {1, 2, 3, 4})
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{33}, std::size_t{70001}})
            for (bool async : {false, true}) {
                INFO("p = " << p << " n = " << n << (async ? " async" : ""));
                const auto want = hitch_test::reference<float>(p, n, reduce_op::sum, exact<float>(5));
                REQUIRE_NOTHROW(run_local(p, [&](local& c) {
                    group g(c);
                    const int root = p - 1;
                    const auto value = exact<float>(5);
                    // reduce_scatter: this rank's block is reduced, as on the host (the rest: the host's partials).
                    auto rs = hitch_test::make_input<float>(c.rank(), n, value);
                    auto rs_host = rs;
                    if (async)
                        reduce_scatter_async(g, on_gpu(rs)).wait();
                    else
                        (void)reduce_scatter(g, on_gpu(rs));
                    (void)reduce_scatter(g, hitch::view(rs_host));
                    expect_equal(rs, rs_host, "reduce_scatter against the host's");
                    const block own = partition(n, p, c.rank());
                    for (std::size_t i = 0; i < own.count; ++i)
                        expect(rs[own.offset + i] == want[own.offset + i], "reduce_scatter block");
                    // allgather in place
                    std::vector<float> ag(n, -1.0f);
                    for (std::size_t i = 0; i < own.count; ++i) ag[own.offset + i] = 0.25f * float(own.offset + i);
                    if (async)
                        allgather_async(g, on_gpu(ag)).wait();
                    else
                        allgather(g, on_gpu(ag));
                    for (std::size_t i = 0; i < n; ++i) expect(ag[i] == 0.25f * float(i), "allgather in place");
                    // allgather into: device mine and all, host mine and device all, device mine and host all
                    const std::size_t m = n / 3 + 1;
                    std::vector<std::int32_t> mine(m);
                    for (std::size_t i = 0; i < m; ++i) mine[i] = c.rank() * 100000 + static_cast<std::int32_t>(i);
                    for (int form = 0; form < 3; ++form) {
                        std::vector<std::int32_t> all(m * static_cast<std::size_t>(p), -1);
                        const hitch::tensor_view<const std::int32_t> in(
                            mine.data(), m, form == 1 ? memory_space::host : memory_space::cuda);
                        const hitch::tensor_view<std::int32_t> out(all.data(), all.size(),
                                                                   form == 2 ? memory_space::host : memory_space::cuda);
                        if (async)
                            allgather_async(g, in, out).wait();
                        else
                            allgather(g, in, out);
                        for (int r = 0; r < p; ++r)
                            for (std::size_t i = 0; i < m; ++i)
                                expect(all[static_cast<std::size_t>(r) * m + i] ==
                                           r * 100000 + static_cast<std::int32_t>(i),
                                       "allgather into, form " + std::to_string(form));
                    }
                    // broadcast, both schedules, pieces
                    for (bool chain : {false, true}) {
                        std::vector<double> bc(n, c.rank() == root ? 0.0 : -7.0);
                        if (c.rank() == root)
                            for (std::size_t i = 0; i < n; ++i) bc[i] = 1.5 * double(i);
                        if (chain)
                            broadcast(g, on_gpu(bc), root, ring{});
                        else if (async)
                            broadcast_async(g, on_gpu(bc), root).wait();
                        else
                            broadcast(g, on_gpu(bc), root);
                        for (std::size_t i = 0; i < n; ++i) expect(bc[i] == 1.5 * double(i), "broadcast");
                    }
                    // reduce: the root has the reduction, the others keep their data
                    for (bool chain : {false, true}) {
                        auto rd = hitch_test::make_input<float>(c.rank(), n, value);
                        const auto before = rd;
                        if (chain)
                            reduce(g, on_gpu(rd), reduce_op::sum, root, ring{});
                        else if (async)
                            reduce_async(g, on_gpu(rd), reduce_op::sum, root).wait();
                        else
                            reduce(g, on_gpu(rd), reduce_op::sum, root);
                        expect_equal(rd, c.rank() == root ? want : before, "reduce");
                    }
                }));
            }
}

TEST_CASE("a backend's own messages go through the call's space_messages", "[cuda][allreduce][host]") {
    stand_in_backend b;
    b.own_allgather = true;
    const installed on(&b);
    for (int p : {2, 3, 5})
        for (bool shared_memory : {true, false})
            REQUIRE_NOTHROW(run_local(p, [&](local& c) {
                group g(c);
                call_options o;
                o.shared_memory = shared_memory;
                const std::size_t n = 1001;
                std::vector<double> data(n, -1.0);
                const block own = partition(n, p, c.rank());
                for (std::size_t i = 0; i < own.count; ++i) data[own.offset + i] = double(own.offset + i);
                allgather(g, on_gpu(data), o);
                for (std::size_t i = 0; i < n; ++i) expect(data[i] == double(i), "own allgather");
            }));
}

TEST_CASE("a buffer in a space without a backend is a config_error that names the header", "[cuda][allreduce][host]") {
    const installed none(nullptr);
    REQUIRE_NOTHROW(run_local(1, [&](local& c) {
        group g(c);
        std::vector<float> data(4);
        try {
            allreduce(g, on_gpu(data));
            expect(false, "no error");
        } catch (const hitch::config_error& e) {
            expect(std::string(e.what()).find("hitch/cuda/allreduce/collectives.hpp") != std::string::npos,
                   std::string("the message: ") + e.what());
        }
    }));
}
