#pragma once
// The network and the faults of comm::simulated, as data. A simulated_network names a topology and the alpha-beta
// constants of its links; simulated_links builds the directed links of one world from it, routes each message and
// reserves the links it crosses, so messages that share a link serialize on it (contention). simulated_faults lists
// what goes wrong: ranks that die, slow ranks, degraded links, dropped and corrupted messages.
//
// Time is kept in integer picoseconds so sums over many messages are exact: an alpha-beta formula with whole
// picoseconds per byte is reproduced to the last digit.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "hitch/core/error.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/core/options.hpp"

namespace hitch::comm {

/// Virtual time in picoseconds.
using vtime = std::int64_t;
inline constexpr vtime vtime_never = std::numeric_limits<vtime>::max() / 4;

[[nodiscard]] inline vtime to_vtime(double seconds) {
    const double ps = std::round(seconds * 1e12);
    return ps >= static_cast<double>(vtime_never) ? vtime_never : static_cast<vtime>(ps);
}
[[nodiscard]] inline double to_seconds(vtime t) noexcept { return static_cast<double>(t) * 1e-12; }

/// One direction of a link: latency (alpha) and bandwidth (1/beta). Full duplex: the other direction is its own link.
struct link_model {
    double latency_s = 5e-6;
    double bandwidth_bytes_per_s = 12.5e9;  // 100 Gbit/s

    void validate(const option_validator& check, const std::string& field) const {
        check.closed(field + ".latency_s", latency_s, 0.0, 1.0)
            .closed(field + ".bandwidth_bytes_per_s", bandwidth_bytes_per_s, 1e3, 1e15);
    }
    friend bool operator==(const link_model&, const link_model&) = default;
};

/// The cluster comm::simulated runs on.
struct simulated_network {
    enum class topology : std::uint8_t {
        /// Every rank has a port (nic) on one switch; a message costs nic.latency_s + bytes / nic.bandwidth.
        single_switch,
        /// Leaves of ranks_per_leaf ranks (each on its own nic port); each leaf's uplink to the spine carries
        /// ranks_per_leaf * nic bandwidth / oversubscription and adds spine_latency_s.
        fat_tree,
        /// Machines of ranks_per_node ranks joined by a fast fabric (intra: each rank's port on it); each machine
        /// has one nic on a single switch, shared by its ranks for traffic that leaves the machine.
        nodes,
    };

    /// How a message crosses the links of its route.
    enum class switching : std::uint8_t {
        /// The message holds every link of its route at once, from when all are free (a circuit): a link may idle
        /// while the message waits for another. Pessimistic where flows converge (a tree's two children on their
        /// parent's port).
        circuit,
        /// Each switch buffers (cut-through, unbounded buffers): the message crosses each link as soon as that link
        /// is free and the hop before has begun, finishing no earlier than the hop before. Flows converging on a
        /// port queue there and nowhere else.
        buffered,
    };

    topology shape = topology::single_switch;
    switching mode = switching::circuit;
    link_model nic{};
    int ranks_per_leaf = 16;
    double oversubscription = 1.0;
    double spine_latency_s = 1e-6;
    int ranks_per_node = 8;
    link_model intra{1e-6, 150e9};

    [[nodiscard]] static simulated_network single_switch(link_model nic) {
        simulated_network n;
        n.nic = nic;
        return n;
    }
    [[nodiscard]] static simulated_network fat_tree(link_model nic, int ranks_per_leaf, double oversubscription,
                                                    double spine_latency_s = 1e-6) {
        simulated_network n;
        n.shape = topology::fat_tree;
        n.nic = nic;
        n.ranks_per_leaf = ranks_per_leaf;
        n.oversubscription = oversubscription;
        n.spine_latency_s = spine_latency_s;
        return n;
    }
    [[nodiscard]] static simulated_network nodes(int ranks_per_node, link_model intra, link_model nic) {
        simulated_network n;
        n.shape = topology::nodes;
        n.ranks_per_node = ranks_per_node;
        n.intra = intra;
        n.nic = nic;
        return n;
    }

