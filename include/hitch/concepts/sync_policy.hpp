#pragma once
// hitch::sync_policy<P>: how replicas stay in step. A policy decides, once per training step, what is exchanged
// and when, by driving the exchange machinery data_parallel hands it (a step context). Modelled by sync::hard
// (all-reduce every step) and sync::local_sgd (average parameters every k steps); the soft, asynchronous,
// stale-synchronous, elastic-averaging and backup-worker policies model it the same way, some of them running the
// optimizer on parameter-server shards through the same context.
//
//   P::options_type, P(options), p.options()      typed options, validated by the constructor (config_error)
//   P::name                                       "hard", "local_sgd", ...
//   P::exchanges_gradients                        true: data_parallel starts each gradient bucket's exchange as
//                                                 backward produces it (gradient_ready), to overlap it
//   p.step(ctx) -> sync::step_result              one training step: finish exchanges, step the optimizer,
//                                                 synchronise parameters, as the policy dictates
//   p.staleness() -> std::uint64_t                how many steps behind the freshest parameters this replica may be
//   p.save_state(blob), p.load_state(bytes)       the policy's own position (e.g. local steps since averaging)
//
// The step context (modelled by data_parallel's engine; see step_context_archetype for the exact members):
//   ctx.finish_gradient_exchange() -> bool   waits for every bucket; unscales and agrees on finiteness across ranks;
//                                            false when the step must be skipped (every rank gets the same answer)
//   ctx.check_local_gradients() -> bool      the same agreement without exchanging gradients
//   ctx.apply_optimizer()                    steps every layer with the current learning rate
//   ctx.average_parameters(bool with_state)  all-reduce-average the parameters (and optimizer state) over ranks
//   ctx.step_index(), ctx.rank(), ctx.size()

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace hitch {

namespace sync {

/// What a policy's step did.
struct step_result {
    /// The optimizer was applied (false: the step was skipped on every rank, e.g. a gradient overflowed).
    bool applied = false;
    /// Parameters were averaged across ranks in this step.
    bool synchronized = false;
    /// Staleness of the gradients applied in this step, in steps.
    std::uint64_t staleness = 0;
};

}  // namespace sync

/// The members a sync policy may use; every data_parallel engine provides at least these.
struct step_context_archetype {
    bool finish_gradient_exchange() { return true; }
    bool check_local_gradients() { return true; }
    void apply_optimizer() {}
    void average_parameters(bool /*with_optimizer_state*/) {}
    [[nodiscard]] std::uint64_t step_index() const { return 0; }
    [[nodiscard]] int rank() const { return 0; }
    [[nodiscard]] int size() const { return 1; }
};

template <class P>
concept sync_policy_has_options = requires(const P& p) {
    typename P::options_type;
    requires std::constructible_from<P, typename P::options_type>;
    { p.options() } -> std::convertible_to<const typename P::options_type&>;
};

template <class P>
concept sync_policy_has_identity = requires {
    { P::name } -> std::convertible_to<std::string_view>;
    { P::exchanges_gradients } -> std::convertible_to<bool>;
};

template <class P>
concept sync_policy_can_step = requires(P& p, const P& cp, step_context_archetype& ctx) {
    { p.step(ctx) } -> std::same_as<sync::step_result>;
    { cp.staleness() } -> std::convertible_to<std::uint64_t>;
};

template <class P>
concept sync_policy_saves_state =
    requires(const P& cp, P& p, std::vector<std::byte>& blob, std::span<const std::byte> bytes) {
        cp.save_state(blob);
        p.load_state(bytes);
    };

/// A synchronisation policy (see the file comment).
template <class P>
concept sync_policy = std::movable<P> && sync_policy_has_options<P> && sync_policy_has_identity<P> &&
                      sync_policy_can_step<P> && sync_policy_saves_state<P>;

/// Static checks with messages a newcomer can act on.
template <class P>
constexpr bool check_sync_policy() {
    static_assert(sync_policy_has_options<P>,
                  "a sync policy needs a nested options_type, a constructor from it, and options()");
    static_assert(sync_policy_has_identity<P>,
                  "a sync policy needs static constexpr name and static constexpr bool exchanges_gradients");
    static_assert(sync_policy_can_step<P>,
                  "a sync policy needs step(context&) -> hitch::sync::step_result and staleness() const");
    static_assert(sync_policy_saves_state<P>,
                  "a sync policy needs save_state(std::vector<std::byte>&) const and "
                  "load_state(std::span<const std::byte>)");
    return true;
}

}  // namespace hitch
