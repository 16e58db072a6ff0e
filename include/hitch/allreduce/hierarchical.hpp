#pragma once
// hitch::allreduce::hierarchical<Intra, Inter>: ranks form groups of consecutive ranks (typically the ranks of one
// node). Each group reduces to its leader with Intra, the leaders all-reduce among themselves with Inter, and
// each leader broadcasts the result back to its group with Intra (the two-level scheme of hierarchical all-reduce
// in Horovod and of Jia et al. 2018). Only one rank per group crosses the slow level, with the whole buffer once.
// The sub-communicators come from split() on the first call and are kept for later calls.
//
//   T(p, n) = T_Intra(g, n) + T_Inter(p / g, n)     (g ranks per group; T_Intra counts its reduce and broadcast)
//
// An average is summed across both levels and divided once by p at the leaders (for 16-bit types that is a
// second rounding after the sum).

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "hitch/allreduce/binary_tree.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/ring.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/core/options.hpp"

namespace hitch::allreduce {

template <class Intra = binary_tree, class Inter = ring>
class hierarchical {
public:
    struct options_type {
        /// Consecutive ranks per group (the last group may be smaller); >= the world size means a single group.
        int ranks_per_group = 2;
        typename Intra::options_type intra{};
        typename Inter::options_type inter{};

        void validate() const {
            option_validator("hitch::allreduce::hierarchical").closed("ranks_per_group", ranks_per_group, 1, 1 << 20);
            intra.validate();
            inter.validate();
        }
    };

    static constexpr std::string_view name = "hierarchical";

    hierarchical() = default;
    explicit hierarchical(const options_type& o) : options_(o), intra_(o.intra), inter_(o.inter) {
        options_.validate();
    }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] cost_estimate cost(int p, std::size_t n_bytes, const cost_constants& k = {}) const {
        const int g = std::min(std::max(options_.ranks_per_group, 1), std::max(p, 1));
        const int leaders = (p + g - 1) / g;
        const cost_estimate a = intra_.cost(g, n_bytes, k);
        const cost_estimate b = inter_.cost(leaders, n_bytes, k);
        cost_estimate c;
        c.latency_terms = a.latency_terms + b.latency_terms;
        c.bandwidth_bytes = a.bandwidth_bytes + b.bandwidth_bytes;
        c.reduced_bytes = a.reduced_bytes + b.reduced_bytes;
        c.sent_messages = a.sent_messages + b.sent_messages;
        c.sent_bytes = a.sent_bytes + b.sent_bytes;
        return c;
    }

    template <communicator C, floating_element T>
    void run(transport<C>& t, std::span<T> data, reduce_op op) const {
        static_assert(rooted_schedule_for<Intra, C>,
                      "hitch::allreduce::hierarchical<Intra, Inter>: Intra must offer reduce() and broadcast() "
                      "(binary_tree and ring do)");
        static_assert(schedule_for<Inter, C>,
                      "hitch::allreduce::hierarchical<Intra, Inter>: Inter must model hitch::allreduce_schedule");
        const int p = t.size();
        if (p <= 1) return;
        const int g = std::min(options_.ranks_per_group, p);
        const std::string key = detail::concat("hierarchical/", g);
        auto levels = t.state().slots.get_or_make(slot_key<state<C>>{key},
                                                  [&] { return std::make_shared<state<C>>(t.comm(), g); });
        const reduce_op level_op = op == reduce_op::average ? reduce_op::sum : op;
        transport<C> intra(levels->intra, t.sequence(), t.limit(), t.shared_memory(), levels->intra_state);
        intra_.reduce(intra, std::span<const T>(data), data, level_op, 0);
        if (levels->intra.rank() == 0) {
            transport<C> inter(levels->leaders, t.sequence(), t.limit(), t.shared_memory(), levels->leaders_state);
            inter_.run(inter, data, level_op);
            if (op == reduce_op::average) divide(data.data(), data.size(), p);
        }
        intra_.broadcast(intra, data, 0);
    }

private:
    /// The two sub-communicators and their shared state.
    template <class C>
    struct state {
        state(C& comm, int g)
            : intra(comm.split(comm.rank() / g, comm.rank())),
              leaders(comm.split(comm.rank() % g == 0 ? 0 : 1, comm.rank())) {
            attach_pipes(intra, intra_state);
            attach_pipes(leaders, leaders_state);
        }
        C intra;
        C leaders;  // for non-leaders: the other ranks' communicator, unused
        shared_state<C> intra_state;
        shared_state<C> leaders_state;
    };

    options_type options_{};
    Intra intra_{};
    Inter inter_{};
};

static_assert(schedule_for<hierarchical<>, comm::local>,
              "hitch::allreduce::hierarchical must model hitch::allreduce_schedule on comm::local");

}  // namespace hitch::allreduce
