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
// The contexts a policy may ask for are in hitch/concepts/step_context.hpp: step_context (every policy),
// parameter_context (policies that read or rewrite the parameters: elastic averaging, block momentum),
// shared_memory_context (Hogwild: one parameter array for every rank of one process) and server_context
// (policies that push to and pull from a parameter server). A policy is checked against step_context_archetype,
// the least context; a policy that needs more constrains its own step with the refinement.
//
// A policy that needs a parameter server also models server_policy (below): it names the server's rule and the
// server's placement, and data_parallel builds the runtime (hitch/sync/server/) for it.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/concepts/step_context.hpp"

namespace hitch {

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

/// P steps on the archetype of the context it asks for (the least, or one of its refinements).
template <class P, class Archetype>
concept sync_policy_steps_on = requires(P& p, Archetype& ctx) {
    { p.step(ctx) } -> std::same_as<sync::step_result>;
};

template <class P>
concept sync_policy_can_step =
    (sync_policy_steps_on<P, step_context_archetype> || sync_policy_steps_on<P, parameter_context_archetype> ||
     sync_policy_steps_on<P, server_context_archetype> || sync_policy_steps_on<P, shared_memory_context_archetype>) &&
    requires(const P& cp) {
        { cp.staleness() } -> std::convertible_to<std::uint64_t>;
    };

template <class P>
concept sync_policy_saves_state =
    requires(const P& cp, P& p, std::vector<std::byte>& blob, std::span<const std::byte> bytes) {
        cp.save_state(blob);
        p.load_state(bytes);
    };

/// Optional trait: `static constexpr bool asynchronous = true` when ranks do not step in lockstep (a parameter
/// server, Hogwild). data_parallel then decides on loss scaling and non-finite gradients per rank, never waiting
/// for the others, and does not compare replicas.
template <class P>
concept asynchronous_policy = requires { requires static_cast<bool>(P::asynchronous); };

/// Optional trait: `static constexpr bool shares_memory = true` when the policy's step needs
/// shared_memory_context; data_parallel refuses, at compile time, a communicator whose ranks do not share memory.
template <class P>
concept shared_memory_policy = requires { requires static_cast<bool>(P::shares_memory); };

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