    void validate() const {
        const option_validator check("hitch::comm::simulated_network");
        nic.validate(check, "nic");
        if (shape == topology::fat_tree)
            check.closed("ranks_per_leaf", ranks_per_leaf, 1, 1 << 16)
                .closed("oversubscription", oversubscription, 1.0, 1024.0)
                .closed("spine_latency_s", spine_latency_s, 0.0, 1.0);
        if (shape == topology::nodes) {
            check.closed("ranks_per_node", ranks_per_node, 1, 1 << 16);
            intra.validate(check, "intra");
        }
    }

    /// The machine each rank runs on: its own, except ranks_per_node ranks share one in `nodes`.
    [[nodiscard]] int machine_of(int rank) const noexcept {
        return shape == topology::nodes ? rank / ranks_per_node : rank;
    }
};

/// What goes wrong during a simulated run. Ranks are world ranks; times are virtual seconds.
struct simulated_faults {
    /// The rank stops at virtual time at_s: its next call at or past that time throws rank_died_error; what it
    /// sent before still arrives, what is sent to it afterwards is never received.
    struct rank_death {
        int rank = 0;
        double at_s = 0.0;
    };
    /// compute() on the rank takes `factor` times as long.
    struct slow_rank {
        int rank = 0;
        double factor = 2.0;
    };
    /// Every link of the rank's port (both directions; in `nodes` its node's nic too) has its bandwidth divided by
    /// `factor` and `extra_latency_s` added.
    struct degraded_link {
        int rank = 0;
        double factor = 2.0;
        double extra_latency_s = 0.0;
    };
    /// The nth message (from 0, counting every message of any tag) from `from` to `to` is lost: its send completes,
    /// nothing arrives. nth = -1: every message (a cut link).
    struct lost_message {
        int from = 0;
        int to = 1;
        int nth = 0;
    };
    /// The nth message from `from` to `to` (-1: every one) arrives with byte (byte mod its size) changed.
    struct corrupted_message {
        int from = 0;
        int to = 1;
        int nth = 0;
        std::size_t byte = 0;
    };

    /// After each compute() on the rank (-1: every rank), with probability `probability`, a stall drawn from a
    /// Pareto distribution of scale scale_s and shape `shape` (heavy-tailed: for shape <= 2 its variance is
    /// infinite, rare stalls are long, as from OS jitter or a shared host). Drawn from seed, rank and call number,
    /// so a run repeats exactly.
    struct delay {
        int rank = -1;
        double probability = 0.01;
        double scale_s = 1e-3;
        double shape = 1.5;
        std::uint64_t seed = 1;
    };

    std::vector<rank_death> deaths;
    std::vector<slow_rank> slow;
    std::vector<delay> delays;
    std::vector<degraded_link> degraded;
    std::vector<lost_message> lost;
    std::vector<corrupted_message> corrupted;

