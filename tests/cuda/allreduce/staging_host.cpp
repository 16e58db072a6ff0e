// The host side of the collectives on GPU buffers, without a GPU: the staging plan (pieces, slots, offsets, copy
// ranges, fingerprints) for sizes 0, 1, 31, 32, 33 and 1<<20 + 3; the staged loop (run_pipeline) over simulated
// asynchronous streams that run their copies in random orders the events allow, checked for hazards (a copy or the
// host touching a slot another pending copy still uses) and for its result; which path a call takes; and the
// CUDA-aware detection with fake MPI queries and environment values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "hitch/allreduce/space.hpp"
#include "hitch/core/error.hpp"
#include "hitch/cuda/allreduce/cuda_aware.hpp"
#include "hitch/cuda/allreduce/options.hpp"
#include "hitch/cuda/allreduce/path.hpp"
#include "hitch/cuda/allreduce/staging_plan.hpp"
#include "simulated_streams.hpp"

namespace {

namespace ca = hitch::cuda::allreduce;
using hitch::allreduce::byte_range;
using hitch::allreduce::operation;
using hitch::allreduce::space_call;

constexpr std::size_t element_counts[] = {0, 1, 31, 32, 33, (std::size_t{1} << 20) + 3};

ca::device_options with_chunk(std::size_t chunk, int slots = 3) {
    ca::device_options o;
    o.chunk_bytes = chunk;
    o.slots = slots;
    return o;
}

/// The plan's invariants for any call.
void check_plan(const ca::staging_plan& plan, std::size_t bytes, std::size_t element, bool piecewise, byte_range reads,
                byte_range writes, const ca::device_options& o) {
    INFO("bytes " << bytes << " element " << element << " chunk " << o.chunk_bytes << " slots " << o.slots
                  << (piecewise ? " piecewise" : ""));
    const std::size_t chunk = o.chunk_bytes / element * element;
    const bool cut = piecewise && chunk != 0 && bytes > chunk;
    REQUIRE(plan.pieces() == (cut ? (bytes + chunk - 1) / chunk : 1));
    CHECK(plan.pipelined() == cut);
    CHECK(plan.slots() == (cut ? std::min<int>(o.slots, static_cast<int>(plan.pieces())) : 1));
    CHECK(plan.chunk_bytes() == (cut ? chunk : bytes));
    CHECK(plan.pinned_bytes() == static_cast<std::size_t>(plan.slots()) * plan.chunk_bytes());
    CHECK((plan.fingerprint() == 0) == !cut);
    std::size_t next = 0;
    for (std::size_t i = 0; i < plan.pieces(); ++i) {
        const ca::staging_piece s = plan.piece(i);
        CHECK(s.offset == next);
        CHECK(s.bytes % element == 0);
        if (i + 1 < plan.pieces()) CHECK(s.bytes == plan.chunk_bytes());
        CHECK(s.slot == static_cast<int>(i % static_cast<std::size_t>(plan.slots())));
        CHECK(s.slot_offset == static_cast<std::size_t>(s.slot) * plan.chunk_bytes());
        CHECK(s.slot_offset + s.bytes <= plan.pinned_bytes());
        CHECK(s.waits_for ==
              (i >= static_cast<std::size_t>(plan.slots()) ? static_cast<long long>(i) - plan.slots() : -1));
        CHECK(s.copy_in == ca::clip(reads, s.offset, s.bytes));
        CHECK(s.copy_out == ca::clip(writes, s.offset, s.bytes));
        CHECK(s.copy_in.offset + s.copy_in.bytes <= s.bytes);
        CHECK(s.copy_out.offset + s.copy_out.bytes <= s.bytes);
        next += s.bytes;
    }
    CHECK(next == bytes);
    CHECK_THROWS_AS(plan.piece(plan.pieces()), hitch::config_error);
}

}  // namespace

TEST_CASE("clip keeps the part of a range inside a piece", "[cuda][allreduce][host]") {
    CHECK(ca::clip({0, 100}, 10, 20) == byte_range{0, 20});
    CHECK(ca::clip({15, 3}, 10, 20) == byte_range{5, 3});
    CHECK(ca::clip({25, 10}, 10, 20) == byte_range{15, 5});
    CHECK(ca::clip({30, 10}, 10, 20) == byte_range{0, 0});
    CHECK(ca::clip({0, 10}, 10, 20) == byte_range{0, 0});
    CHECK(ca::clip({0, 0}, 0, 0) == byte_range{0, 0});
}

