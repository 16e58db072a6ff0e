#pragma once
// hitch::allreduce::parameter_server: the centralised scheme of DistBelief and the parameter-server family (Dean
// et al. 2012; Li et al. 2014). The buffer is cut into one shard per server; every rank pushes each shard to its
// server, the server combines all p contributions (in rank order, accumulated in float for 16-bit types and
// rounded once) and every rank pulls the finished shards back. Servers are spread evenly over the ranks (server k
// is rank floor(k p / s)) and are workers too. On the direct path (ranks sharing an address space) the server
// stores each finished segment straight into the workers' buffers where their pushes came from (write_back), so
// no pull follows: every rank then reads its p inputs and writes its p outputs once, the least an all-reduce in
// shared memory can move.
//
//   T(p, n) = 2 (p-1) S a + 2 (p-1) n/s b + (p-1) n/s g     (s servers; S segments per shard)
//
// With one server its link carries 2(p-1) n bytes: the bottleneck that all-reduce schedules remove; with s = p it
// moves what ring does in two all-to-all rounds. Kept for comparison and for the asynchronous policies that need
// servers.

#include <algorithm>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/partition.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/core/options.hpp"

namespace hitch::allreduce {

class parameter_server {
public:
    struct options_type {
        /// Number of server shards (capped at the world size).
        int servers = 1;
        /// Bytes per pipelined segment of a shard.
        std::size_t segment_bytes = std::size_t{1} << 20;
        /// Segments of each worker's shard in flight at a server.
        int pipeline_depth = 2;

        void validate() const {
            option_validator("hitch::allreduce::parameter_server")
                .closed("servers", servers, 1, 1 << 20)
                .closed("segment_bytes", segment_bytes, std::size_t{64}, std::size_t{1} << 30)
                .closed("pipeline_depth", pipeline_depth, 1, 64);
        }

        friend bool operator==(const options_type&, const options_type&) = default;
    };

    static constexpr std::string_view name = "parameter_server";
    static constexpr int push_channel = 0;
    static constexpr int pull_channel = 1;

