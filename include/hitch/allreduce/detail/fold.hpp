#pragma once
// The standard fold for algorithms that need a power-of-two number of ranks (Thakur, Rabenseifner & Gropp 2005,
// section 4): with p = p' + rem (p' the largest power of two <= p), each of the first rem even ranks sends its
// whole buffer to the odd rank after it, which combines it (the lower rank's data as the left operand) and takes
// part in the power-of-two algorithm under a new rank; afterwards it returns the result to its even partner.

#include <cstddef>
#include <span>

#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport.hpp"

namespace hitch::allreduce::detail {

struct fold {
    int p2 = 1;        ///< ranks in the power-of-two phase
    int rem = 0;       ///< ranks folded away
    int new_rank = 0;  ///< this rank's number in the power-of-two phase; -1 when folded away
    int rank = 0;

    [[nodiscard]] bool folded_away() const noexcept { return new_rank < 0; }
    [[nodiscard]] bool absorbs() const noexcept { return rank < 2 * rem && rank % 2 == 1; }
    /// The real rank of power-of-two rank `nr`.
    [[nodiscard]] int real_rank(int nr) const noexcept { return nr < rem ? 2 * nr + 1 : nr + rem; }
};

[[nodiscard]] inline fold make_fold(int p, int rank) {
    fold f;
    f.p2 = floor_pow2(p);
    f.rem = p - f.p2;
    f.rank = rank;
    if (rank < 2 * f.rem)
        f.new_rank = rank % 2 == 0 ? -1 : rank / 2;
    else
        f.new_rank = rank - f.rem;
    return f;
}

/// Folded-away ranks hand their buffer to their odd partner, which combines it into its own.
template <class C, floating_element T>
void fold_in(transport<C>& t, const fold& f, std::span<T> data, reduce_op op, std::size_t segment, int depth,
             int channel) {
    if (f.folded_away()) {
        t.exchange_reduce(f.rank + 1, std::span<const T>(data), -1, std::span<T>(), combine_spec{op, true, 1}, segment,
                          depth, channel);
    } else if (f.absorbs()) {
        t.exchange_reduce(-1, std::span<const T>(), f.rank - 1, data, combine_spec{op, true, 1}, segment, depth,
                          channel);
    }
}

/// The odd partners return the finished result to the folded-away ranks.
template <class C, element_type T>
void fold_out(transport<C>& t, const fold& f, std::span<T> data, std::size_t segment, int channel) {
    if (f.folded_away())
        t.exchange_copy(-1, std::span<const T>(), f.rank + 1, data, segment, channel);
    else if (f.absorbs())
        t.exchange_copy(f.rank - 1, std::span<const T>(data), -1, std::span<T>(), segment, channel);
}

}  // namespace hitch::allreduce::detail
