#pragma once
// detail::slot_copier: how the staged path's sender copies a piece into a pipe's slot. The slot was last read by
// the receiver, so its lines sit in the receiver's cache, and ordinary stores must first take each line back (a
// read for ownership): cheap between two cores that share a last-level cache, but a cache-line round trip of
// ~350 ns between cores on different dies (dev-2c, whose two virtual cores the host moves between such placements
// for minutes at a time, measured 50-60 ns and 330-370 ns). There the sender staged ~2.3 GB/s instead of 11-16, and
// every schedule of the staged path ran 3-5x slower while MPI_Allreduce did not. Non-temporal stores write whole
// lines without reading them back (~13 GB/s in either placement), but leave the piece in memory, not in a cache
// both cores share: where the cores share one, streaming every piece made the schedules 1.2-2x slower at 256 KiB -
// 64 MiB. So each pipe times its copies of full slots both ways and takes the faster (tuning::transport_stream_*).
//
// Each rank chooses for its own outgoing pipes; the choice changes where the bytes go, never which bytes arrive.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hitch/allreduce/tuning.hpp"
#include "hitch/core/isa.hpp"

#if HITCH_ISA_X86
#include <emmintrin.h>
#endif

namespace hitch::allreduce::detail {

/// Copies n bytes from src to dst with non-temporal stores where the processor has them (x86-64; dst 16-byte
/// aligned), ending with a store fence, so the bytes are visible to other cores before anything the caller stores
/// after it; else with memcpy. Returns whether it streamed.
inline bool stream_copy(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
#if HITCH_ISA_X86
    if ((reinterpret_cast<std::uintptr_t>(dst) & 15) == 0) {
        const std::size_t body = n & ~std::size_t{63};
        for (std::size_t i = 0; i < body; i += 64) {
            const auto* s = reinterpret_cast<const __m128i*>(src + i);
            auto* d = reinterpret_cast<__m128i*>(dst + i);
            const __m128i a = _mm_loadu_si128(s);
            const __m128i b = _mm_loadu_si128(s + 1);
            const __m128i c = _mm_loadu_si128(s + 2);
            const __m128i e = _mm_loadu_si128(s + 3);
            _mm_stream_si128(d, a);
            _mm_stream_si128(d + 1, b);
            _mm_stream_si128(d + 2, c);
            _mm_stream_si128(d + 3, e);
        }
        std::memcpy(dst + body, src + body, n - body);
        _mm_sfence();
        return true;
    }
#endif
    std::memcpy(dst, src, n);
    return false;
}

/// Which way a pipe copies its full pieces: the policy of slot_copier, apart from the clock. A copy's time depends
/// on where its source lies (in this core's cache, or in memory at 64 MiB) as much as on the way it is copied, so
/// the two ways are compared in pairs of adjacent copies: now and then one full piece goes the other way, and its
/// time is weighed against the lesser of the current way's last two (one of them may have met a preemption). The
/// pairs come at fixed intervals: bringing one forward when copies through the cache slowed (the cores moved apart,
/// or the sources moved to memory) fired at every change of message size between schedules, and its streamed
/// pieces cost 3-35% at 64 KiB where the cores shared a cache.
class copy_chooser {
public:
    /// Whether the next full piece is streamed.
    [[nodiscard]] bool next() noexcept {
        ++since_other_;
        const bool other = since_other_ >= interval() && (paired_cached_s_ > 0 || recent_count_ > 0);
        if (!other) return streaming_;
        since_other_ = 0;
        return !streaming_;
    }
    /// Whether the piece next() planned should be timed: the pair's copy the other way, or one of the current way's
    /// last two before it, the only copies a pair weighs (reading the clock twice for every piece cost ~1% of a
    /// 64 KiB copy on one die).
    [[nodiscard]] bool timed() const noexcept { return since_other_ == 0 || since_other_ + 2 >= interval(); }
    /// A full piece took `seconds`, streamed or not.
    void took(bool streamed, double seconds) noexcept {
        if (streamed == streaming_) {
            recent_[1] = recent_[0];
            recent_[0] = seconds;
            ++recent_count_;
            return;
        }
        if (recent_count_ == 0) return;  // nothing of the current way to weigh it against
        const double current = recent_count_ >= 2 ? std::min(recent_[0], recent_[1]) : recent_[0];
        const double cached = streamed ? current : seconds;
        const double stream = streamed ? seconds : current;
        paired_cached_s_ = cached;
        paired_streamed_s_ = stream;
        const bool was = streaming_;
        streaming_ = cached > tuning::transport_stream_ratio * stream;
        if (streaming_ != was) {  // the recent copies are of the other way now: this one starts the new way's
            recent_[0] = seconds;
            recent_count_ = 1;
        }
    }

    /// Whether full pieces are streamed now; the last pair's times of each way (0: no pair yet).
    [[nodiscard]] bool streaming() const noexcept { return streaming_; }
    [[nodiscard]] double cached_seconds() const noexcept { return paired_cached_s_; }
    [[nodiscard]] double streamed_seconds() const noexcept { return paired_streamed_s_; }

    /// Full pieces copied through the cache before the first pair.
    static constexpr unsigned first_pair_after = 4;

private:
    /// Full pieces of the current way between two pairs.
    [[nodiscard]] unsigned interval() const noexcept {
        if (streaming_) return tuning::transport_cached_probe_every;
        return paired_cached_s_ > 0 ? tuning::transport_streamed_probe_every : first_pair_after;
    }

    bool streaming_ = false;
    double recent_[2] = {0, 0};  // the current way's last two copies, the latest first
    unsigned recent_count_ = 0;
    double paired_cached_s_ = 0;
    double paired_streamed_s_ = 0;
    unsigned since_other_ = 0;  // full pieces since the last one copied the other way
};

/// One outgoing pipe's way of copying pieces into its slots (see the file comment).
class slot_copier {
public:
    /// Copies a piece of n bytes into a slot; `full`: it fills the slot (only those are timed, the same size each,
    /// and only those a pair weighs: copy_chooser::timed).
    void copy(std::byte* dst, const std::byte* src, std::size_t n, bool full) noexcept {
        if (n < tuning::transport_stream_min_bytes) {
            std::memcpy(dst, src, n);
            return;
        }
        if (!full) {
            if (!chooser_.streaming() || !stream_copy(dst, src, n)) std::memcpy(dst, src, n);
            return;
        }
        const bool stream = chooser_.next();
        if (!chooser_.timed()) {
            if (!stream || !stream_copy(dst, src, n)) std::memcpy(dst, src, n);
            return;
        }
        const auto start = std::chrono::steady_clock::now();
        if (stream && stream_copy(dst, src, n)) {
            chooser_.took(true, seconds_since(start));
        } else {
            std::memcpy(dst, src, n);
            if (!stream) chooser_.took(false, seconds_since(start));  // else no streaming stores here to compare
        }
    }
    [[nodiscard]] const copy_chooser& chooser() const noexcept { return chooser_; }

private:
    [[nodiscard]] static double seconds_since(std::chrono::steady_clock::time_point t) noexcept {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    }
    copy_chooser chooser_;
};

}  // namespace hitch::allreduce::detail
