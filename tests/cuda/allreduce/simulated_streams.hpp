#pragma once
// run_pipeline's streams without a GPU (hitch/cuda/allreduce/staging_plan.hpp), for the host tests.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <vector>

#include "hitch/allreduce/space.hpp"

namespace hitch_test {

using hitch::allreduce::byte_range;

/// Two in-order streams of copies with events, run lazily: a wait by the host advances them, in random order as far
/// as the events allow, only until what it waits for has happened. A hazard is a copy that runs while a copy the host
/// issued before it, on the other stream and touching the same pinned bytes, is still pending (the host meant that
/// one to go first), or host work on pinned bytes a pending copy touches.
class simulated_streams {
public:
    simulated_streams(std::byte* pinned, std::size_t pinned_bytes, int slots, std::uint64_t seed)
        : pinned_(pinned),
          pinned_bytes_(pinned_bytes),
          rng_(seed),
          in_recorded_(slots),
          in_done_(slots),
          out_recorded_(slots),
          out_done_(slots) {}

    void copy_in(void* dst, const void* src, std::size_t bytes) { push(in_, copy(dst, src, bytes, dst)); }
    void copy_out(void* dst, const void* src, std::size_t bytes) { push(out_, copy(dst, src, bytes, src)); }
    void record_in(int slot) {
        const std::uint64_t g = ++in_recorded_[idx(slot)];
        push(in_, op{[this, slot, g] { in_done_[idx(slot)] = g; }, {}, {}});
    }
    void record_out(int slot) {
        const std::uint64_t g = ++out_recorded_[idx(slot)];
        push(out_, op{[this, slot, g] { out_done_[idx(slot)] = g; }, {}, {}});
    }
    void in_waits_out(int slot) {
        const std::uint64_t g = out_recorded_[idx(slot)];
        push(in_, op{[] {}, [this, slot, g] { return out_done_[idx(slot)] >= g; }, {}});
    }
    void host_waits_in(int slot) {
        const std::uint64_t g = in_recorded_[idx(slot)];
        drain([&] { return in_done_[idx(slot)] >= g; });
    }
    void host_waits_out() {
        drain([&] { return out_.empty(); });
        drain([&] { return in_.empty(); });
    }

    /// The host algorithm is about to touch [p, p + bytes) of pinned memory.
    void host_touches(const std::byte* p, std::size_t bytes) {
        for (const auto* q : {&in_, &out_})
            for (const op& o : *q)
                if (overlaps(o.pinned, p, bytes)) ++hazards;
    }

    int hazards = 0;
    int deadlocks = 0;

private:
    struct op {
        std::function<void()> run;
        std::function<bool()> ready;  // empty: always
        byte_range pinned;            // pinned bytes it touches (relative to the buffer), if any
        std::uint64_t issued = 0;     // the host's order of issue
    };

    static std::size_t idx(int slot) { return static_cast<std::size_t>(slot); }

    op copy(void* dst, const void* src, std::size_t bytes, const void* pinned_side) {
        const auto* p = static_cast<const std::byte*>(pinned_side);
        byte_range r{0, 0};
        if (p >= pinned_ && p < pinned_ + pinned_bytes_) r = {static_cast<std::size_t>(p - pinned_), bytes};
        return op{[dst, src, bytes] { std::memcpy(dst, src, bytes); }, {}, r};
    }
    void push(std::deque<op>& q, op o) {
        o.issued = ++issued_;
        q.push_back(std::move(o));
    }

    [[nodiscard]] bool overlaps(const byte_range& r, const std::byte* p, std::size_t bytes) const {
        if (r.bytes == 0 || bytes == 0) return false;
        const std::size_t a = static_cast<std::size_t>(p - pinned_);
        return r.offset < a + bytes && a < r.offset + r.bytes;
    }

    [[nodiscard]] bool can_run(const std::deque<op>& q) const {
        return !q.empty() && (!q.front().ready || q.front().ready());
    }

    void run_front(std::deque<op>& q, const std::deque<op>& other) {
        op o = std::move(q.front());
        q.pop_front();
        for (const op& x : other)
            if (x.issued < o.issued && o.pinned.bytes != 0 &&
                overlaps(x.pinned, pinned_ + o.pinned.offset, o.pinned.bytes))
                ++hazards;
        o.run();
    }

    template <class Done>
    void drain(Done&& done) {
        while (!done()) {
            const bool a = can_run(in_), b = can_run(out_);
            if (!a && !b) {
                ++deadlocks;
                return;
            }
            if (a && (!b || (rng_() & 1u)))
                run_front(in_, out_);
            else
                run_front(out_, in_);
        }
    }

    std::byte* pinned_;
    std::size_t pinned_bytes_;
    std::mt19937_64 rng_;
    std::uint64_t issued_ = 0;
    std::deque<op> in_, out_;
    std::vector<std::uint64_t> in_recorded_, in_done_, out_recorded_, out_done_;
};

}  // namespace hitch_test
