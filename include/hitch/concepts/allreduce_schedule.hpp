#pragma once
// hitch::allreduce_schedule<S, Transport>: an algorithm that all-reduces a contiguous buffer in place, talking to
// the other ranks through a transport. Modelled by allreduce::ring, recursive_doubling, rabenseifner,
// binary_tree, double_binary_tree, hierarchical<Intra, Inter>, parameter_server, native (only where the
// communicator has its own all-reduce) and automatic.
//
//   S::name                               static constexpr std::string_view: how it is named in messages
//   S::options_type, S(options_type), S(), s.options()
//                                         typed run-time options with validate() (config_error when out of range)
//   s.cost(p, n_bytes, constants)         -> hitch::cost_estimate, its alpha-beta-gamma cost (hitch/core/cost.hpp)
//   s.run(transport&, std::span<T>, reduce_op)
//                                         collective: every rank calls it; T is float, double, half and bfloat16
//
// The floor states the schedule for any transport type; hitch/allreduce/schedule.hpp binds it to
// allreduce::transport<C> (allreduce::schedule_for<S, C>), which supplies the call's tags, deadline, scratch
// memory, and the direct path for communicators whose ranks share an address space. A user's own schedule plugs
// into hitch::allreduce::allreduce<S>() by modelling it.

#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>

#include "hitch/core/cost.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/reduce_op.hpp"

namespace hitch {

/// `static constexpr std::string_view name = "...";`
template <class S>
concept schedule_has_name = requires {
    { S::name } -> std::convertible_to<std::string_view>;
};

/// A nested `options_type` with `validate()`, constructors from nothing and from options, and `options()`.
template <class S>
concept schedule_has_options =
    requires { typename S::options_type; } && requires(const S& s, const typename S::options_type& o) {
        o.validate();
        { s.options() } -> std::convertible_to<const typename S::options_type&>;
    } && std::default_initializable<S> && std::constructible_from<S, const typename S::options_type&>;

/// `cost_estimate cost(int p, std::size_t n_bytes, const cost_constants&) const`
template <class S>
concept schedule_has_cost = requires(const S& s, int p, std::size_t n, const cost_constants& k) {
    { s.cost(p, n, k) } -> std::same_as<cost_estimate>;
};

/// `void run(Transport&, std::span<T>, reduce_op) const` for each of float, double, half and bfloat16.
template <class S, class Transport>
concept schedule_runs_on = requires(const S& s, Transport& t, std::span<float> f, std::span<double> d,
                                    std::span<half> h, std::span<bfloat16> b, reduce_op op) {
    s.run(t, f, op);
    s.run(t, d, op);
    s.run(t, h, op);
    s.run(t, b, op);
};

/// An all-reduce algorithm that runs over Transport.
template <class S, class Transport>
concept allreduce_schedule =
    schedule_has_name<S> && schedule_has_options<S> && schedule_has_cost<S> && schedule_runs_on<S, Transport>;

/// `reduce(t, input, output, op, root)` leaves the result in `output` on `root` (output may alias input; elsewhere
/// it is workspace, or scratch when empty) and `broadcast(t, data, root)`.
template <class S, class Transport>
concept schedule_has_rooted_forms =
    requires(const S& s, Transport& t, std::span<const float> in, std::span<float> out, int root, reduce_op op) {
        s.reduce(t, in, out, op, root);
        s.broadcast(t, out, root);
    };

/// A schedule that can also reduce to one rank and broadcast from one (what hierarchical<Intra, Inter> needs of
/// Intra).
template <class S, class Transport>
concept rooted_schedule = allreduce_schedule<S, Transport> && schedule_has_rooted_forms<S, Transport>;

/// Returns true when S models allreduce_schedule<S, Transport>; otherwise fails to compile with one sentence
/// naming the first requirement S misses and what to write. allreduce::check_schedule<S, C>() (the form the
/// entry points use) checks the communicator first and then this.
template <class S, class Transport>
consteval bool check_allreduce_schedule() {
    if constexpr (!schedule_has_name<S>) {
        static_assert(schedule_has_name<S>,
                      "hitch::allreduce_schedule: the schedule type has no name: add "
                      "`static constexpr std::string_view name = \"my_schedule\";`");
    } else if constexpr (!schedule_has_options<S>) {
        static_assert(schedule_has_options<S>,
                      "hitch::allreduce_schedule: the schedule type has no options: add a nested "
                      "`struct options_type { void validate() const; };`, a default constructor, a constructor "
                      "taking `const options_type&` and `const options_type& options() const`");
    } else if constexpr (!schedule_has_cost<S>) {
        static_assert(schedule_has_cost<S>,
                      "hitch::allreduce_schedule: the schedule type has no cost: add "
                      "`hitch::cost_estimate cost(int p, std::size_t n_bytes, "
                      "const hitch::cost_constants&) const`");
    } else if constexpr (!schedule_runs_on<S, Transport>) {
        static_assert(schedule_runs_on<S, Transport>,
                      "hitch::allreduce_schedule: the schedule cannot run on this transport: add `template <class "
                      "Transport, class T> void run(Transport&, std::span<T>, hitch::reduce_op) const` for T = "
                      "float, double, half and bfloat16 (allreduce::native runs only on communicators with an "
                      "all-reduce of their own; use ring or automatic elsewhere)");
    }
    return true;
}

}  // namespace hitch