    void validate(int ranks) const {
        const option_validator check("hitch::comm::simulated_faults");
        for (const auto& d : deaths)
            check.half_open("deaths.rank", d.rank, 0, ranks).closed("deaths.at_s", d.at_s, 0.0, 1e9);
        for (const auto& s : slow)
            check.half_open("slow.rank", s.rank, 0, ranks).closed("slow.factor", s.factor, 1e-6, 1e6);
        for (const auto& d : delays)
            check.half_open("delays.rank", d.rank, -1, ranks)
                .closed("delays.probability", d.probability, 0.0, 1.0)
                .open_closed("delays.scale_s", d.scale_s, 0.0, 1e3)
                .closed("delays.shape", d.shape, 0.1, 100.0);
        for (const auto& d : degraded)
            check.half_open("degraded.rank", d.rank, 0, ranks)
                .closed("degraded.factor", d.factor, 1e-6, 1e6)
                .closed("degraded.extra_latency_s", d.extra_latency_s, 0.0, 1.0);
        for (const auto& l : lost)
            check.half_open("lost.from", l.from, 0, ranks)
                .half_open("lost.to", l.to, 0, ranks)
                .at_least("lost.nth", l.nth, -1);
        for (const auto& c : corrupted)
            check.half_open("corrupted.from", c.from, 0, ranks)
                .half_open("corrupted.to", c.to, 0, ranks)
                .at_least("corrupted.nth", c.nth, -1);
    }
};

namespace detail {

/// splitmix64's finalizer: a well-mixed 64-bit hash, for the seeded draws of simulated_faults::delays.
[[nodiscard]] constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
/// A uniform draw in [0, 1) from (seed, rank, call, which).
[[nodiscard]] inline double uniform_draw(std::uint64_t seed, int rank, std::uint64_t call, int which) noexcept {
    const std::uint64_t h = mix64(seed ^ mix64(static_cast<std::uint64_t>(rank) ^ mix64(call * 2 + which)));
    return static_cast<double>(h >> 11) * 0x1.0p-53;
}

/// One direction of one link during a run.
struct simulated_link {
    std::string name;
    vtime latency = 0;
    double ps_per_byte = 0;
    vtime free_at = 0;
    vtime busy = 0;
    std::uint64_t bytes = 0;
    std::uint64_t messages = 0;
};

/// When a message leaves and arrives.
struct transfer_times {
    vtime sent = 0;     // the last byte has left the sender (its send completes)
    vtime arrival = 0;  // the last byte has reached the receiver
};

/// The links of one world and the route of every message.
class simulated_links {
public:
    simulated_links(const simulated_network& net, int ranks, const simulated_faults& faults)
        : net_(net), ranks_(ranks) {
        const auto add = [&](std::string name, const link_model& m, bool carries_latency) {
            simulated_link l;
            l.name = std::move(name);
            l.latency = carries_latency ? to_vtime(m.latency_s) : 0;
            l.ps_per_byte = 1e12 / m.bandwidth_bytes_per_s;
            links_.push_back(std::move(l));
            return static_cast<int>(links_.size()) - 1;
        };
        const bool nodes = net.shape == simulated_network::topology::nodes;
        const link_model port = nodes ? net.intra : net.nic;
        for (int r = 0; r < ranks; ++r) add(hitch::detail::concat("rank ", r, " up"), port, true);
        for (int r = 0; r < ranks; ++r) add(hitch::detail::concat("rank ", r, " down"), port, false);
        if (net.shape == simulated_network::topology::fat_tree) {
            link_model leaf{net.spine_latency_s,
                            net.nic.bandwidth_bytes_per_s * net.ranks_per_leaf / net.oversubscription};
            groups_ = (ranks + net.ranks_per_leaf - 1) / net.ranks_per_leaf;
            for (int g = 0; g < groups_; ++g) add(hitch::detail::concat("leaf ", g, " up"), leaf, true);
            for (int g = 0; g < groups_; ++g) add(hitch::detail::concat("leaf ", g, " down"), leaf, false);
        } else if (nodes) {
            groups_ = (ranks + net.ranks_per_node - 1) / net.ranks_per_node;
            for (int g = 0; g < groups_; ++g) add(hitch::detail::concat("node ", g, " nic up"), net.nic, true);
            for (int g = 0; g < groups_; ++g) add(hitch::detail::concat("node ", g, " nic down"), net.nic, false);
        }
        for (const auto& d : faults.degraded) {
            const auto degrade = [&](int i) {
                links_[static_cast<std::size_t>(i)].ps_per_byte *= d.factor;
                links_[static_cast<std::size_t>(i)].latency += to_vtime(d.extra_latency_s);
            };
            degrade(d.rank);
            degrade(ranks + d.rank);
            if (nodes) {
                degrade(2 * ranks + d.rank / net.ranks_per_node);
                degrade(2 * ranks + groups_ + d.rank / net.ranks_per_node);
            }
        }
    }

