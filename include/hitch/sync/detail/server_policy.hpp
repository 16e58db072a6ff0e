#pragma once
// What the parameter-server policies share: their options' server part, and one step that pushes this rank's
// gradients and pulls the parameters back (soft, ssp, backup_workers); async, easgd step differently.

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/concepts/step_context.hpp"
#include "hitch/sync/detail/state.hpp"

namespace hitch::sync::detail {

/// Keeps the staleness and dropped counts of the last step, and saves them as the policy's state.
class server_step_counters {
public:
    /// Push this rank's gradients, pull the parameters back; a step whose local gradients were not finite pushes
    /// nothing (the worker's own decision: the others do not wait for it).
    template <server_context Ctx>
    step_result push_pull(Ctx& ctx) {
        if (!ctx.prepare_local_gradients()) return {false, false, staleness_, 0};
        const server_reply r = ctx.exchange_with_server({true, false, true});
        staleness_ = r.staleness;
        dropped_ += r.dropped;
        return {true, false, staleness_, r.dropped};
    }
    [[nodiscard]] std::uint64_t staleness() const noexcept { return staleness_; }
    /// Gradients of this rank the servers dropped so far.
    [[nodiscard]] std::uint64_t dropped() const noexcept { return dropped_; }
    void set(std::uint64_t staleness, std::uint64_t dropped) noexcept {
        staleness_ = staleness;
        dropped_ = dropped;
    }
    void save(std::vector<std::byte>& blob, std::string_view name) const {
        const std::array<std::uint64_t, 2> v{staleness_, dropped_};
        save_counters(blob, name, v);
    }
    void load(std::span<const std::byte> blob, std::string_view name) {
        std::array<std::uint64_t, 2> v{};
        load_counters(blob, name, v);
        set(v[0], v[1]);
    }

private:
    std::uint64_t staleness_ = 0;
    std::uint64_t dropped_ = 0;
};

}  // namespace hitch::sync::detail
