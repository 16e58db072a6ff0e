// The staged path's copies into pipe slots (allreduce/detail/slot_copier.hpp): streamed copies deliver the same
// bytes as memcpy at every length and alignment; a pipe streams exactly while its timed copies through the cache
// are more than tuning::transport_stream_ratio times its streamed ones (pairs of adjacent copies, the other way
// at tuning's intervals), and one copy that met a preemption flips nothing.
#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

#include "hitch/allreduce/detail/slot_copier.hpp"

using hitch::allreduce::detail::copy_chooser;
using hitch::allreduce::detail::slot_copier;
using hitch::allreduce::detail::stream_copy;
namespace tuning = hitch::allreduce::tuning;

namespace {

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
    return v;
}

/// `pieces` full pieces through `c`, the cached ones taking `cached` seconds and the streamed `streamed`; how many
/// were streamed.
int run(copy_chooser& c, int pieces, double cached, double streamed) {
    int streamed_count = 0;
    for (int i = 0; i < pieces; ++i) {
        const bool s = c.next();
        streamed_count += s ? 1 : 0;
        c.took(s, s ? streamed : cached);
    }
    return streamed_count;
}

/// `pieces` full pieces that `c` plans through the cache, each taking `seconds`.
void copies_through_cache(copy_chooser& c, int pieces, double seconds) {
    for (int i = 0; i < pieces; ++i) {
        REQUIRE_FALSE(c.next());
        c.took(false, seconds);
    }
}

}  // namespace

TEST_CASE("stream_copy delivers memcpy's bytes at every length, source offset and destination alignment",
          "[allreduce][staged]") {
    for (std::size_t n :
         {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{63}, std::size_t{64}, std::size_t{65},
          std::size_t{127}, std::size_t{1000}, std::size_t{65536}, std::size_t{65536 + 17}}) {
        for (std::size_t src_offset : {std::size_t{0}, std::size_t{1}, std::size_t{5}}) {
            for (std::size_t dst_offset : {std::size_t{0}, std::size_t{16}, std::size_t{3}}) {
                const std::vector<std::byte> src = pattern(n + src_offset, static_cast<unsigned>(n));
                alignas(64) static std::byte dst[65536 + 17 + 64 + 64];
                for (auto& b : dst) b = std::byte{0xee};
                const bool streamed = stream_copy(dst + dst_offset, src.data() + src_offset, n);
                INFO("n " << n << " source offset " << src_offset << " destination offset " << dst_offset);
                // Unaligned destinations go through memcpy; aligned ones stream where the processor can.
                if (dst_offset % 16 != 0) CHECK_FALSE(streamed);
                bool same = true;
                for (std::size_t i = 0; i < n; ++i) same = same && dst[dst_offset + i] == src[src_offset + i];
                CHECK(same);
                // Nothing outside the n bytes is written.
                bool untouched = true;
                for (std::size_t i = 0; i < dst_offset; ++i) untouched = untouched && dst[i] == std::byte{0xee};
                for (std::size_t i = dst_offset + n; i < sizeof dst; ++i)
                    untouched = untouched && dst[i] == std::byte{0xee};
                CHECK(untouched);
            }
        }
    }
}

TEST_CASE("slot_copier copies every piece exactly, full or not, streaming or not", "[allreduce][staged]") {
    slot_copier copier;
    const std::size_t slot = std::size_t{64} << 10;
    alignas(64) static std::byte dst[std::size_t{64} << 10];
    // Enough full pieces that several are streamed (the 4th, then at the probe interval), and partial ones between.
    for (int i = 0; i < 600; ++i) {
        const std::size_t n = i % 5 == 4 ? tuning::transport_stream_min_bytes + static_cast<std::size_t>(i) : slot;
        const std::vector<std::byte> src = pattern(n, static_cast<unsigned>(i));
        copier.copy(dst, src.data(), n, n == slot);
        bool same = true;
        for (std::size_t k = 0; k < n; ++k) same = same && dst[k] == src[k];
        REQUIRE(same);
    }
    CHECK(copier.chooser().cached_seconds() > 0);
}