    /// Reserves the route from `from` to `to` for `bytes` sent at `at`: the message starts once every link on the
    /// route is free, holds each link for its bytes at that link's rate, and arrives after the route's latency and
    /// its bytes at the slowest link's rate.
    transfer_times reserve(int from, int to, std::size_t bytes, vtime at) {
        if (from == to) return {at, at};
        std::array<int, 4> route{};
        const int hops = route_of(from, to, route);
        if (net_.mode == simulated_network::switching::buffered) return reserve_buffered(route, hops, bytes, at);
        vtime start = at, latency = 0;
        double slowest = 0;
        for (int h = 0; h < hops; ++h) {
            const simulated_link& l = links_[static_cast<std::size_t>(route[static_cast<std::size_t>(h)])];
            start = std::max(start, l.free_at);
            latency += l.latency;
            slowest = std::max(slowest, l.ps_per_byte);
        }
        const double n = static_cast<double>(bytes);
        for (int h = 0; h < hops; ++h) {
            simulated_link& l = links_[static_cast<std::size_t>(route[static_cast<std::size_t>(h)])];
            const auto hold = static_cast<vtime>(std::llround(n * l.ps_per_byte));
            l.free_at = start + hold;
            l.busy += hold;
            l.bytes += bytes;
            ++l.messages;
        }
        const auto transfer = static_cast<vtime>(std::llround(n * slowest));
        return {start + transfer, start + latency + transfer};
    }

    [[nodiscard]] const std::vector<simulated_link>& links() const noexcept { return links_; }

    /// node_layout of the world ranks `members` (in group order), nodes numbered by their lowest member.
    [[nodiscard]] node_layout layout_of(const std::vector<int>& members) const {
        node_layout out;
        std::vector<int> machines;
        for (int w : members) {
            const int m = net_.machine_of(w);
            auto it = std::find(machines.begin(), machines.end(), m);
            if (it == machines.end()) {
                machines.push_back(m);
                out.node_of_rank.push_back(static_cast<int>(machines.size()) - 1);
            } else {
                out.node_of_rank.push_back(static_cast<int>(it - machines.begin()));
            }
        }
        out.nodes = static_cast<int>(machines.size());
        return out;
    }

private:
    /// simulated_network::switching::buffered: hop by hop. On an idle route the same times as a circuit.
    transfer_times reserve_buffered(const std::array<int, 4>& route, int hops, std::size_t bytes, vtime at) {
        const double n = static_cast<double>(bytes);
        vtime begin = at, end = at, latency = 0, sent = at;
        for (int h = 0; h < hops; ++h) {
            simulated_link& l = links_[static_cast<std::size_t>(route[static_cast<std::size_t>(h)])];
            const auto hold = static_cast<vtime>(std::llround(n * l.ps_per_byte));
            begin = std::max(begin, l.free_at);
            end = std::max(begin + hold, end);
            l.free_at = end;
            l.busy += hold;
            l.bytes += bytes;
            ++l.messages;
            latency += l.latency;
            if (h == 0) sent = end;
        }
        return {sent, end + latency};
    }

    int route_of(int from, int to, std::array<int, 4>& route) const {
        const int up = 0, down = ranks_, group_up = 2 * ranks_, group_down = 2 * ranks_ + groups_;
        switch (net_.shape) {
            case simulated_network::topology::single_switch:
                route = {up + from, down + to, 0, 0};
                return 2;
            case simulated_network::topology::fat_tree: {
                const int a = from / net_.ranks_per_leaf, b = to / net_.ranks_per_leaf;
                if (a == b) {
                    route = {up + from, down + to, 0, 0};
                    return 2;
                }
                route = {up + from, group_up + a, group_down + b, down + to};
                return 4;
            }
            case simulated_network::topology::nodes: {
                const int a = from / net_.ranks_per_node, b = to / net_.ranks_per_node;
                if (a == b) {
                    route = {up + from, down + to, 0, 0};
                    return 2;
                }
                route = {group_up + a, group_down + b, 0, 0};
                return 2;
            }
        }
        return 0;
    }

    simulated_network net_;
    int ranks_;
    int groups_ = 0;
    std::vector<simulated_link> links_;
};

}  // namespace detail
}  // namespace hitch::comm
