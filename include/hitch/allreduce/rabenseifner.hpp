#pragma once
// hitch::allreduce::rabenseifner: a reduce-scatter by recursive halving followed by an all-gather by recursive
// doubling (Rabenseifner 2004, "Optimization of collective reduction operations"; Thakur, Rabenseifner & Gropp
// 2005, section 4.4; MPICH's algorithm for long messages and the one Goyal et al. 2017 used for ImageNet in an
// hour). In halving round k a rank keeps half of its current range, sends the other half to its partner and
// combines the partner's copy of the half it kept; after lg p rounds rank r owns the complete block r. The
// all-gather retraces the rounds, doubling the range each time. A world size that is not a power of two is folded
// first (hitch/allreduce/detail/fold.hpp).
//
//   T(p, n) = 2 lg p a + 2 (p-1)/p n b + (p-1)/p n g         (p a power of two; the fold adds 2 a + 2 n b + n g)
//
// Bandwidth-optimal like the ring with only 2 lg p rounds: the usual choice for medium and large buffers.

#include <algorithm>
#include <cstddef>
#include <span>
#include <string_view>

#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/detail/fold.hpp"
#include "hitch/allreduce/partition.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/core/options.hpp"

namespace hitch::allreduce {

class rabenseifner {
public:
    struct options_type {
        /// Bytes per pipelined message within a round.
        std::size_t segment_bytes = std::size_t{1} << 20;
        /// Receives in flight per round.
        int pipeline_depth = 4;

        void validate() const {
            option_validator("hitch::allreduce::rabenseifner")
                .closed("segment_bytes", segment_bytes, std::size_t{64}, std::size_t{1} << 30)
                .closed("pipeline_depth", pipeline_depth, 1, 64);
        }

        friend bool operator==(const options_type&, const options_type&) = default;
    };

    static constexpr std::string_view name = "rabenseifner";
    static constexpr int fold_in_channel = 0;
    static constexpr int halving_channel = 1;
    static constexpr int doubling_channel = 2;
    static constexpr int fold_out_channel = 3;

    rabenseifner() = default;
    explicit rabenseifner(const options_type& o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] cost_estimate cost(int p, std::size_t n_bytes, const cost_constants& = {}) const {
        cost_estimate c;
        if (p <= 1 || n_bytes == 0) return c;
        const double n = static_cast<double>(n_bytes);
        const double seg = static_cast<double>(options_.segment_bytes);
        const int p2 = detail::floor_pow2(p);
        const bool folded = p2 != p;
        // The busiest rank: its messages and bytes over the halving and doubling rounds (ranges halve each round).
        double messages = 0, sent = 0;
        for (int nr = 0; nr < p2; ++nr) {
            double m = 0, b = 0;
            int lo = 0, hi = p2;
            for (int mask = p2 / 2; mask >= 1; mask /= 2) {
                const int mid = lo + mask;
                const block out =
                    (nr & mask) ? partition_range(n_bytes, p2, lo, mid) : partition_range(n_bytes, p2, mid, hi);
                m += detail::segments(static_cast<double>(out.count), seg);
                b += static_cast<double>(out.count);
                if (nr & mask)
                    lo = mid;
                else
                    hi = mid;
            }
            for (int mask = 1; mask < p2; mask *= 2) {
                const int base = nr & ~(mask - 1);
                const block out = partition_range(n_bytes, p2, base, base + mask);
                m += detail::segments(static_cast<double>(out.count), seg);
                b += static_cast<double>(out.count);
            }
            if (folded && nr < p - p2) {  // an absorbing rank also returns the result
                m += detail::segments(n, seg);
                b += n;
            }
            messages = std::max(messages, m);
            sent = std::max(sent, b);
        }
        c.latency_terms = messages + (folded ? detail::segments(n, seg) : 0);
        c.bandwidth_bytes = 2.0 * (p2 - 1) * n / p2 + (folded ? 2 * n : 0);
        c.reduced_bytes = (p2 - 1) * n / p2 + (folded ? n : 0);
        c.sent_messages = messages;
        c.sent_bytes = sent;
        return c;
    }
    /// The same on ranks of several nodes (cost_on; allreduce/cost.hpp says why): the halving round with partner
    /// r ^ mask sends n mask / p, and its doubling round as much back; with mask below a node's g ranks inside the
    /// nodes, else across with g ranks sharing each nic. The far rounds, which cross, carry the large halves.
    [[nodiscard]] cost_estimate cost(const level_shape& shape, std::size_t n_bytes, const cost_constants& k) const {
        cost_estimate c = cost(shape.ranks, n_bytes, k);
        const int p = shape.ranks;
        if (shape.nodes <= 1 || c.latency_terms == 0) return c;
        const double g = shape.largest_node;
        if (detail::floor_pow2(p) != p || !shape.power_of_two_blocks()) return across_nodes(c, g);
        const double n = static_cast<double>(n_bytes);
        const double seg = static_cast<double>(options_.segment_bytes);
        c.latency_terms = c.bandwidth_bytes = 0;
        for (int mask = p / 2; mask >= 1; mask /= 2) {
            const double m = n * mask / p;
            if (shape.pairs_inside_nodes(mask)) {
                c.latency_terms += 2 * detail::segments(m, seg);
                c.bandwidth_bytes += 2 * m;
            } else {
                c.inter_latency_terms += 2 * detail::segments(m, seg);
                c.inter_bandwidth_bytes += 2 * g * m;
            }
        }
        return c;
    }

    template <communicator C, floating_element T>
    void run(transport<C>& t, std::span<T> data, reduce_op op) const {
        const int p = t.size();
        if (p <= 1) return;
        const std::size_t n = data.size();
        const std::size_t seg = std::max<std::size_t>(1, options_.segment_bytes / sizeof(T));
        const int depth = options_.pipeline_depth;
        const detail::fold f = detail::make_fold(p, t.rank());
        detail::fold_in(t, f, data, op, seg, depth, fold_in_channel);
        if (!f.folded_away()) {
            const int p2 = f.p2, nr = f.new_rank;
            const auto sub = [&](int first, int last) {
                const block b = partition_range(n, p2, first, last);
                return data.subspan(b.offset, b.count);
            };
            int lo = 0, hi = p2;
            for (int mask = p2 / 2; mask >= 1; mask /= 2) {
                const int partner = f.real_rank(nr ^ mask);
                const int mid = lo + mask;
                const bool upper = (nr & mask) != 0;
                const std::span<T> keep = upper ? sub(mid, hi) : sub(lo, mid);
                const std::span<T> give = upper ? sub(lo, mid) : sub(mid, hi);
                const combine_spec spec{op, partner < t.rank(), mask == 1 ? p : 1};
                t.exchange_reduce(partner, std::span<const T>(give), partner, keep, spec, seg, depth, halving_channel);
                if (upper)
                    lo = mid;
                else
                    hi = mid;
            }
            for (int mask = 1; mask < p2; mask *= 2) {
                const int partner = f.real_rank(nr ^ mask);
                const int base = nr & ~(mask - 1);
                const int other = (nr ^ mask) & ~(mask - 1);
                t.exchange_copy(partner, std::span<const T>(sub(base, base + mask)), partner, sub(other, other + mask),
                                seg, doubling_channel);
            }
        }
        detail::fold_out(t, f, data, seg, fold_out_channel);
    }

private:
    options_type options_{};
};

static_assert(schedule_for<rabenseifner, comm::local>,
              "hitch::allreduce::rabenseifner must model hitch::allreduce_schedule on comm::local");

}  // namespace hitch::allreduce