TEST_CASE("a pipe streams while its copies through the cache are more than the ratio slower, and not otherwise",
          "[allreduce][staged]") {
    copy_chooser c;
    // Cores that share a cache: through the cache 5 us, streamed 3 us (within the ratio). The 4th piece is
    // streamed, paired with the copies before it, then one in every transport_streamed_probe_every.
    const int pieces = 4 + 10 * static_cast<int>(tuning::transport_streamed_probe_every);
    CHECK(run(c, pieces, 5e-6, 3e-6) == 1 + 10);
    CHECK_FALSE(c.streaming());
    CHECK(c.cached_seconds() == Approx(5e-6));
    CHECK(c.streamed_seconds() == Approx(3e-6));
    // The host places the cores on different dies: copies through the cache take 25 us, more than 4x the streamed
    // 3 us. The next pair (within the interval) finds it, and the pipe streams from there.
    int until_pair = 0;
    while (!c.next()) {
        c.took(false, 25e-6);
        ++until_pair;
    }
    c.took(true, 3e-6);
    CHECK(until_pair < static_cast<int>(tuning::transport_streamed_probe_every));
    CHECK(c.streaming());
    CHECK(c.cached_seconds() == Approx(25e-6));
    // Streaming, one piece in every transport_cached_probe_every goes through the cache again.
    const int every = static_cast<int>(tuning::transport_cached_probe_every);
    const int streamed = run(c, 10 * every, 25e-6, 3e-6);
    CHECK(streamed >= 10 * every - 11);
    CHECK(streamed <= 10 * every - 9);
    CHECK(c.streaming());
    // The cores share a cache again: the next copy through the cache (within the interval) pairs at 5 us against
    // 3, and the pipe stops streaming there.
    int until_probe = 1;
    while (c.next()) {
        c.took(true, 3e-6);
        ++until_probe;
    }
    c.took(false, 5e-6);
    CHECK(until_probe <= every);
    CHECK_FALSE(c.streaming());
    CHECK(c.cached_seconds() == Approx(5e-6));
}

TEST_CASE("copies of a pair are weighed against the lesser of the current way's last two; one slow copy flips nothing",
          "[allreduce][staged]") {
    copy_chooser c;
    const int every = static_cast<int>(tuning::transport_streamed_probe_every);
    run(c, static_cast<int>(copy_chooser::first_pair_after), 5e-6, 3e-6);  // the first pair: through the cache
    REQUIRE_FALSE(c.streaming());
    // The next pair comes after every - 1 copies through the cache; the last of them met a preemption (1 ms). The
    // pair weighs the lesser of the last two (5 us), not the preempted one.
    copies_through_cache(c, every - 2, 5e-6);
    REQUIRE_FALSE(c.next());
    c.took(false, 1e-3);
    REQUIRE(c.next());
    c.took(true, 3e-6);
    CHECK_FALSE(c.streaming());
    CHECK(c.cached_seconds() == Approx(5e-6));
    // A streamed copy of a pair that met a preemption keeps the pipe as it is (copying through the cache).
    copies_through_cache(c, every - 1, 5e-6);
    REQUIRE(c.next());
    c.took(true, 1e-3);
    CHECK_FALSE(c.streaming());
    // Copies through the cache within 4x the streamed ones (11 us against 3) keep it copying through the cache;
    // past 4x (13 us) the next pair streams.
    CHECK(run(c, every, 11e-6, 3e-6) == 1);
    CHECK_FALSE(c.streaming());
    CHECK(run(c, every, 13e-6, 3e-6) == 1);
    CHECK(c.streaming());
}

TEST_CASE("a pipe times only the copies a pair weighs: the pair's, and the two before it", "[allreduce][staged]") {
    copy_chooser c;
    const int every = static_cast<int>(tuning::transport_streamed_probe_every);
    std::vector<int> timed;
    for (int i = 1; i <= static_cast<int>(copy_chooser::first_pair_after) + every; ++i) {
        const bool s = c.next();
        if (c.timed()) {
            timed.push_back(i);
            c.took(s, s ? 3e-6 : 5e-6);
        }
    }
    const int first = static_cast<int>(copy_chooser::first_pair_after);
    CHECK(timed == std::vector<int>{first - 2, first - 1, first, first + every - 2, first + every - 1, first + every});
    CHECK_FALSE(c.streaming());
    CHECK(c.cached_seconds() == Approx(5e-6));
}
