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
class charged {
public:
    using request = typename C::request;
    static constexpr bool shares_address_space = false;  // every byte goes through isend, where it is seen
    static constexpr std::string_view name = "charged";

    charged(C inner, std::shared_ptr<rank_meter> meter) : inner_(std::move(inner)), meter_(std::move(meter)) {}

    [[nodiscard]] int rank() const { return inner_.rank(); }
    [[nodiscard]] int size() const { return inner_.size(); }
    [[nodiscard]] int max_tag() const { return inner_.max_tag(); }
    [[nodiscard]] hitch::seconds_f timeout() const { return inner_.timeout(); }
    void set_timeout(hitch::seconds_f t) { inner_.set_timeout(t); }
    [[nodiscard]] const hitch::clock_source& clock() const noexcept { return *meter_; }

    template <class T>
    [[nodiscard]] request isend(std::span<const T> data, int peer, int tag) {
        // A call's messages use tags base + 64 w + channel (allreduce/transport/tags.hpp); below base are the
        // agreement's, which belong to no schedule.
        const int base = hitch::collective_tag_base(inner_) + hitch::allreduce::first_call_tag_offset;
        if (tag >= base) {
            const std::int64_t call = (tag - base) / hitch::allreduce::channels_per_call;
            if (call != meter_->last_call) {
                meter_->last_call = call;
                meter_->last = {(tag - base) % hitch::allreduce::channels_per_call,
                                static_cast<std::int64_t>(data.size_bytes())};
                if (meter_->charging) {
                    const double s = meter_->last == meter_->marked ? meter_->marked_s : meter_->other_s;
                    meter_->charged_ns += static_cast<long long>(s * 1e9);
                }
            }
        }
        return inner_.isend(data, peer, tag);
    }
    template <class T>
    [[nodiscard]] request isend(std::span<T> data, int peer, int tag) {
        return isend(std::span<const T>(data), peer, tag);
    }
    template <class T>
    [[nodiscard]] request irecv(std::span<T> data, int peer, int tag) {
        return inner_.irecv(data, peer, tag);
    }
    [[nodiscard]] hitch::message_info probe(int peer, int tag) { return inner_.probe(peer, tag); }
    void barrier() { inner_.barrier(); }
    [[nodiscard]] charged split(int color, int key) { return charged(inner_.split(color, key), meter_); }

private:
    C inner_;
    std::shared_ptr<rank_meter> meter_;
};

}  // namespace hitch_test
