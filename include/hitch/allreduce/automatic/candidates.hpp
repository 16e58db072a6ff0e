#pragma once
// automatic's candidates: the schedules it weighs, in the order it weighs them (a candidate's index is its row in
// the profile and its place in candidate_names), which of them run on a group's node layout, their modelled cost
// there (cost_on: two levels of network, allreduce/cost.hpp), and running one. The two-level candidate
// (hierarchical by node) is weighed only where the layout has two levels: more than one node, and more than one
// rank on some node. The group's layout is read once, collectively, and kept in its state.

#include <array>
#include <bit>
#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/allreduce/automatic/native_candidate.hpp"
#include "hitch/allreduce/automatic/profile.hpp"
#include "hitch/allreduce/binary_tree.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/double_binary_tree.hpp"
#include "hitch/allreduce/hierarchical.hpp"
#include "hitch/allreduce/parameter_server.hpp"
#include "hitch/allreduce/rabenseifner.hpp"
#include "hitch/allreduce/recursive_doubling.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/ring.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/node_layout.hpp"

namespace hitch::allreduce {

/// automatic's two-level candidate: a group per node, a pipelined tree reduce and broadcast inside each node, the
/// ring between the nodes' leaders; on a power-of-two number of nodes, Rabenseifner between them instead
/// (automatic_hierarchical_halving), which the model then puts at or below the ring at every size (the same bytes
/// between nodes, 2 lg N latencies instead of 2 (N - 1)). Its options are the ring form's (inter: the ring's).
using automatic_hierarchical = hierarchical<binary_tree, ring>;
using automatic_hierarchical_halving = hierarchical<binary_tree, rabenseifner>;

namespace detail {

inline constexpr int hierarchical_candidate = 6;
inline constexpr int native_candidate_index = 7;

/// A group's node layout and its shape, as automatic weighs them.
struct group_levels {
    node_layout layout;
    level_shape shape;
};
inline constexpr slot_key<group_levels> automatic_levels_slot{"automatic/levels"};

/// The levels of the group whose state is `state`: read from `comm` the first time (collective: every rank's first
/// automatic call on the group, or its calibration), else as kept. Without a communicator (a question asked
/// outside a call) and before any call, the p ranks are taken as one node.
template <communicator C>
[[nodiscard]] std::shared_ptr<group_levels> levels_of(shared_state<C>& state, C* comm, int p) {
    if (comm == nullptr) {
        if (auto found = state.slots.find(automatic_levels_slot)) return found;
        auto one = std::make_shared<group_levels>();
        one->layout.node_of_rank.assign(static_cast<std::size_t>(p), 0);
        one->layout.nodes = 1;
        one->shape = level_shape::one_node(p);
        return one;
    }
    return state.slots.get_or_make(automatic_levels_slot, [&] {
        auto made = std::make_shared<group_levels>();
        made->layout = node_layout_of(*comm);
        made->shape = level_shape::of(made->layout);
        return made;
    });
}

/// Candidate `index` (schedule s) on ranks of `shape`: its modelled seconds for n bytes, scaled by its measured
/// ratio when there is a profile.
template <class S>
[[nodiscard]] double modelled_seconds(int index, const S& s, const level_shape& shape, std::size_t n_bytes,
                                      const cost_constants& k, const automatic_profile* profile) {
    const auto model = [&](std::size_t bytes) { return cost_on(s, shape, bytes, k).seconds(k); };
    double c = model(n_bytes);
    if (profile != nullptr) c *= measured_ratio(*profile, index, n_bytes, model);
    return c;
}

/// The schedules automatic weighs, built from its options.
class candidate_set {
public:
    static constexpr std::array<std::string_view, automatic_profile::candidates> names{
        recursive_doubling::name,     ring::name,
        rabenseifner::name,           binary_tree::name,
        double_binary_tree::name,     parameter_server::name,
        automatic_hierarchical::name, std::string_view("native")};

