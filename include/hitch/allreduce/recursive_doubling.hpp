#pragma once
// hitch::allreduce::recursive_doubling: in round k every rank exchanges its whole buffer with the rank whose
// number differs in bit k and both combine (Thakur, Rabenseifner & Gropp 2005, section 4.1). After lg p rounds
// every rank holds the result. Both partners combine with the lower rank's data as the left operand, so they
// compute the same bits, and by induction every rank ends with identical bytes. A world size that is not a power
// of two is folded first (hitch/allreduce/detail/fold.hpp).
//
//   T(p, n) = lg p (a + n b + n g)                      (p a power of two)
//           = (floor(lg p) + 2) a + (floor(lg p) + 2) n b + (floor(lg p) + 1) n g      (otherwise)
//
// The fewest rounds of any schedule: the choice for small buffers, where latency dominates.

#include <algorithm>
#include <cstddef>
#include <span>
#include <string_view>

#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/detail/fold.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/core/options.hpp"

namespace hitch::allreduce {

class recursive_doubling {
public:
    struct options_type {
        /// Bytes per pipelined message within a round.
        std::size_t segment_bytes = std::size_t{1} << 20;
        /// Receives in flight per round.
        int pipeline_depth = 4;

        void validate() const {
            option_validator("hitch::allreduce::recursive_doubling")
                .closed("segment_bytes", segment_bytes, std::size_t{64}, std::size_t{1} << 30)
                .closed("pipeline_depth", pipeline_depth, 1, 64);
        }

        friend bool operator==(const options_type&, const options_type&) = default;
    };

    static constexpr std::string_view name = "recursive_doubling";
    static constexpr int fold_in_channel = 0;
    static constexpr int round_channel = 1;
    static constexpr int fold_out_channel = 2;

    recursive_doubling() = default;
    explicit recursive_doubling(const options_type& o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] cost_estimate cost(int p, std::size_t n_bytes, const cost_constants& = {}) const {
        cost_estimate c;
        if (p <= 1 || n_bytes == 0) return c;
        const double n = static_cast<double>(n_bytes);
        const double S = detail::segments(n, static_cast<double>(options_.segment_bytes));
        const int rounds = detail::floor_log2(p);
        const bool folded = detail::floor_pow2(p) != p;
        c.latency_terms = (rounds + (folded ? 2 : 0)) * S;
        c.bandwidth_bytes = (rounds + (folded ? 2 : 0)) * n;
        c.reduced_bytes = (rounds + (folded ? 1 : 0)) * n;
        c.sent_messages = (rounds + (folded ? 1 : 0)) * S;  // an absorbing rank also returns the result
        c.sent_bytes = (rounds + (folded ? 1 : 0)) * n;
        return c;
    }
    /// The same on ranks of several nodes (cost_on; allreduce/cost.hpp says why): the rounds with mask below a
    /// node's g ranks inside the nodes, the others across with g ranks sharing each nic.
    [[nodiscard]] cost_estimate cost(const level_shape& shape, std::size_t n_bytes, const cost_constants& k) const {
        cost_estimate c = cost(shape.ranks, n_bytes, k);
        if (shape.nodes <= 1 || c.latency_terms == 0) return c;
        const double g = shape.largest_node;
        if (detail::floor_pow2(shape.ranks) != shape.ranks || !shape.power_of_two_blocks()) return across_nodes(c, g);
        const double n = static_cast<double>(n_bytes);
        const double S = detail::segments(n, static_cast<double>(options_.segment_bytes));
        c.latency_terms = c.bandwidth_bytes = 0;
        for (int mask = 1; mask < shape.ranks; mask <<= 1) {
            if (shape.pairs_inside_nodes(mask)) {
                c.latency_terms += S;
                c.bandwidth_bytes += n;
            } else {
                c.inter_latency_terms += S;
                c.inter_bandwidth_bytes += g * n;
            }
        }
        return c;
    }

    template <communicator C, floating_element T>
    void run(transport<C>& t, std::span<T> data, reduce_op op) const {
        const int p = t.size();
        if (p <= 1) return;
        const std::size_t seg = std::max<std::size_t>(1, options_.segment_bytes / sizeof(T));
        const detail::fold f = detail::make_fold(p, t.rank());
        detail::fold_in(t, f, data, op, seg, options_.pipeline_depth, fold_in_channel);
        if (!f.folded_away()) {
            // Each round's scratch is done with when the round ends; the next reuses it instead of taking lg p
            // buffers of n bytes for one call.
            const std::size_t mark = t.scratch_mark();
            for (int mask = 1; mask < f.p2; mask <<= 1) {
                const int partner = f.real_rank(f.new_rank ^ mask);
                const combine_spec spec{op, partner < t.rank(), 2 * mask == f.p2 ? p : 1};
                t.exchange_reduce(partner, std::span<const T>(data), partner, data, spec, seg, options_.pipeline_depth,
                                  round_channel);
                t.release_scratch(mark);
            }
        }
        detail::fold_out(t, f, data, seg, fold_out_channel);
    }

private:
    options_type options_{};
};

static_assert(schedule_for<recursive_doubling, comm::local>,
              "hitch::allreduce::recursive_doubling must model hitch::allreduce_schedule on comm::local");

}  // namespace hitch::allreduce
