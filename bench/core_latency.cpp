// hitch-bench-core-latency: how far apart two cores are, as the staged path's pipes feel it. Two threads pinned to
// `--cpus A,B` (default 0,1) bounce a cache line (the round trip, ns), then pass 64 KiB pieces through a pipe of 16
// slots in memory both share, as allreduce/detail/pipes.hpp does: the sender copies each piece into a slot, the
// receiver copies it out; once with the sender's copies through the cache and once streamed
// (allreduce/detail/slot_copier.hpp), each in GB/s. On dev-2c the host places its two virtual cores on one die
// (round trip 50-60 ns, 11-16 GB/s through the cache) or on two (330-370 ns, 2.3-3.3 GB/s), for seconds to minutes
// at a time; streamed, ~13 GB/s either way. `--repeat N` prints N lines, one every `--every-ms` (default 1000):
// which placement a benchmark run met.
//
//   hitch-bench-core-latency [--cpus A,B] [--repeat N] [--every-ms T]

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../examples/trainer/option_values.hpp"
#include "hitch/allreduce/detail/slot_copier.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct settings {
    int cpu_a = 0;
    int cpu_b = 1;
    int repeat = 1;
    int every_ms = 1000;
};

namespace ex = hitch_examples;

const std::string program = "hitch-bench-core-latency";
const std::string usage = "usage: " + program + " [--cpus A,B] [--repeat N] [--every-ms T]";

/// The two CPUs of `--cpus A,B`; a refusal names the value as typed.
void parse_cpus(std::string_view flag, std::string_view text, settings& s) {
    const std::size_t comma = text.find(',');
    if (comma == std::string_view::npos)
        throw ex::usage_error(std::string(flag) + " wants two CPUs as A,B, not '" + ex::detail::shown(text) + "'");
    try {
        s.cpu_a = ex::parse_whole<int>(flag, text.substr(0, comma), 0, CPU_SETSIZE - 1);
        s.cpu_b = ex::parse_whole<int>(flag, text.substr(comma + 1), 0, CPU_SETSIZE - 1);
    } catch (const ex::usage_error&) {
        throw ex::usage_error(std::string(flag) + " wants two whole CPU numbers below " + std::to_string(CPU_SETSIZE) +
                              " as A,B, not '" + ex::detail::shown(text) + "'");
    }
    if (s.cpu_a == s.cpu_b)
        throw ex::usage_error(std::string(flag) + " wants two different CPUs, not '" + ex::detail::shown(text) + "'");
}

/// Pins the calling thread to `cpu`; false when the process may not run there.
bool pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

struct alignas(128) counter {
    std::atomic<long> value{0};
};

/// Nanoseconds per round trip of a cache line between the two CPUs.
double round_trip_ns(const settings& s) {
    constexpr long trips = 100000;
    counter line;
    std::thread echo([&] {
        pin(s.cpu_b);
        for (long i = 0; i < trips; ++i) {
            while (line.value.load(std::memory_order_acquire) != 2 * i + 1) {}
            line.value.store(2 * i + 2, std::memory_order_release);
        }
    });
    pin(s.cpu_a);
    const auto start = clock_type::now();
    for (long i = 0; i < trips; ++i) {
        line.value.store(2 * i + 1, std::memory_order_release);
        while (line.value.load(std::memory_order_acquire) != 2 * i + 2) {}
    }
    const double took = seconds_since(start);
    echo.join();
    return took / trips * 1e9;
}

/// GB/s through a pipe of 16 slots of 64 KiB, the sender's copies streamed or through the cache.
double pipe_GBs(const settings& s, bool streamed) {
    constexpr std::size_t slots = 16;
    constexpr std::size_t slot = std::size_t{64} << 10;
    constexpr long pieces = 20000;
    std::vector<std::byte> storage(slots * slot + 64);
    std::byte* ring = storage.data() + (64 - reinterpret_cast<std::uintptr_t>(storage.data()) % 64) % 64;
    std::vector<std::byte> source(slot, std::byte{1});
    std::vector<std::byte> sink(slot);
    counter sent, taken;
    std::thread receiver([&] {
        pin(s.cpu_b);
        for (long i = 0; i < pieces; ++i) {
            while (sent.value.load(std::memory_order_acquire) <= i) {}
            std::memcpy(sink.data(), ring + static_cast<std::size_t>(i) % slots * slot, slot);
            taken.value.store(i + 1, std::memory_order_release);
        }
    });
    pin(s.cpu_a);
    const auto start = clock_type::now();
    for (long i = 0; i < pieces; ++i) {
        while (i - taken.value.load(std::memory_order_acquire) >= static_cast<long>(slots)) {}
        std::byte* to = ring + static_cast<std::size_t>(i) % slots * slot;
        if (!streamed || !hitch::allreduce::detail::stream_copy(to, source.data(), slot))
            std::memcpy(to, source.data(), slot);
        sent.value.store(i + 1, std::memory_order_release);
    }
    receiver.join();
    const double took = seconds_since(start);
    // The receiver's copies must not be optimised away: their last bytes are the source's.
    if (sink[slot - 1] != std::byte{1}) std::fprintf(stderr, "hitch-bench-core-latency: a piece arrived damaged\n");
    return static_cast<double>(pieces) * slot / took / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
    settings s;
    try {
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            if (a == "--cpus") {
                parse_cpus(a, ex::next_value(argc, argv, i), s);
            } else if (a == "--repeat") {
                s.repeat = ex::parse_whole(a, ex::next_value(argc, argv, i), 1, std::numeric_limits<int>::max());
            } else if (a == "--every-ms") {
                s.every_ms = ex::parse_whole(a, ex::next_value(argc, argv, i), 0, std::numeric_limits<int>::max());
            } else if (a == "--help" || a == "-h") {
                std::printf("%s\n", usage.c_str());
                return 0;
            } else {
                throw ex::usage_error("unknown option '" + ex::detail::shown(a) + "' (--help lists the options)");
            }
        }
    } catch (const ex::usage_error& e) {
        ex::print_line(program, e.what());
        return ex::exit_usage;
    }
    if (!pin(s.cpu_b) || !pin(s.cpu_a)) {
        ex::print_line(program, "--cpus " + std::to_string(s.cpu_a) + "," + std::to_string(s.cpu_b) +
                                    ": cannot run on both (see nproc and taskset)");
        return ex::exit_usage;
    }
    for (int r = 0; r < s.repeat; ++r) {
        if (r > 0) std::this_thread::sleep_for(std::chrono::milliseconds(s.every_ms));
        const double rt = round_trip_ns(s);
        const double cached = pipe_GBs(s, false);
        const double streamed = pipe_GBs(s, true);
        std::printf(
            "{\"bench\":\"core_latency\",\"cpus\":[%d,%d],\"round_trip_ns\":%.0f,\"pipe_cached_GBs\":%.2f,"
            "\"pipe_streamed_GBs\":%.2f}\n",
            s.cpu_a, s.cpu_b, rt, cached, streamed);
        std::fflush(stdout);
    }
    return 0;
}