TEST_CASE("the staging plan cuts piecewise calls into pieces of whole elements", "[cuda][allreduce][host]") {
    for (std::size_t n : element_counts)
        for (std::size_t element : {2u, 4u, 8u})
            for (std::size_t chunk : {std::size_t{0}, std::size_t{64}, std::size_t{100}, std::size_t{4096},
                                      ca::tuning::staging_chunk_bytes})
                for (int slots : {2, 3, 5})
                    for (bool piecewise : {true, false}) {
                        const std::size_t bytes = n * element;
                        if (chunk != 0 && chunk < 4096 && bytes / std::max<std::size_t>(chunk, 1) > 100000) continue;
                        const auto o = with_chunk(chunk, slots);
                        const byte_range all{0, bytes};
                        check_plan(ca::staging_plan::make(bytes, element, piecewise, all, all, o), bytes, element,
                                   piecewise, all, all, o);
                        // A rank that reads a middle block and writes everything (allgather), or reads nothing
                        // (a broadcast's receivers).
                        const byte_range middle{bytes / 3 / element * element, bytes / 3 / element * element};
                        check_plan(ca::staging_plan::make(bytes, element, piecewise, middle, all, o), bytes, element,
                                   piecewise, middle, all, o);
                        check_plan(ca::staging_plan::make(bytes, element, piecewise, {0, 0}, all, o), bytes, element,
                                   piecewise, {0, 0}, all, o);
                    }
}

TEST_CASE("the staging plan's figures for the default chunk", "[cuda][allreduce][host]") {
    const ca::device_options o;  // 4 MiB pieces, 3 slots
    const std::size_t n = (std::size_t{1} << 20) + 3;
    const ca::staging_plan f = ca::staging_plan::make(n * 4, 4, true, {0, n * 4}, {0, n * 4}, o);
    CHECK(f.pieces() == 2);
    CHECK(f.slots() == 2);
    CHECK(f.piece(0).bytes == (std::size_t{4} << 20));
    CHECK(f.piece(1).offset == (std::size_t{4} << 20));
    CHECK(f.piece(1).bytes == 12);
    CHECK(f.piece(1).slot_offset == (std::size_t{4} << 20));
    CHECK(f.pinned_bytes() == (std::size_t{8} << 20));
    // Doubles: 8 MiB and 24 bytes, three pieces, the third reusing no slot (3 slots).
    const ca::staging_plan d = ca::staging_plan::make(n * 8, 8, true, {0, n * 8}, {0, n * 8}, o);
    CHECK(d.pieces() == 3);
    CHECK(d.piece(2).bytes == 24);
    CHECK(d.piece(2).waits_for == -1);
    // A chunk that is no whole number of elements is rounded down: 6 bytes of 4-byte floats are 4.
    const ca::staging_plan odd = ca::staging_plan::make(33 * 4, 4, true, {0, 132}, {0, 132}, with_chunk(6, 2));
    CHECK(odd.pieces() == 33);
    CHECK(odd.piece(32).offset == 128);
    CHECK(odd.piece(32).waits_for == 30);
    CHECK(odd.piece(32).slot == 0);
    // Not piecewise, or no larger than a chunk: one piece, no fingerprint, the whole buffer pinned.
    CHECK(ca::staging_plan::make(n * 4, 4, false, {0, n * 4}, {0, n * 4}, o).pieces() == 1);
    CHECK(ca::staging_plan::make(n * 4, 4, false, {0, n * 4}, {0, n * 4}, o).pinned_bytes() == n * 4);
    CHECK(ca::staging_plan::make(std::size_t{4} << 20, 4, true, {}, {}, o).fingerprint() == 0);
    CHECK(ca::staging_plan::make(0, 4, true, {}, {}, o).pinned_bytes() == 0);
    CHECK_THROWS_AS(ca::staging_plan::make(7, 4, true, {}, {}, o), hitch::config_error);
}

TEST_CASE("the staging plan's fingerprint names the cut", "[cuda][allreduce][host]") {
    const auto fp = [](std::size_t bytes, std::size_t chunk) {
        return ca::staging_plan::make(bytes, 4, true, {0, bytes}, {0, bytes}, with_chunk(chunk)).fingerprint();
    };
    CHECK(fp(1 << 20, 4096) == fp(1 << 20, 4096));
    CHECK(fp(1 << 20, 4096) != fp(1 << 20, 8192));
    CHECK(fp(1 << 20, 4096) != fp(1 << 19, 4096));
    CHECK(fp(1 << 20, 4096) != 0);
    // Slots change no message, so they change no fingerprint.
    CHECK(ca::staging_plan::make(1 << 20, 4, true, {}, {}, with_chunk(4096, 2)).fingerprint() ==
          ca::staging_plan::make(1 << 20, 4, true, {}, {}, with_chunk(4096, 7)).fingerprint());
}

