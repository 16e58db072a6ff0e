#pragma once
// hitch::allreduce::double_binary_tree: two complementary binary trees, each reducing and broadcasting half of
// the buffer at the same time (Sanders, Speck & Traeff 2009, "Two-tree algorithms for full bandwidth broadcast,
// reduction and scan"; the scheme NCCL uses across nodes). Both are in-order trees; the second is the first with
// every rank shifted by one position, so a rank that is interior (two children) in one tree is a leaf in the
// other. Each rank then sends about 2n bytes in all instead of the 3n of an interior node of a single tree, while
// the latency keeps the lg p of a tree.
//
//   T(p, n) = 2 (d + S - 1) a + (B + 2 d s) b + R g      (per tree: S segments of s bytes; B and R: bytes the
//                                                         busiest rank sends and combines over both trees)

#include <algorithm>
#include <array>
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

class double_binary_tree {
public:
    struct options_type {
        /// Bytes per pipelined segment (of each tree's half).
        std::size_t segment_bytes = std::size_t{256} << 10;
        /// Segments in flight from each child, per tree.
        int pipeline_depth = 4;

        void validate() const {
            option_validator("hitch::allreduce::double_binary_tree")
                .closed("segment_bytes", segment_bytes, std::size_t{64}, std::size_t{1} << 30)
                .closed("pipeline_depth", pipeline_depth, 1, 64);
        }

        friend bool operator==(const options_type&, const options_type&) = default;
    };

    static constexpr std::string_view name = "double_binary_tree";

    double_binary_tree() = default;
    explicit double_binary_tree(const options_type& o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] cost_estimate cost(int p, std::size_t n_bytes, const cost_constants& = {}) const {
        cost_estimate c;
        if (p <= 1 || n_bytes == 0) return c;
        const std::array<double, 2> half{static_cast<double>(n_bytes / 2), static_cast<double>(n_bytes - n_bytes / 2)};
        const double seg = static_cast<double>(options_.segment_bytes);
        const double S = detail::segments(half[1], seg);
        const double s = half[1] / S;
        const double d = detail::inorder_tree_height(p);
        double busiest_sent = 0, busiest_reduced = 0;
        for (int r = 0; r < p; ++r) {
            double messages = 0, sent = 0, reduced = 0;
            for (int which = 0; which < 2; ++which) {
                const detail::tree_node node = detail::double_tree(p, r, which);
                const double hs = half[static_cast<std::size_t>(which)];
                const double segs = detail::segments(hs, seg);
                const double ups = node.parent >= 0 ? 1 : 0;
                messages += (ups + node.child_count) * segs;
                sent += (ups + node.child_count) * hs;
                reduced += node.child_count * hs;
            }
            c.sent_messages = std::max(c.sent_messages, messages);
            c.sent_bytes = std::max(c.sent_bytes, sent);
            busiest_sent = std::max(busiest_sent, sent);
            busiest_reduced = std::max(busiest_reduced, reduced);
        }
        c.latency_terms = 2 * (d + S - 1);
        c.bandwidth_bytes = busiest_sent + 2 * d * s;
        c.reduced_bytes = busiest_reduced;
        return c;
    }

    template <communicator C, floating_element T>
    void run(transport<C>& t, std::span<T> data, reduce_op op) const {
        const int p = t.size();
        if (p <= 1) return;
        const std::size_t h = data.size() / 2;
        std::array<detail::tree_part<T>, 2> parts{
            detail::tree_part<T>{detail::double_tree(p, t.rank(), 0), data.subspan(0, h), data.subspan(0, h), 0, 1},
            detail::tree_part<T>{detail::double_tree(p, t.rank(), 1), data.subspan(h), data.subspan(h), 2, 3}};
        detail::run_trees<C, T>(t, std::span<detail::tree_part<T>>(parts), op, true, true,
                                std::max<std::size_t>(1, options_.segment_bytes / sizeof(T)), options_.pipeline_depth);
    }

private:
    options_type options_{};
};

static_assert(schedule_for<double_binary_tree, comm::local>,
              "hitch::allreduce::double_binary_tree must model hitch::allreduce_schedule on comm::local");

}  // namespace hitch::allreduce
