#pragma once
// hitch::allreduce_schedule<S, C>: an algorithm that all-reduces a contiguous buffer in place over communicator C.
// Modelled by allreduce::ring, recursive_doubling, rabenseifner, binary_tree, double_binary_tree,
// hierarchical<Intra, Inter>, parameter_server, native (only where C has its own all-reduce) and automatic.
//
//   S::name                               static constexpr std::string_view: how it is named in messages
//   S::options, S(options), S()           typed run-time options with validate() (config_error when out of range)
//   s.cost(p, n_bytes, constants)         -> allreduce::cost_estimate, its alpha-beta-gamma cost (hitch/allreduce/cost.hpp)
//   s.run(transport<C>&, std::span<T>, reduce_op)
//                                         collective: every rank calls it; T is float, double, half and bfloat16
//
// A schedule talks to the communicator only through allreduce::transport<C> (hitch/allreduce/transport.hpp), which
// supplies the call's tags, deadline, scratch memory, and the direct path for communicators whose ranks share an
// address space. A user's own schedule plugs into hitch::allreduce::allreduce<S>() by modelling this concept.

#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>

#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/dtype.hpp"

namespace hitch {

/// `static constexpr std::string_view name = "...";`
template <class S>
concept schedule_has_name = requires {
    { S::name } -> std::convertible_to<std::string_view>;
};

/// A nested `options` struct with `validate()`, a default constructor and a constructor from options.
template <class S>
concept schedule_has_options = requires(const typename S::options& o) {
    o.validate();
} && std::default_initializable<S> && std::constructible_from<S, const typename S::options&>;

/// `cost_estimate cost(int p, std::size_t n_bytes, const cost_constants&) const`
template <class S>
concept schedule_has_cost = requires(const S& s, int p, std::size_t n, const allreduce::cost_constants& k) {
    { s.cost(p, n, k) } -> std::same_as<allreduce::cost_estimate>;
};

/// `void run(transport<C>&, std::span<T>, reduce_op) const` for each of float, double, half and bfloat16.
template <class S, class C>
concept schedule_runs_on = requires(const S& s, allreduce::transport<C>& t, std::span<float> f, std::span<double> d,
                                    std::span<half> h, std::span<bfloat16> b, allreduce::reduce_op op) {
    s.run(t, f, op);
    s.run(t, d, op);
    s.run(t, h, op);
    s.run(t, b, op);
};

/// An all-reduce algorithm usable on communicator C.
template <class S, class C>
concept allreduce_schedule = communicator<C> && schedule_has_name<S> && schedule_has_options<S> &&
                             schedule_has_cost<S> && schedule_runs_on<S, C>;

/// A schedule that can also reduce to one rank and broadcast from one (what hierarchical<Intra, Inter> needs of
/// Intra): `reduce(t, input, output, op, root)` leaves the result in `output` on `root` (output may alias input;
/// elsewhere it is workspace, or scratch when empty) and `broadcast(t, data, root)`.
template <class S, class C>
concept rooted_schedule = allreduce_schedule<S, C> &&
    requires(const S& s, allreduce::transport<C>& t, std::span<const float> in, std::span<float> out, int root,
             allreduce::reduce_op op) {
        s.reduce(t, in, out, op, root);
        s.broadcast(t, out, root);
    };

namespace allreduce::detail {

/// Names the first requirement S misses on C, in words a newcomer can act on. Evaluates to true when S models
/// allreduce_schedule<S, C>.
template <class S, class C>
consteval bool check_schedule() {
    static_assert(communicator<C>,
                  "hitch::allreduce: the first argument's communicator type does not model hitch::communicator "
                  "(see hitch/concepts/communicator.hpp)");
    static_assert(schedule_has_name<S>,
                  "hitch::allreduce: the schedule type needs `static constexpr std::string_view name = \"...\";`");
    static_assert(schedule_has_options<S>,
                  "hitch::allreduce: the schedule type needs a nested `struct options { void validate() const; }`, "
                  "a default constructor and a constructor taking `const options&`");
    static_assert(schedule_has_cost<S>,
                  "hitch::allreduce: the schedule type needs `cost_estimate cost(int p, std::size_t n_bytes, "
                  "const cost_constants&) const` (hitch/allreduce/cost.hpp)");
    static_assert(schedule_runs_on<S, C>,
                  "hitch::allreduce: the schedule cannot run on this communicator: it needs `void run(transport<C>&, "
                  "std::span<T>, reduce_op) const` for T = float, double, half and bfloat16. allreduce::native runs "
                  "only on communicators with their own all-reduce (comm::mpi, with hitch/allreduce/native.hpp "
                  "included); use ring or automatic elsewhere.");
    return true;
}

}  // namespace allreduce::detail
}  // namespace hitch
