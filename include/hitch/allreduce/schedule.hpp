#pragma once
// The schedule concept bound to hitch's transport: allreduce::schedule_for<S, C> is allreduce_schedule<S,
// transport<C>> on a communicator C, and allreduce::check_schedule<S, C>() is its first-failure diagnostic, used
// where a user's schedule first meets hitch (allreduce(), fusion, data_parallel).

#include "hitch/allreduce/transport.hpp"
#include "hitch/concepts/allreduce_schedule.hpp"
#include "hitch/concepts/communicator.hpp"

namespace hitch::allreduce {

/// An all-reduce schedule usable on communicator C.
template <class S, class C>
concept schedule_for = communicator<C> && allreduce_schedule<S, transport<C>>;

/// A schedule with reduce-to-root and broadcast forms, usable on communicator C.
template <class S, class C>
concept rooted_schedule_for = communicator<C> && rooted_schedule<S, transport<C>>;

/// Returns true when S models schedule_for<S, C>; otherwise fails to compile with one sentence naming the first
/// requirement C or S misses.
template <class S, class C>
consteval bool check_schedule() {
    if constexpr (!communicator<C>)
        return check_communicator<C>();
    else
        return check_allreduce_schedule<S, transport<C>>();
}

}  // namespace hitch::allreduce