    parameter_server() = default;
    explicit parameter_server(const options_type& o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    /// The rank that serves shard k of s.
    [[nodiscard]] static constexpr int server_rank(int k, int s, int p) noexcept {
        return static_cast<int>((static_cast<long long>(k) * p) / s);
    }

    [[nodiscard]] cost_estimate cost(int p, std::size_t n_bytes, const cost_constants& = {}) const {
        cost_estimate c;
        if (p <= 1 || n_bytes == 0) return c;
        const int s = std::min(options_.servers, p);
        const double seg = static_cast<double>(options_.segment_bytes);
        const double n = static_cast<double>(n_bytes);
        const double shard = n / s;
        const double S = detail::segments(static_cast<double>(partition(n_bytes, s, 0).count), seg);
        c.latency_terms = 2.0 * (p - 1) * S;
        c.bandwidth_bytes = 2.0 * (p - 1) * shard;
        c.reduced_bytes = (p - 1) * shard;
        for (int r = 0; r < p; ++r) {
            double m = 0, b = 0;
            for (int k = 0; k < s; ++k) {
                const block sh = partition(n_bytes, s, k);
                const double segs = detail::segments(static_cast<double>(sh.count), seg);
                if (server_rank(k, s, p) == r) {
                    m += (p - 1) * segs;
                    b += (p - 1) * static_cast<double>(sh.count);
                } else {
                    m += segs;
                    b += static_cast<double>(sh.count);
                }
            }
            c.sent_messages = std::max(c.sent_messages, m);
            c.sent_bytes = std::max(c.sent_bytes, b);
        }
        return c;
    }

    template <communicator C, floating_element T>
    void run(transport<C>& t, std::span<T> data, reduce_op op) const {
        using incoming = typename transport<C>::template incoming<T>;
        using outgoing = typename transport<C>::outgoing;
        const int p = t.size(), me = t.rank();
        if (p <= 1) return;
        const int s = std::min(options_.servers, p);
        const std::size_t n = data.size();
        const std::size_t seg = std::max<std::size_t>(1, options_.segment_bytes / sizeof(T));
        const auto segments_in = [&](const block& b) { return transport<C>::segments(b.count, seg); };
        const auto piece = [&](const block& b, std::size_t j) {
            return data.subspan(b.offset + j * seg, std::min(seg, b.count - j * seg));
        };

        // Workers: push every shard served elsewhere.
        std::vector<outgoing> pushes;
        std::vector<outgoing> sends;
        for (int k = 0; k < s; ++k) {
            const int server = server_rank(k, s, p);
            if (server == me) continue;
            const block sh = partition(n, s, k);
            for (std::size_t j = 0; j < segments_in(sh); ++j)
                pushes.push_back(t.template send_writable<T>(server, push_channel, piece(sh, j)));
        }

        // Servers: combine each segment of their shard from every rank in rank order, then return it to all.
        for (int k = 0; k < s; ++k) {
            if (server_rank(k, s, p) != me) continue;
            const block sh = partition(n, s, k);
            const std::size_t count = segments_in(sh);
            const std::size_t depth = static_cast<std::size_t>(options_.pipeline_depth);
            const std::size_t width = std::min(seg, sh.count);
            std::span<T> space;
            if (!t.direct() && count > 0)
                space = t.template scratch<T>(depth * static_cast<std::size_t>(p - 1) * width);
            std::vector<std::vector<incoming>> window(depth);
            for (auto& row : window) row.resize(static_cast<std::size_t>(p));
            const auto post = [&](std::size_t j) {
                auto& slot_row = window[j % depth];
                for (int q = 0; q < p; ++q) {
                    if (q == me) continue;
                    const std::size_t idx = static_cast<std::size_t>(q < me ? q : q - 1);
                    const std::size_t len = piece(sh, j).size();
                    const std::span<T> slot =
                        t.direct() ? std::span<T>()
                                   : space.subspan(((j % depth) * static_cast<std::size_t>(p - 1) + idx) * width, len);
                    slot_row[static_cast<std::size_t>(q)] = t.template receive<T>(q, push_channel, len, slot);
                }
            };
            for (std::size_t j = 0; j < std::min(depth, count); ++j) post(j);
            std::vector<const T*> sources(static_cast<std::size_t>(p));
            for (std::size_t j = 0; j < count; ++j) {
                auto& row = window[j % depth];
                const std::span<T> mine = piece(sh, j);
                for (int q = 0; q < p; ++q) {
                    if (q == me) {
                        sources[static_cast<std::size_t>(q)] = mine.data();
                        continue;
                    }
                    row[static_cast<std::size_t>(q)].wait(t.limit());
                    sources[static_cast<std::size_t>(q)] = row[static_cast<std::size_t>(q)].data();
                }
                combine_many(mine.data(), sources.data(), static_cast<std::size_t>(p), mine.size(), op, p);
                detail::charge_combine(t.comm(), static_cast<std::size_t>(p - 1) * mine.size_bytes());
                for (int q = 0; q < p; ++q) {
                    if (q == me) continue;
                    auto& in = row[static_cast<std::size_t>(q)];
                    if (t.direct()) in.write_back(mine.data());  // straight into the worker's buffer: no pull
                    in.release();
                }
                if (j + depth < count) post(j + depth);
                if (!t.direct())
                    for (int q = 0; q < p; ++q)
                        if (q != me) sends.push_back(t.template send<T>(q, pull_channel, std::span<const T>(mine)));
            }
        }
        // Workers: a segment's result is received into it only once its push has left (MPI forbids a receive into
        // a buffer a pending send still reads).
        std::vector<incoming> pulls;
        std::size_t pushed = 0;
        for (int k = 0; k < s; ++k) {
            const int server = server_rank(k, s, p);
            if (server == me) continue;
            const block sh = partition(n, s, k);
            for (std::size_t j = 0; j < segments_in(sh); ++j) {
                pushes[pushed++].wait(t.limit());  // direct path: the server has written the result back by now
                if (!t.direct()) pulls.push_back(t.template receive_into<T>(server, pull_channel, piece(sh, j)));
            }
        }
        for (auto& r : pulls) r.wait(t.limit());
        for (auto& o : sends) o.wait(t.limit());
    }

private:
    options_type options_{};
};

static_assert(schedule_for<parameter_server, comm::local>,
              "hitch::allreduce::parameter_server must model hitch::allreduce_schedule on comm::local");

}  // namespace hitch::allreduce
