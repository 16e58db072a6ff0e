#pragma once
// Whether automatic weighs a communicator's own all-reduce: a capability trait that hitch/allreduce/native.hpp
// specialises for comm::mpi, so the floor below it does not need <mpi.h>.

#include <type_traits>

namespace hitch::allreduce {

/// Capability trait: C has an all-reduce of its own that allreduce::native can call. Specialised by the header
/// that implements it (hitch/allreduce/native.hpp for comm::mpi).
template <class C>
struct has_native_allreduce : std::false_type {};

/// A communicator that exposes a native handle is expected to have a native all-reduce; automatic then insists on
/// seeing it (so every translation unit makes the same choice).
template <class C>
concept exposes_native_handle = requires(const C& c) { c.native_handle(); };

class native;

namespace detail {

/// `native`, made dependent on C so it must be complete only when a communicator that has one is used.
template <class C>
struct native_for {
    using type = native;
};

}  // namespace detail
}  // namespace hitch::allreduce
