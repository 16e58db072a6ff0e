#pragma once
// hitch::sync_policy<P>: how replicas stay in step. A policy decides, once per training step, what is exchanged
// and when, by driving the exchange machinery data_parallel hands it (a step context). Modelled by sync::hard
// (all-reduce every step) and sync::local_sgd (average parameters every k steps).
//
//   P::name                                       static constexpr std::string_view: "hard", "local_sgd", ...
//   P::options_type, P(options_type), P(), p.options()
//                                                 typed options with validate(), checked by the constructor
//   P::exchanges_gradients                        true: data_parallel starts each gradient bucket's exchange as
//                                                 backward produces it (gradient_ready), to overlap it
//   template <step_context Ctx> p.step(Ctx&) -> sync::step_result
//                                                 one training step: finish exchanges, step the optimizer,
//                                                 synchronise parameters, as the policy dictates
//   p.staleness() -> std::uint64_t                how many steps behind the freshest parameters this replica may be
//   p.save_state(blob), p.load_state(bytes)       the policy's own position (e.g. local steps since averaging)
//
// step_context<Ctx> names what every policy may use (modelled by data_parallel's engine):
//   ctx.finish_gradient_exchange() -> bool   waits for every bucket; unscales and agrees on finiteness across ranks;
//                                            false when the step must be skipped (every rank gets the same answer)
//   ctx.check_local_gradients() -> bool      the same agreement without exchanging gradients
//   ctx.apply_optimizer()                    steps every layer with the current learning rate
//   ctx.average_parameters(bool with_state)  all-reduce-average the parameters (and optimizer state) over ranks
//   ctx.step_index(), ctx.rank(), ctx.size()
// A policy is checked against step_context_archetype, the least context; a policy that needs more (a parameter
// server's push and pull) asks for a refinement of step_context in its own step's constraint.

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

/// What every sync policy may ask of the training step it drives.
template <class Ctx>
concept step_context = requires(Ctx& ctx, const Ctx& cctx, bool with_state) {
    { ctx.finish_gradient_exchange() } -> std::convertible_to<bool>;
    { ctx.check_local_gradients() } -> std::convertible_to<bool>;
    ctx.apply_optimizer();
    ctx.average_parameters(with_state);
    { cctx.step_index() } -> std::convertible_to<std::uint64_t>;
    { cctx.rank() } -> std::convertible_to<int>;
    { cctx.size() } -> std::convertible_to<int>;
};

/// The least step context: exactly the members of step_context, doing nothing.
struct step_context_archetype {
    bool finish_gradient_exchange() { return true; }
    bool check_local_gradients() { return true; }
    void apply_optimizer() {}
    void average_parameters(bool /*with_optimizer_state*/) {}
    [[nodiscard]] std::uint64_t step_index() const { return 0; }
    [[nodiscard]] int rank() const { return 0; }
    [[nodiscard]] int size() const { return 1; }
};
static_assert(step_context<step_context_archetype>);

template <class P>
concept sync_policy_has_name = requires {
    { P::name } -> std::convertible_to<std::string_view>;
};

template <class P>
concept sync_policy_has_options =
    requires { typename P::options_type; } && requires(const P& p, const typename P::options_type& o) {
        o.validate();
        { p.options() } -> std::convertible_to<const typename P::options_type&>;
    } && std::default_initializable<P> && std::constructible_from<P, const typename P::options_type&>;

template <class P>
concept sync_policy_has_traits = requires {
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
concept sync_policy = std::movable<P> && sync_policy_has_name<P> && sync_policy_has_options<P> &&
                      sync_policy_has_traits<P> && sync_policy_can_step<P> && sync_policy_saves_state<P>;

/// Returns true when P models sync_policy; otherwise fails to compile with one sentence naming the first
/// requirement P misses and what to write. Use it where a user's policy first meets hitch:
/// `static_assert(check_sync_policy<P>());`.
template <class P>
consteval bool check_sync_policy() {
    if constexpr (!std::movable<P>) {
        static_assert(std::movable<P>,
                      "hitch::sync_policy: the policy type cannot be moved: give it a move "
                      "constructor and a move assignment");
    } else if constexpr (!sync_policy_has_name<P>) {
        static_assert(sync_policy_has_name<P>,
                      "hitch::sync_policy: the policy type has no name: add "
                      "`static constexpr std::string_view name = \"my_policy\";`");
    } else if constexpr (!sync_policy_has_options<P>) {
        static_assert(sync_policy_has_options<P>,
                      "hitch::sync_policy: the policy type has no options: add a nested `struct options_type { "
                      "void validate() const; };`, a default constructor, a constructor taking `const "
                      "options_type&` and `const options_type& options() const`");
    } else if constexpr (!sync_policy_has_traits<P>) {
        static_assert(sync_policy_has_traits<P>,
                      "hitch::sync_policy: the policy type does not say whether it "
                      "exchanges gradients: add "
                      "`static constexpr bool exchanges_gradients = true;` (or false)");
    } else if constexpr (!sync_policy_can_step<P>) {
        static_assert(sync_policy_can_step<P>,
                      "hitch::sync_policy: the policy type cannot step: add `template <hitch::step_context Ctx> "
                      "hitch::sync::step_result step(Ctx&)` and `std::uint64_t staleness() const`");
    } else if constexpr (!sync_policy_saves_state<P>) {
        static_assert(sync_policy_saves_state<P>,
                      "hitch::sync_policy: the policy type cannot save its state: add "
                      "`void save_state(std::vector<std::byte>&) const` and "
                      "`void load_state(std::span<const std::byte>)`");
    }
    return true;
}

}  // namespace hitch
