#pragma once
// sync::hard: fully synchronous data parallelism (as PyTorch DDP and Horovod). Every step all-reduces the
// gradients — bucket by bucket while backward runs — averages them, and every replica applies the same update, so
// replicas stay bitwise identical (staleness 0). Equivalent to SGD on the global batch p * b (Goyal et al. 2017).

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/concepts/sync_policy.hpp"
#include "hitch/sync/detail/state.hpp"

namespace hitch::sync {

class hard {
public:
    struct options_type {
        void validate() const {}
    };
    static constexpr std::string_view name = "hard";
    static constexpr bool exchanges_gradients = true;

    hard() = default;
    explicit hard(const options_type& options) : options_(options) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    template <step_context Ctx>
    step_result step(Ctx& ctx) {
        if (!ctx.finish_gradient_exchange()) return {false, false, 0};
        ctx.apply_optimizer();
        return {true, true, 0};
    }
    [[nodiscard]] std::uint64_t staleness() const noexcept { return 0; }
    void save_state(std::vector<std::byte>& blob) const { detail::save_counters(blob, name, {}); }
    void load_state(std::span<const std::byte> blob) { detail::load_counters(blob, name, {}); }

private:
    options_type options_{};
};

static_assert(check_sync_policy<hard>() && sync_policy<hard>, "hitch::sync::hard must model hitch::sync_policy");

}  // namespace hitch::sync
