#pragma once
// A communicator wrapper that counts what each rank sends (messages and bytes), to check schedules against the
// counts their cost model states. It models hitch::communicator by forwarding to the wrapped one; communicators
// split from it share its counters, so a group's private communicator is counted too.

#include <atomic>
#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "forwarding.hpp"
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
class instrumented : public forwarding_communicator<instrumented<C>, C, traffic_counters> {
    using forwarding = forwarding_communicator<instrumented<C>, C, traffic_counters>;

public:
    using forwarding::forwarding;
    using forwarding::isend;
    using typename forwarding::request;
    static constexpr bool shares_address_space = false;  // count real messages, not direct descriptors
    static constexpr std::string_view name = "instrumented";

    template <class T>
    [[nodiscard]] request isend(std::span<const T> data, int peer, int tag) {
        this->shared_->messages += 1;
        this->shared_->bytes += static_cast<long long>(data.size_bytes());
        return this->inner_.isend(data, peer, tag);
    }

    [[nodiscard]] traffic_counters& counters() { return *this->shared_; }
};

}  // namespace hitch_test
