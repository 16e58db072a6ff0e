#pragma once
// hitch::allreduce::binary_tree: a pipelined reduce to rank 0 along a binary tree, then a pipelined broadcast back
// down the same tree (the tree algorithms surveyed by Thakur, Rabenseifner & Gropp 2005; pipelining as in Sanders,
// Speck & Traeff 2009). The buffer moves in S segments; interior nodes combine their own segment with their two
// children's (accumulated in float for 16-bit types, rounded once) while later segments are in flight, so the
// depth d = floor(lg p) is paid once, not per segment. The root combines last and broadcasts the same bytes.
//
//   T(p, n) = 2 (d + S - 1) a + 2 k (d + S - 1) s b + k (d + S - 1) s g      (s = n / S bytes per segment,
//                                                                             k = min(2, p - 1) children)
//
// Latency grows only with lg p, so it suits small and medium buffers on many ranks; an interior node moves 3n
// bytes (n up, 2n down), so for large buffers ring, Rabenseifner or the double binary tree move less.
// Also provides reduce and broadcast with any root (the public reduce/broadcast and hierarchical's Intra).

#include <algorithm>
#include <cstddef>
#include <span>
#include <string_view>

#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/detail/tree.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/core/options.hpp"

namespace hitch::allreduce {

class binary_tree {
public:
    struct options_type {
        /// Bytes per pipelined segment.
        std::size_t segment_bytes = std::size_t{256} << 10;
        /// Segments in flight from each child (each needs one segment of scratch on the message path).
        int pipeline_depth = 4;

        void validate() const {
            option_validator("hitch::allreduce::binary_tree")
                .closed("segment_bytes", segment_bytes, std::size_t{64}, std::size_t{1} << 30)
                .closed("pipeline_depth", pipeline_depth, 1, 64);
        }

        friend bool operator==(const options_type&, const options_type&) = default;
    };

    static constexpr std::string_view name = "binary_tree";

    binary_tree() = default;
    explicit binary_tree(const options_type& o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] cost_estimate cost(int p, std::size_t n_bytes, const cost_constants& = {}) const {
        cost_estimate c;
        if (p <= 1 || n_bytes == 0) return c;
        const double n = static_cast<double>(n_bytes);
        const double S = detail::segments(n, static_cast<double>(options_.segment_bytes));
        const double s = n / S;
        const double d = detail::heap_tree_height(p);
        const double k = std::min(2, p - 1);
        c.latency_terms = 2 * (d + S - 1);
        c.bandwidth_bytes = 2 * k * (d + S - 1) * s;
        c.reduced_bytes = k * (d + S - 1) * s;
        for (int r = 0; r < p; ++r) {
            const detail::tree_node node = detail::heap_tree(p, r, 0);
            const double ups = node.parent >= 0 ? 1 : 0;
            c.sent_messages = std::max(c.sent_messages, (ups + node.child_count) * S);
            c.sent_bytes = std::max(c.sent_bytes, (ups + node.child_count) * n);
        }
        return c;
    }

    template <communicator C, floating_element T>
    void run(transport<C>& t, std::span<T> data, reduce_op op) const {
        if (t.size() <= 1) return;
        detail::tree_part<T> part{detail::heap_tree(t.size(), t.rank(), 0), data, data, 0, 1};
        detail::run_trees<C, T>(t, std::span<detail::tree_part<T>>(&part, 1), op, true, true, segment_elements<T>(),
                                options_.pipeline_depth);
    }

    /// The combined values land in `output` on `root` (output may alias input; elsewhere it is workspace, or
    /// scratch when empty).
    template <communicator C, floating_element T>
    void reduce(transport<C>& t, std::span<const T> input, std::span<T> output, reduce_op op, int root) const {
        if (t.size() <= 1) {
            if (output.data() != input.data() && output.size() == input.size())
                std::copy(input.begin(), input.end(), output.begin());
            return;
        }
        detail::tree_part<T> part{detail::heap_tree(t.size(), t.rank(), root), input, output, 0, 1};
        detail::run_trees<C, T>(t, std::span<detail::tree_part<T>>(&part, 1), op, true, false, segment_elements<T>(),
                                options_.pipeline_depth);
    }

    /// `data` on `root` is copied to every rank.
    template <communicator C, element_type T>
    void broadcast(transport<C>& t, std::span<T> data, int root) const {
        if (t.size() <= 1) return;
        detail::tree_part<T> part{detail::heap_tree(t.size(), t.rank(), root), {}, data, 0, 1};
        detail::run_trees<C, T>(t, std::span<detail::tree_part<T>>(&part, 1), reduce_op::sum, false, true,
                                segment_elements<T>(), options_.pipeline_depth);
    }

private:
    template <class T>
    [[nodiscard]] std::size_t segment_elements() const noexcept {
        return std::max<std::size_t>(1, options_.segment_bytes / sizeof(T));
    }
    options_type options_{};
};

static_assert(schedule_for<binary_tree, comm::local>,
              "hitch::allreduce::binary_tree must model hitch::allreduce_schedule on comm::local");
static_assert(rooted_schedule_for<binary_tree, comm::local>,
              "hitch::allreduce::binary_tree must offer reduce and broadcast (hierarchical's Intra)");

}  // namespace hitch::allreduce