    candidate_set() = default;
    template <class Options>
    explicit candidate_set(const Options& o)
        : ring_(o.ring),
          recursive_doubling_(o.recursive_doubling),
          rabenseifner_(o.rabenseifner),
          binary_tree_(o.binary_tree),
          double_binary_tree_(o.double_binary_tree),
          parameter_server_(o.parameter_server),
          hierarchical_(o.hierarchical),
          hierarchical_halving_(automatic_hierarchical_halving::options_type{o.hierarchical.ranks_per_group,
                                                                             o.hierarchical.intra, o.rabenseifner}) {}

    /// Whether the two-level candidate halves between the nodes' leaders on ranks of `shape`: a power-of-two
    /// number of nodes (more than one).
    [[nodiscard]] static bool leaders_halve(const level_shape& shape) noexcept {
        return shape.nodes > 1 && std::has_single_bit(static_cast<unsigned>(shape.nodes));
    }

    /// Calls f(index, schedule) for each candidate that runs on ranks of `shape` with constants k, in index order.
    template <class F>
    void visit(const level_shape& shape, const cost_constants& k, F&& f) const {
        f(0, recursive_doubling_);
        f(1, ring_);  // before rabenseifner: on a tie (p = 2) the wavefront ring overlaps its two phases
        f(2, rabenseifner_);
        f(3, binary_tree_);
        f(4, double_binary_tree_);
        f(5, parameter_server_);
        if (shape.two_level()) {
            if (leaders_halve(shape))
                f(hierarchical_candidate, hierarchical_halving_);
            else
                f(hierarchical_candidate, hierarchical_);
        }
        if (k.has_native()) f(native_candidate_index, native_model{});
    }

    /// The candidates timed at the probes on a communicator of type C with this shape.
    template <class C>
    [[nodiscard]] static std::vector<int> timed(const level_shape& shape) {
        std::vector<int> out{0, 1, 2, 3, 4, 5};
        if (shape.two_level()) out.push_back(hierarchical_candidate);
        if constexpr (has_native_allreduce<C>::value) out.push_back(native_candidate_index);
        return out;
    }

    template <communicator C, floating_element T>
    void run(int pick, transport<C>& t, std::span<T> data, reduce_op op) const {
        switch (pick) {
            case 0:
                return recursive_doubling_.run(t, data, op);
            case 1:
                return ring_.run(t, data, op);
            case 2:
                return rabenseifner_.run(t, data, op);
            case 3:
                return binary_tree_.run(t, data, op);
            case 4:
                return double_binary_tree_.run(t, data, op);
            case 5:
                return parameter_server_.run(t, data, op);
            case hierarchical_candidate:
                if (leaders_halve(levels_of(t.state(), &t.comm(), t.size())->shape))
                    return hierarchical_halving_.run(t, data, op);
                return hierarchical_.run(t, data, op);
            default:
                break;
        }
        if constexpr (has_native_allreduce<C>::value) {
            return typename native_for<C>::type{}.run(t, data, op);
        }
        throw config_error("hitch::allreduce::automatic: the model picked native, which this communicator lacks");
    }

    [[nodiscard]] const recursive_doubling& small_schedule() const noexcept { return recursive_doubling_; }

private:
    /// The native all-reduce as measured: its fit stands on any layout.
    struct native_model {
        [[nodiscard]] cost_estimate cost(int p, std::size_t n, const cost_constants& k) const {
            return native_cost(p, n, k);
        }
        [[nodiscard]] cost_estimate cost(const level_shape& shape, std::size_t n, const cost_constants& k) const {
            return native_cost(shape.ranks, n, k);
        }
    };

    ring ring_{};
    recursive_doubling recursive_doubling_{};
    rabenseifner rabenseifner_{};
    binary_tree binary_tree_{};
    double_binary_tree double_binary_tree_{};
    parameter_server parameter_server_{parameter_server::options_type{.servers = 1 << 20}};
    automatic_hierarchical hierarchical_{};
    automatic_hierarchical_halving hierarchical_halving_{};
};

}  // namespace detail
}  // namespace hitch::allreduce
