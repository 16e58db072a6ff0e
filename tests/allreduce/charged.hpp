#pragma once
// A communicator wrapper whose clock is charged a given time for each call of a chosen schedule: to make a schedule
// slow (or fast) on demand, without sleeping, and by far more than a loaded test host's noise. It tells schedules
// apart by the first message a rank sends in a call (its channel and size), which the test learns by running each
// schedule once. Every message still goes through the wrapped communicator (the message path: the wrapper does
// not share an address space), so results are real; only the time that automatic reads is charged.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "forwarding.hpp"
#include "hitch/allreduce/transport/tags.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/clock.hpp"

namespace hitch_test {

/// The first message a rank sends in a call: its channel and bytes (no padding: ranks exchange it as bytes).
struct first_send {
    std::int64_t channel = -1;
    std::int64_t bytes = 0;
    friend bool operator==(const first_send&, const first_send&) = default;
};

/// One rank's clock (the steady clock plus what was charged) and what it charges. Shared by a wrapper and the
/// communicators split from it; written by the rank's own thread only.
struct rank_meter final : hitch::clock_source {
    [[nodiscard]] time_point now() const noexcept override {
        return std::chrono::steady_clock::now() + std::chrono::nanoseconds(charged_ns.load());
    }
    std::atomic<long long> charged_ns{0};
    std::int64_t last_call = -1;  // the call window of the last message seen
    first_send last;              // the first message of the latest call
    bool charging = false;
    first_send marked;  // calls that start with this message are charged marked_s, the others other_s
    double marked_s = 0;
    double other_s = 0;
};

template <hitch::communicator C>
class charged : public forwarding_communicator<charged<C>, C, rank_meter> {
    using forwarding = forwarding_communicator<charged<C>, C, rank_meter>;

public:
    using forwarding::forwarding;
    using forwarding::isend;
    using typename forwarding::request;
    static constexpr bool shares_address_space = false;  // every byte goes through isend, where it is seen
    static constexpr std::string_view name = "charged";

    [[nodiscard]] const hitch::clock_source& clock() const noexcept { return *this->shared_; }

    template <class T>
    [[nodiscard]] request isend(std::span<const T> data, int peer, int tag) {
        // A call's messages use tags base + 64 w + channel (allreduce/transport/tags.hpp); below base are the
        // agreement's, which belong to no schedule.
        rank_meter& m = *this->shared_;
        const int base = hitch::collective_tag_base(this->inner_) + hitch::allreduce::first_call_tag_offset;
        if (tag >= base) {
            const std::int64_t call = (tag - base) / hitch::allreduce::channels_per_call;
            if (call != m.last_call) {
                m.last_call = call;
                m.last = {(tag - base) % hitch::allreduce::channels_per_call,
                          static_cast<std::int64_t>(data.size_bytes())};
                if (m.charging) {
                    const double s = m.last == m.marked ? m.marked_s : m.other_s;
                    m.charged_ns += static_cast<long long>(s * 1e9);
                }
            }
        }
        return this->inner_.isend(data, peer, tag);
    }
};

}  // namespace hitch_test
