#pragma once
// sync::hogwild: lock-free asynchronous SGD on one parameter array shared by the threads of one process (Niu,
// Recht, Re and Wright 2011, "Hogwild!: A Lock-Free Approach to Parallelizing Stochastic Gradient Descent"). Each
// rank steps its own copy of the parameters with its own optimizer state, adds the change into the shared array
// element by element without locks, and continues from the shared array as it finds it. Two ranks that update the
// same element at once may lose one of the two updates, as in the paper; with sparse gradients collisions are rare
// and the speed-up is near linear in the cores. Nothing is exchanged between processes, so data_parallel accepts
// this policy only over a communicator whose ranks are threads (comm::local). Runs are not reproducible: the
// interleaving of the ranks decides the result.
//
// Each shared float is read and written through std::atomic_ref with relaxed order: a load and a store, not an
// atomic read-modify-write, so an update can be lost exactly as in Hogwild, but there is no data race in the C++
// sense (a thread sanitizer stays silent) and on common hardware the accesses are plain loads and stores.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/concepts/sync_policy.hpp"
#include "hitch/core/error.hpp"
#include "hitch/sync/detail/state.hpp"

namespace hitch::sync {

class hogwild {
public:
    struct options_type {
        void validate() const {}
    };
    static constexpr std::string_view name = "hogwild";
    static constexpr bool exchanges_gradients = false;
    static constexpr bool asynchronous = true;
    static constexpr bool shares_memory = true;

    hogwild() = default;
    explicit hogwild(const options_type& options) : options_(options) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    /// One update: this rank's optimizer step, added into the shared parameters, which this rank then continues
    /// from. The staleness is the number of other ranks' updates applied between this rank's previous read of the
    /// shared parameters and this write.
    template <shared_memory_context Ctx>
    step_result step(Ctx& ctx);

    /// The staleness of the last applied update.
    [[nodiscard]] std::uint64_t staleness() const noexcept { return staleness_; }

    void save_state(std::vector<std::byte>& blob) const {
        const std::array<std::uint64_t, 1> v{staleness_};
        detail::save_counters(blob, name, v);
    }
    /// The parameters a rank steps after a load come from the checkpoint, not from the shared array, so the first
    /// update after it counts no staleness.
    void load_state(std::span<const std::byte> blob) {
        std::array<std::uint64_t, 1> v{};
        detail::load_counters(blob, name, v);
        staleness_ = v[0];
        seen_.reset();
    }

private:
    static void check_shapes(std::span<const layer> own, std::span<const layer> shared);

    options_type options_{};
    std::uint64_t staleness_ = 0;
    // The update count at this rank's last read of the shared parameters. A new data_parallel's shared array
    // starts at 0 updates, as a copy of rank 0's parameters, which every rank starts from.
    std::optional<std::uint64_t> seen_{0};
    std::vector<float> before_;  // this rank's parameters before its optimizer step
};

static_assert(check_sync_policy<hogwild>() && sync_policy<hogwild>,
              "hitch::sync::hogwild must model hitch::sync_policy");

// ---- implementation --------------------------------------------------------------------------------------------

template <shared_memory_context Ctx>
step_result hogwild::step(Ctx& ctx) {
    if (!ctx.prepare_local_gradients()) return {false, false, staleness_};
    const std::span<const layer> own = ctx.parameters();
    const std::span<const layer> shared = ctx.shared_parameters();
    check_shapes(own, shared);

    std::size_t total = 0;
    for (const layer& l : own) total += l.size();
    before_.resize(total);
    std::size_t at = 0;
    for (const layer& l : own)
        for (std::size_t i = 0; i < l.size(); ++i) before_[at++] = l.params[i];

    ctx.apply_optimizer();

    at = 0;
    for (std::size_t k = 0; k < own.size(); ++k) {
        float* const mine = own[k].params.data();
        float* const theirs = shared[k].params.data();
        for (std::size_t i = 0; i < own[k].size(); ++i) {
            std::atomic_ref<float> s(theirs[i]);
            s.store(s.load(std::memory_order_relaxed) + (mine[i] - before_[at++]), std::memory_order_relaxed);
        }
    }
    // Release: a rank that later reads the count (acquire) sees this rank's writes above.
    std::atomic<std::uint64_t>& updates = ctx.shared_updates();
    const std::uint64_t applied_before = updates.fetch_add(1, std::memory_order_acq_rel);
    staleness_ = seen_ ? applied_before - *seen_ : 0;

    // Every update counted here is visible in what follows; later ones may be seen in part.
    seen_ = updates.load(std::memory_order_acquire);
    for (std::size_t k = 0; k < own.size(); ++k) {
        float* const mine = own[k].params.data();
        float* const theirs = shared[k].params.data();
        for (std::size_t i = 0; i < own[k].size(); ++i)
            mine[i] = std::atomic_ref<float>(theirs[i]).load(std::memory_order_relaxed);
    }
    ctx.parameters_changed();
    return {true, false, staleness_};
}

inline void hogwild::check_shapes(std::span<const layer> own, std::span<const layer> shared) {
    if (own.size() != shared.size())
        throw mismatch_error(hitch::detail::concat("hitch::sync::hogwild: this rank has ", own.size(),
                                                   " layers, the shared parameters ", shared.size()));
    for (std::size_t k = 0; k < own.size(); ++k)
        if (own[k].size() != shared[k].size())
            throw mismatch_error(hitch::detail::concat("hitch::sync::hogwild: layer ", k, " ('", own[k].name, "') has ",
                                                       own[k].size(), " parameters on this rank, ", shared[k].size(),
                                                       " in the shared parameters"));
}

}  // namespace hitch::sync
