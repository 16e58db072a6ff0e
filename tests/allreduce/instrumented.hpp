#pragma once
// A communicator wrapper that counts what each rank sends (messages and bytes), to check schedules against the
// counts their cost model states. It models hitch::communicator by forwarding to the wrapped one; communicators
// split from it share its counters, so a group's private communicator is counted too.

#include <atomic>
#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "hitch/concepts/communicator.hpp"

namespace hitch_test {

struct traffic_counters {
    std::atomic<long long> messages{0};
    std::atomic<long long> bytes{0};
    void reset() {
        messages = 0;
        bytes = 0;
    }
};

template <hitch::communicator C>
class instrumented {
public:
    using request = typename C::request;
    static constexpr bool shares_address_space = false;  // count real messages, not direct descriptors

    instrumented(C inner, std::shared_ptr<traffic_counters> counters)
        : inner_(std::move(inner)), counters_(std::move(counters)) {}

    [[nodiscard]] int rank() const { return inner_.rank(); }
    [[nodiscard]] int size() const { return inner_.size(); }
    [[nodiscard]] int max_tag() const { return inner_.max_tag(); }
    static constexpr std::string_view name = "instrumented";
    [[nodiscard]] hitch::seconds_f timeout() const { return inner_.timeout(); }
    void set_timeout(hitch::seconds_f t) { inner_.set_timeout(t); }

    template <class T>
    [[nodiscard]] request isend(std::span<const T> data, int peer, int tag) {
        counters_->messages += 1;
        counters_->bytes += static_cast<long long>(data.size_bytes());
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
    [[nodiscard]] instrumented split(int color, int key) { return instrumented(inner_.split(color, key), counters_); }

    [[nodiscard]] traffic_counters& counters() { return *counters_; }

private:
    C inner_;
    std::shared_ptr<traffic_counters> counters_;
};

}  // namespace hitch_test