namespace {

using hitch_test::simulated_streams;

/// The host algorithm of the pipeline test: every byte at buffer position q becomes f(q, what it held), where what
/// it held counts only where the rank reads (else 0: the host must not depend on bytes it was not given).
std::byte f(std::size_t q, std::byte held) {
    return static_cast<std::byte>((static_cast<unsigned>(held) * 7u + static_cast<unsigned>(q) * 13u + 1u) & 0xffu);
}

void run_pipeline_case(std::size_t bytes, std::size_t element, bool piecewise, byte_range reads, byte_range writes,
                       const ca::device_options& o, std::uint64_t seed, const std::vector<std::byte>& input = {},
                       std::size_t input_offset = 0) {
    INFO("bytes " << bytes << " chunk " << o.chunk_bytes << " slots " << o.slots << " seed " << seed);
    const ca::staging_plan plan = ca::staging_plan::make(bytes, element, piecewise, reads, writes, o);
    std::vector<std::byte> original(bytes);
    for (std::size_t q = 0; q < bytes; ++q) original[q] = static_cast<std::byte>((q * 31 + 5) & 0xff);
    std::vector<std::byte> gpu = original;  // the "GPU buffer"
    std::vector<std::byte> pinned(plan.pinned_bytes() + 1);
    simulated_streams streams(pinned.data(), plan.pinned_bytes(), plan.slots(), seed);
    space_call call;
    call.buffer = {gpu.data(), bytes, hitch::memory_space::cuda};
    call.reads = reads;
    call.writes = writes;
    call.piecewise = piecewise;
    call.element_bytes = element;
    if (!input.empty()) {
        call.input = {const_cast<std::byte*>(input.data()), input.size(), hitch::memory_space::cuda};
        call.input_offset = input_offset;
    }
    std::size_t seen = 0;
    auto host = [&](std::byte* slot, std::size_t offset, std::size_t n) {
        streams.host_touches(slot, n);
        CHECK(offset == seen);
        seen += n;
        for (std::size_t i = 0; i < n; ++i) {
            const std::size_t q = offset + i;
            const bool from_input = !input.empty() && q >= input_offset && q < input_offset + input.size();
            const bool read = from_input || (q >= reads.offset && q < reads.offset + reads.bytes);
            if (from_input)
                CHECK(slot[i] == input[q - input_offset]);
            else if (read)
                CHECK(slot[i] == original[q]);
            slot[i] = f(q, read ? slot[i] : std::byte{0});
        }
    };
    ca::run_pipeline(plan, call, hitch::allreduce::host_runner(host), pinned.data(), streams);
    CHECK(seen == bytes);
    CHECK(streams.hazards == 0);
    CHECK(streams.deadlocks == 0);
    std::size_t wrong = 0;
    for (std::size_t q = 0; q < bytes; ++q) {
        const bool from_input = !input.empty() && q >= input_offset && q < input_offset + input.size();
        const bool read = from_input || (q >= reads.offset && q < reads.offset + reads.bytes);
        const std::byte held = from_input ? input[q - input_offset] : (read ? original[q] : std::byte{0});
        const bool written = q >= writes.offset && q < writes.offset + writes.bytes;
        wrong += gpu[q] != (written ? f(q, held) : original[q]);
    }
    CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("the staged loop gives every piece its bytes and copies back only what the rank writes, in any timing",
          "[cuda][allreduce][host]") {
    for (std::size_t n : element_counts)
        for (std::size_t chunk : {std::size_t{64}, std::size_t{4096}, ca::tuning::staging_chunk_bytes})
            for (int slots : {2, 3})
                for (std::uint64_t seed : {1u, 2u, 3u}) {
                    const std::size_t bytes = n * 4;
                    if (chunk == 64 && n > 100000 && seed > 1) continue;  // 65536 pieces: once is enough
                    const auto o = with_chunk(chunk, slots);
                    const byte_range all{0, bytes};
                    run_pipeline_case(bytes, 4, true, all, all, o, seed);          // all-reduce
                    run_pipeline_case(bytes, 4, true, all, {0, 0}, o, seed + 10);  // broadcast's root
                    run_pipeline_case(bytes, 4, true, {0, 0}, all, o, seed + 20);  // its receivers
                    const byte_range middle{bytes / 12 * 4, bytes / 12 * 4};
                    run_pipeline_case(bytes, 4, false, middle, all, o, seed + 30);  // allgather in place
                    run_pipeline_case(bytes, 4, false, all, {0, 0}, o, seed + 40);  // reduce off the root
                }
}

TEST_CASE("the staged loop places allgather's own contribution", "[cuda][allreduce][host]") {
    for (std::size_t m : {0u, 1u, 31u, 33u})
        for (int p : {1, 3})
            for (int rank = 0; rank < p; ++rank) {
                std::vector<std::byte> mine(m * 4);
                for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<std::byte>(200 + i % 50);
                const std::size_t bytes = m * 4 * static_cast<std::size_t>(p);
                run_pipeline_case(bytes, 4, false, {0, 0}, {0, bytes}, ca::device_options{}, 7, mine,
                                  static_cast<std::size_t>(rank) * m * 4);
            }
}

TEST_CASE("the simulated streams catch a loop that reuses a slot too early", "[cuda][allreduce][host]") {
    // The test's own check: skipping in_waits_out lets a copy in overwrite a slot whose copy back is pending.
    struct careless : simulated_streams {
        using simulated_streams::simulated_streams;
        void in_waits_out(int) {}
    };
    const std::size_t bytes = 64 * 40;
    const ca::staging_plan plan = ca::staging_plan::make(bytes, 4, true, {0, bytes}, {0, bytes}, with_chunk(64, 2));
    std::vector<std::byte> gpu(bytes), pinned(plan.pinned_bytes());
    int hazards = 0;
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
        careless s(pinned.data(), plan.pinned_bytes(), plan.slots(), seed);
        space_call call;
        call.buffer = {gpu.data(), bytes, hitch::memory_space::cuda};
        call.reads = call.writes = {0, bytes};
        call.piecewise = true;
        call.element_bytes = 4;
        auto host = [&](std::byte* slot, std::size_t, std::size_t n) { s.host_touches(slot, n); };
        ca::run_pipeline(plan, call, hitch::allreduce::host_runner(host), pinned.data(), s);
        hazards += s.hazards;
    }
    CHECK(hazards > 0);
}

// ---- which path, and CUDA-aware detection ----

namespace {

int answers_one() { return 1; }
int answers_zero() { return 0; }

const ca::mpi_cuda_query aware_mpi{true, true, &answers_one};
const ca::mpi_cuda_query unaware_mpi{true, true, &answers_zero};
const ca::mpi_cuda_query undeclared_mpi{true, false, nullptr};
const ca::mpi_cuda_query not_asked{};

space_call gpu_call(operation what, std::string_view schedule, int size = 2, std::string_view comm = "comm::mpi") {
    space_call c;
    c.what = what;
    c.schedule = schedule;
    c.size = size;
    c.communicator = comm;
    c.buffer.space = hitch::memory_space::cuda;
    return c;
}

}  // namespace

TEST_CASE("HITCH_CUDA_AWARE_MPI takes yes, no and auto in their usual spellings", "[cuda][allreduce][host]") {
    for (std::string_view v : {"1", "yes", "true", "on"}) CHECK(ca::parse_cuda_aware_override(v) == true);
    for (std::string_view v : {"0", "no", "false", "off"}) CHECK(ca::parse_cuda_aware_override(v) == false);
    for (std::optional<std::string_view> v : {std::optional<std::string_view>{}, std::optional<std::string_view>{""},
                                              std::optional<std::string_view>{"auto"}})
        CHECK_FALSE(ca::parse_cuda_aware_override(v).has_value());
    try {
        (void)ca::parse_cuda_aware_override(std::string_view("maybe"));
        FAIL("no config_error");
    } catch (const hitch::config_error& e) {
        CHECK(std::string(e.what()).find("HITCH_CUDA_AWARE_MPI = \"maybe\"") != std::string::npos);
    }
}

TEST_CASE("CUDA-awareness: option, then environment, then the communicator, then the MPI library",
          "[cuda][allreduce][host]") {
    using ca::device_path;
    const auto decide = [](device_path p, std::optional<std::string_view> env, std::string_view comm, bool carries,
                           const ca::mpi_cuda_query& q) { return ca::decide_cuda_aware(p, env, comm, carries, q); };
    // The library is asked only for comm::mpi, only when its header declares the query.
    CHECK(decide(device_path::automatic, {}, "comm::mpi", false, aware_mpi).aware);
    CHECK(decide(device_path::automatic, {}, "comm::mpi", false, aware_mpi).reason == "MPIX_Query_cuda_support() = 1");
    CHECK_FALSE(decide(device_path::automatic, {}, "comm::mpi", false, unaware_mpi).aware);
    CHECK(decide(device_path::automatic, {}, "comm::mpi", false, unaware_mpi).reason ==
          "MPIX_Query_cuda_support() = 0");
    CHECK_FALSE(decide(device_path::automatic, {}, "comm::mpi", false, undeclared_mpi).aware);
    CHECK_FALSE(decide(device_path::automatic, {}, "comm::mpi", false, not_asked).aware);
    CHECK(decide(device_path::automatic, {}, "comm::mpi", false, not_asked).reason.find("mpi.hpp is not included") !=
          std::string::npos);
    CHECK_FALSE(decide(device_path::automatic, {}, "comm::local", false, aware_mpi).aware);
    // A communicator that declares it carries device memory needs no library.
    CHECK(decide(device_path::automatic, {}, "cuda::nccl", true, not_asked).aware);
    // The environment overrides the detection both ways ...
    CHECK(decide(device_path::automatic, "1", "comm::mpi", false, unaware_mpi).aware);
    CHECK_FALSE(decide(device_path::automatic, "0", "comm::mpi", false, aware_mpi).aware);
    CHECK_FALSE(decide(device_path::automatic, "off", "cuda::nccl", true, aware_mpi).aware);
    CHECK(decide(device_path::automatic, "auto", "comm::mpi", false, aware_mpi).aware);
    CHECK(decide(device_path::automatic, "1", "comm::mpi", false, unaware_mpi).reason == "HITCH_CUDA_AWARE_MPI = 1");
    // ... and the option overrides the environment.
    CHECK_FALSE(decide(device_path::staged, "1", "comm::mpi", false, aware_mpi).aware);
    CHECK(decide(device_path::direct, "0", "comm::mpi", false, unaware_mpi).aware);
    CHECK_THROWS_AS(decide(device_path::automatic, "sometimes", "comm::mpi", false, aware_mpi), hitch::config_error);
}

TEST_CASE("only the ring's collectives have a direct form", "[cuda][allreduce][host]") {
    CHECK(ca::has_direct_form(gpu_call(operation::allreduce, "ring")));
    CHECK_FALSE(ca::has_direct_form(gpu_call(operation::allreduce, "rabenseifner")));
    CHECK_FALSE(ca::has_direct_form(gpu_call(operation::allreduce, "automatic")));
    CHECK(ca::has_direct_form(gpu_call(operation::reduce_scatter, "ring")));
    CHECK(ca::has_direct_form(gpu_call(operation::allgather, "ring")));
    CHECK(ca::has_direct_form(gpu_call(operation::broadcast, "ring")));
    CHECK_FALSE(ca::has_direct_form(gpu_call(operation::broadcast, "binary_tree")));
    CHECK_FALSE(ca::has_direct_form(gpu_call(operation::reduce, "ring")));
    CHECK_FALSE(ca::has_direct_form(gpu_call(operation::allreduce, "ring", 1)));
    space_call host_buffer = gpu_call(operation::allgather, "ring");
    host_buffer.buffer.space = hitch::memory_space::host;
    CHECK_FALSE(ca::has_direct_form(host_buffer));
}

TEST_CASE("choose_path: direct only with a direct form, CUDA-awareness and the engine", "[cuda][allreduce][host]") {
    const ca::device_options automatic;
    ca::device_options direct;
    direct.path = ca::device_path::direct;
    const space_call ring = gpu_call(operation::allreduce, "ring");
    CHECK(ca::choose_path(ring, automatic, {}, aware_mpi, true).direct);
    CHECK_FALSE(ca::choose_path(ring, automatic, {}, unaware_mpi, true).direct);
    CHECK_FALSE(ca::choose_path(gpu_call(operation::allreduce, "binary_tree"), direct, {}, aware_mpi, true).direct);
    // Detected but not compiled in: staged, and the reason says so; asked for by the option: an error.
    const ca::path_choice missing = ca::choose_path(ring, automatic, {}, aware_mpi, false);
    CHECK_FALSE(missing.direct);
    CHECK(missing.reason.find("not compiled in") != std::string::npos);
    CHECK_THROWS_AS(ca::choose_path(ring, direct, {}, unaware_mpi, false), hitch::config_error);
    CHECK(ca::direct_fingerprint() != 0);
}

TEST_CASE("device_options are validated", "[cuda][allreduce][host]") {
    CHECK_NOTHROW(ca::device_options{}.validate());
    ca::device_options o;
    o.slots = 1;
    CHECK_THROWS_AS(o.validate(), hitch::config_error);
    o = {};
    o.chunk_bytes = 100;
    CHECK_THROWS_AS(o.validate(), hitch::config_error);
    o.chunk_bytes = 0;  // never cut
    CHECK_NOTHROW(o.validate());
    o.segment_bytes = 8;
    CHECK_THROWS_AS(o.validate(), hitch::config_error);
}
