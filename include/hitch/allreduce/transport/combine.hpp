#pragma once
// How a received segment meets the receiver's own: dst = op(theirs, mine) or op(mine, theirs) per combine_spec,
// and how a communicator that models time hears of it (charge_combine).

#include <cstddef>

#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/core/dtype.hpp"

namespace hitch::allreduce::detail {

/// dst = op(theirs, mine) or op(mine, theirs) per `spec` (dst may alias either).
template <floating_element T>
void combine_into(T* dst, const T* theirs, const T* mine, std::size_t n, const combine_spec& spec) noexcept {
    if (spec.incoming_left)
        combine(dst, theirs, mine, n, spec.op, spec.divisor);
    else
        combine(dst, mine, theirs, n, spec.op, spec.divisor);
}

/// Tells a communicator that models time (comm::simulated, its gamma) that `bytes` of received data were just
/// combined into this rank's own; every other communicator has nothing to count.
template <class C>
void charge_combine(C& comm, std::size_t bytes) {
    if constexpr (requires { comm.charge_combine(bytes); }) comm.charge_combine(bytes);
}

/// The staged path's combination of one piece into its place in the receiver's buffer (a detail::piece_combiner).
template <floating_element T>
void combine_piece(std::byte* dst, const std::byte* piece, std::size_t bytes, const combine_spec& spec) noexcept {
    combine_into(reinterpret_cast<T*>(dst), reinterpret_cast<const T*>(piece), reinterpret_cast<T*>(dst),
                 bytes / sizeof(T), spec);
}

}  // namespace hitch::allreduce::detail
