#pragma once
// automatic, wrapped to record what each call ran on this rank: the schedule (automatic::chosen) and the current
// pick of its online ranking. A schedule in its own right, so the collectives run it as they run automatic.

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hitch/allreduce/automatic.hpp"

namespace hitch_test {

/// Records each call in `calls` (shared by copies: the collectives copy the schedule they are given).
struct watched_automatic {
    using options_type = hitch::allreduce::automatic::options_type;
    static constexpr std::string_view name = hitch::allreduce::automatic::name;
    struct call {
        std::string ran;
        int current = -1;  // -1: no online ranking
        friend bool operator==(const call&, const call&) = default;
    };

    watched_automatic() = default;
    explicit watched_automatic(const options_type& o) : inner(o) {}
    [[nodiscard]] const options_type& options() const noexcept { return inner.options(); }
    [[nodiscard]] hitch::cost_estimate cost(int p, std::size_t n, const hitch::cost_constants& k) const {
        return inner.cost(p, n, k);
    }
    template <hitch::communicator C, hitch::floating_element T>
    void run(hitch::allreduce::transport<C>& t, std::span<T> data, hitch::allreduce::reduce_op op) const {
        inner.run(t, data, op);
        const auto r = inner.ranking(t, data.size_bytes());
        calls->push_back({std::string(inner.chosen(t, data.size_bytes())), r ? r->current : -1});
    }

    hitch::allreduce::automatic inner;
    std::shared_ptr<std::vector<call>> calls = std::make_shared<std::vector<call>>();
};

}  // namespace hitch_test
