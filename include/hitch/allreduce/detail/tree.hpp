#pragma once
// Pipelined reduce and broadcast along binary trees, shared by binary_tree, double_binary_tree and the rooted
// collectives. Each tree carries its own part of the buffer, cut into segments: a node combines segment j from
// its children into its own and passes it to its parent while segment j+1 is still arriving; the root's finished
// segments flow back down the same way. The engine never blocks on one message: it advances whatever is ready in
// any tree (so two trees sharing ranks cannot wait on each other), and waits only when nothing can move.

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "hitch/allreduce/partition.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/error.hpp"

namespace hitch::allreduce::detail {

/// A rank's place in one tree.
struct tree_node {
    int parent = -1;
    std::array<int, 2> children{-1, -1};
    int child_count = 0;
};

/// Heap-ordered binary tree rooted at `root`: position v = (rank - root) mod p has children 2v+1 and 2v+2.
[[nodiscard]] inline tree_node heap_tree(int p, int rank, int root) {
    tree_node t;
    const int v = (rank - root + p) % p;
    if (v > 0) t.parent = ((v - 1) / 2 + root) % p;
    for (int c : {2 * v + 1, 2 * v + 2})
        if (c < p) t.children[static_cast<std::size_t>(t.child_count++)] = (c + root) % p;
    return t;
}

/// Height of the heap tree on p ranks.
[[nodiscard]] constexpr int heap_tree_height(int p) noexcept {
    int h = 0;
    while ((2 << h) <= p) ++h;
    return p <= 1 ? 0 : h;
}

/// The in-order binary tree on positions 1..p of Sanders, Speck & Traeff (2009): the root of a range is the
/// position with the most trailing zero bits, so odd positions are leaves and even positions are interior.
/// Returns the node of position x with positions (not ranks) for parent and children.
[[nodiscard]] inline tree_node inorder_tree_positions(int p, int x) {
    const auto range_root = [](int lo, int hi) {
        for (int bit = 30; bit >= 0; --bit) {
            const int candidate = (hi >> bit) << bit;
            if (candidate >= lo && candidate > 0) return candidate;
        }
        return lo;
    };
    tree_node t;
    int lo = 1, hi = p, parent = -1;
    for (;;) {
        const int m = range_root(lo, hi);
        if (m == x) {
            t.parent = parent;
            if (lo <= m - 1) t.children[static_cast<std::size_t>(t.child_count++)] = range_root(lo, m - 1);
            if (m + 1 <= hi) t.children[static_cast<std::size_t>(t.child_count++)] = range_root(m + 1, hi);
            return t;
        }
        parent = m;
        if (x < m)
            hi = m - 1;
        else
            lo = m + 1;
    }
}

/// The two complementary trees of a double binary tree: tree 0 puts rank r at position r+1 (even ranks are
/// leaves); tree 1 shifts every rank by one position, so its interior ranks are tree 0's leaves (for odd p, rank
/// p-1 is a leaf in both).
[[nodiscard]] inline tree_node double_tree(int p, int rank, int which) {
    const auto to_position = [&](int r) { return which == 0 ? r + 1 : (r + 1) % p + 1; };
    const auto to_rank = [&](int x) { return which == 0 ? x - 1 : (x - 2 + p) % p; };
    tree_node t = inorder_tree_positions(p, to_position(rank));
    if (t.parent >= 0) t.parent = to_rank(t.parent);
    for (int c = 0; c < t.child_count; ++c)
        t.children[static_cast<std::size_t>(c)] = to_rank(t.children[static_cast<std::size_t>(c)]);
    return t;
}

/// Height of the in-order tree on p positions.
[[nodiscard]] constexpr int inorder_tree_height(int p) noexcept { return heap_tree_height(p); }

/// One tree's share of a call.
template <class T>
struct tree_part {
    tree_node node;
    std::span<const T> input;  ///< this rank's contribution (reduce)
    std::span<T> output;       ///< the result (root after reduce; everyone after broadcast); may alias input
    int reduce_channel = 0;
    int broadcast_channel = 1;
};

/// Runs a pipelined reduce (to each tree's root) and/or broadcast (from it) over every part at once. After a
/// reduce, a non-root rank's output is workspace (scratch when it has children and output is empty).
template <class C, element_type T>
void run_trees(transport<C>& t, std::span<tree_part<T>> parts, reduce_op op, bool reduce, bool broadcast,
               std::size_t segment, int depth) {
    using incoming = typename transport<C>::template incoming<T>;
    using outgoing = typename transport<C>::outgoing;
    const int p = t.size();
    segment = std::max<std::size_t>(segment, 1);
    depth = std::max(depth, 1);

    struct state {
        tree_part<T>* part = nullptr;
        std::size_t n = 0, count = 0;
        std::span<T> acc;  // where this rank's partial sums live
        std::array<std::vector<incoming>, 2> from_child;
        std::array<std::span<T>, 2> slots;
        std::vector<outgoing> up;
        std::vector<outgoing> down;
        std::vector<incoming> from_parent;
        std::size_t r_posted = 0, r_done = 0, b_posted = 0, b_done = 0;
    };
    std::vector<state> states(parts.size());
    const auto range = [&](const state& s, std::size_t j) {
        return allreduce::block{j * segment, std::min(segment, s.n - j * segment)};
    };

    for (std::size_t i = 0; i < parts.size(); ++i) {
        state& s = states[i];
        s.part = &parts[i];
        const tree_node& node = parts[i].node;
        s.n = reduce ? parts[i].input.size() : parts[i].output.size();
        s.count = transport<C>::segments(s.n, segment);
        if (reduce && node.child_count > 0) {
            s.acc = parts[i].output.size() == s.n ? parts[i].output : t.template scratch<T>(s.n);
            for (int c = 0; c < node.child_count; ++c) {
                s.from_child[static_cast<std::size_t>(c)].resize(static_cast<std::size_t>(depth));
                if (!t.direct() && s.count > 0)
                    s.slots[static_cast<std::size_t>(c)] =
                        t.template scratch<T>(static_cast<std::size_t>(depth) * std::min(segment, s.n));
            }
        }
        s.up.reserve(s.count);
        s.down.reserve(s.count * static_cast<std::size_t>(node.child_count));
        s.from_parent.reserve(s.count);
    }

    const auto advance = [&](state& s) {
        const tree_node& node = s.part->node;
        bool moved = false;
        if constexpr (floating_element<T>) {
            if (reduce) {
                // Receives from the children for the next segments, `depth` ahead.
                while (node.child_count > 0 && s.r_posted < s.count &&
                       s.r_posted < s.r_done + static_cast<std::size_t>(depth)) {
                    const allreduce::block b = range(s, s.r_posted);
                    for (int c = 0; c < node.child_count; ++c) {
                        const auto cc = static_cast<std::size_t>(c);
                        const std::size_t w = std::min(segment, s.n);
                        const std::span<T> slot =
                            t.direct()
                                ? std::span<T>()
                                : s.slots[cc].subspan((s.r_posted % static_cast<std::size_t>(depth)) * w, b.count);
                        s.from_child[cc][s.r_posted % static_cast<std::size_t>(depth)] =
                            t.template receive<T>(node.children[cc], s.part->reduce_channel, b.count, slot);
                    }
                    ++s.r_posted;
                    moved = true;
                }
                // Combine, in segment order, and pass up.
                while (s.r_done < s.count) {
                    const allreduce::block b = range(s, s.r_done);
                    const std::size_t k = s.r_done % static_cast<std::size_t>(depth);
                    bool ready = true;
                    for (int c = 0; c < node.child_count && ready; ++c) {
                        if (s.r_done >= s.r_posted)
                            ready = false;
                        else
                            ready = s.from_child[static_cast<std::size_t>(c)][k].test();
                    }
                    if (!ready) break;
                    const T* mine = s.part->input.data() + b.offset;
                    if (node.child_count > 0) {
                        std::array<const T*, 3> sources{mine, nullptr, nullptr};
                        for (int c = 0; c < node.child_count; ++c)
                            sources[static_cast<std::size_t>(c) + 1] =
                                s.from_child[static_cast<std::size_t>(c)][k].data();
                        T* dst = s.acc.data() + b.offset;
                        combine_many(dst, sources.data(), static_cast<std::size_t>(node.child_count) + 1, b.count, op,
                                     node.parent < 0 ? p : 1);
                        charge_combine(t.comm(), static_cast<std::size_t>(node.child_count) * b.count * sizeof(T));
                        for (int c = 0; c < node.child_count; ++c)
                            s.from_child[static_cast<std::size_t>(c)][k].release();
                        mine = dst;
                    }
                    if (node.parent >= 0)
                        s.up.push_back(
                            t.template send<T>(node.parent, s.part->reduce_channel, std::span<const T>(mine, b.count)));
                    ++s.r_done;
                    moved = true;
                }
            }
        }
        if (broadcast) {
            const auto send_down = [&](std::size_t j) {
                const allreduce::block b = range(s, j);
                for (int c = 0; c < node.child_count; ++c)
                    s.down.push_back(t.template send<T>(node.children[static_cast<std::size_t>(c)],
                                                        s.part->broadcast_channel,
                                                        std::span<const T>(s.part->output.data() + b.offset, b.count)));
            };
            if (node.parent < 0) {
                const std::size_t finished = reduce ? s.r_done : s.count;
                while (s.b_done < finished) {
                    send_down(s.b_done++);
                    moved = true;
                }
            } else {
                // Segment j is overwritten by the result only after our partial of it has left.
                while (s.b_posted < s.count && (!reduce || (s.b_posted < s.r_done && s.up[s.b_posted].test()))) {
                    const allreduce::block b = range(s, s.b_posted);
                    s.from_parent.push_back(t.template receive_into<T>(node.parent, s.part->broadcast_channel,
                                                                       s.part->output.subspan(b.offset, b.count)));
                    ++s.b_posted;
                    moved = true;
                }
                while (s.b_done < s.b_posted && s.from_parent[s.b_done].test()) {
                    send_down(s.b_done++);
                    moved = true;
                }
            }
        }
        return moved;
    };
    const auto finished = [&](state& s) {
        if (reduce && s.r_done < s.count) return false;
        if (broadcast && s.b_done < s.count) return false;
        for (auto& o : s.up)
            if (!o.test()) return false;
        for (auto& o : s.down)
            if (!o.test()) return false;
        return true;
    };

    for (;;) {
        bool all_done = true;
        const bool progressed = poll_until(t.limit(), [&] {
            bool moved = false;
            all_done = true;
            for (auto& s : states) {
                moved = advance(s) || moved;
                all_done = finished(s) && all_done;
            }
            return moved || all_done;
        });
        if (all_done) return;
        if (!progressed) {
            std::string where;
            for (const auto& s : states)
                where += hitch::detail::concat(where.empty() ? "" : "; ", "tree part: reduced ", s.r_done, "/", s.count,
                                               " segments, broadcast ", s.b_done, "/", s.count);
            throw timeout_error("hitch::allreduce tree pipeline", hitch::detail::concat("rank ", t.rank(), ": ", where),
                                t.limit().waited());
        }
    }
}

}  // namespace hitch::allreduce::detail
