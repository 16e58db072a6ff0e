#pragma once
// sync::async: Downpour-style asynchronous SGD (Dean et al. 2012, "Large scale distributed deep networks"). Workers
// push gradients to the parameter server, which applies each one as it arrives, and pull the parameters back,
// never waiting for each other. A worker may pull only every n_fetch steps and push only every n_push steps (the
// gradients of the steps between are added up), trading staleness for traffic. With N workers of equal speed a
// gradient is on average about N - 1 updates stale (Gupta et al. 2015); data_parallel's staleness histogram
// shows the distribution.

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/core/options.hpp"
#include "hitch/sync/detail/state.hpp"
#include "hitch/sync/server/options.hpp"

namespace hitch::sync {

class async {
public:
    struct options_type {
        server_options server{};
        /// n_fetch: pull the parameters every this many steps.
        std::uint64_t fetch_every = 1;
        /// n_push: push the (summed) gradients every this many steps.
        std::uint64_t push_every = 1;

        void validate() const {
            server.validate();
            option_validator("hitch::sync::async")
                .closed("fetch_every", fetch_every, std::uint64_t{1}, std::uint64_t{1} << 32)
                .closed("push_every", push_every, std::uint64_t{1}, std::uint64_t{1} << 32);
        }
    };
    static constexpr std::string_view name = "async";
    static constexpr bool exchanges_gradients = false;
    static constexpr bool asynchronous = true;

    async() = default;
    explicit async(const options_type& options) : options_(options) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }
    [[nodiscard]] const server_options& server() const noexcept { return options_.server; }
    [[nodiscard]] bool needs_server() const noexcept { return true; }
    [[nodiscard]] sync::server_rule server_rule(int /*workers*/) const { return {}; }

    template <server_context Ctx>
    step_result step(Ctx& ctx) {
        if (!ctx.prepare_local_gradients()) return {false, false, staleness_, 0};
        const bool push = ++since_push_ >= options_.push_every;
        const bool pull = ++since_fetch_ >= options_.fetch_every;
        const server_reply r = ctx.exchange_with_server({push, false, pull});
        if (push) {
            since_push_ = 0;
            staleness_ = r.staleness;
        }
        if (pull) since_fetch_ = 0;
        return {true, false, staleness_, r.dropped};
    }
    [[nodiscard]] std::uint64_t staleness() const noexcept { return staleness_; }
    void save_state(std::vector<std::byte>& blob) const {
        const std::array<std::uint64_t, 3> v{staleness_, since_push_, since_fetch_};
        detail::save_counters(blob, name, v);
    }
    void load_state(std::span<const std::byte> blob) {
        std::array<std::uint64_t, 3> v{};
        detail::load_counters(blob, name, v);
        if (v[1] >= options_.push_every || v[2] >= options_.fetch_every)
            throw mismatch_error(hitch::detail::concat("hitch::sync::async: the saved state is ", v[1], " and ", v[2],
                                                       " steps into push and fetch periods of ", options_.push_every,
                                                       " and ", options_.fetch_every));
        staleness_ = v[0];
        since_push_ = v[1];
        since_fetch_ = v[2];
    }

private:
    options_type options_{};
    std::uint64_t staleness_ = 0;
    std::uint64_t since_push_ = 0;
    std::uint64_t since_fetch_ = 0;
};

static_assert(check_sync_policy<async>() && server_policy<async>, "hitch::sync::async must model hitch::sync_policy");

}  // namespace hitch::sync
