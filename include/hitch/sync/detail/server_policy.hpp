#pragma once
// What soft, ssp and backup_workers share: a policy whose every step pushes this rank's gradients to the parameter
// server and pulls the parameters back, differing only in its options and the server's rule. The derived policy
// gives its name, its options type and server_rule(workers).

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "hitch/concepts/step_context.hpp"
#include "hitch/sync/detail/state.hpp"
#include "hitch/sync/server/options.hpp"

namespace hitch::sync::detail {

template <class Derived, class Options>
class push_pull_policy {
public:
    using options_type = Options;
    static constexpr bool exchanges_gradients = false;
    static constexpr bool asynchronous = true;

    push_pull_policy() = default;
    explicit push_pull_policy(const options_type& options) : options_(options) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }
    [[nodiscard]] const server_options& server() const noexcept { return options_.server; }
    [[nodiscard]] bool needs_server() const noexcept { return true; }

    /// Push this rank's gradients, pull the parameters back; a step whose local gradients were not finite pushes
    /// nothing (the worker's own decision: the others do not wait for it).
    template <server_context Ctx>
    step_result step(Ctx& ctx) {
        if (!ctx.prepare_local_gradients()) return {false, false, staleness_, 0};
        const server_reply r = ctx.exchange_with_server({true, false, true});
        staleness_ = r.staleness;
        dropped_ += r.dropped;
        return {true, false, staleness_, r.dropped};
    }
    [[nodiscard]] std::uint64_t staleness() const noexcept { return staleness_; }
    /// Gradients of this rank the servers dropped so far.
    [[nodiscard]] std::uint64_t dropped() const noexcept { return dropped_; }

    void save_state(std::vector<std::byte>& blob) const {
        const std::array<std::uint64_t, 2> v{staleness_, dropped_};
        save_counters(blob, Derived::name, v);
    }
    void load_state(std::span<const std::byte> blob) {
        std::array<std::uint64_t, 2> v{};
        load_counters(blob, Derived::name, v);
        staleness_ = v[0];
        dropped_ = v[1];
    }

protected:
    options_type options_{};

private:
    std::uint64_t staleness_ = 0;
    std::uint64_t dropped_ = 0;
};

}  // namespace hitch::sync::detail
