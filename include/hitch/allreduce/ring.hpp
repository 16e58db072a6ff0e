#pragma once
// hitch::allreduce::ring: reduce-scatter then all-gather around a ring (Patarasuk & Yuan 2009, "Bandwidth optimal
// all-reduce algorithms for clusters of workstations"; popularised for deep learning by Baidu's ring all-reduce).
//
// The buffer is cut into p chunks (hitch/allreduce/partition.hpp). In reduce-scatter step s (0 <= s < p-1) rank r
// sends chunk (r-s-1) mod p to rank r+1 and combines chunk (r-s-2) mod p, received from rank r-1, into its own;
// after p-1 steps rank r holds the complete chunk r. The all-gather then passes complete chunks on for p-1 more
// steps. Each chunk is cut into segments that stream back to back with several receives in flight, so a large
// buffer moves as a pipeline rather than as p giant messages. Every chunk is combined by exactly one rank and the
// all-gather copies its bytes, so every rank ends with identical bits.
//
//   T(p, n) = 2(p-1) S a + 2 (p-1)/p n b + (p-1)/p n g     (S = segments per chunk; S = 1 for small buffers)
//
// Bandwidth-optimal for any p; the latency term grows linearly with p, so recursive doubling or Rabenseifner win
// on small buffers and many ranks. Also provides reduce_scatter, allgather (equal or variable blocks), and a
// pipelined chain reduce and broadcast (for hierarchical's Intra).

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

class ring {
public:
    struct options_type {
        /// Bytes per pipelined message; a chunk larger than this streams as several.
        std::size_t segment_bytes = std::size_t{1} << 20;
        /// Receives kept in flight per step (each needs one segment of scratch on the message path).
        int pipeline_depth = 4;
        /// Run the steps as one wavefront (a segment moves on to the next step as soon as it is ready); false runs
        /// them one after the other.
        bool wavefront = true;

        void validate() const {
            option_validator("hitch::allreduce::ring")
                .closed("segment_bytes", segment_bytes, std::size_t{64}, std::size_t{1} << 30)
                .closed("pipeline_depth", pipeline_depth, 1, 64);
        }

        friend bool operator==(const options_type&, const options_type&) = default;
    };

    static constexpr std::string_view name = "ring";
    static constexpr int reduce_scatter_channel = 0;
    static constexpr int allgather_channel = 1;
    static constexpr int chain_channel = 2;

    ring() = default;
    explicit ring(const options_type& o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] cost_estimate cost(int p, std::size_t n_bytes, const cost_constants& = {}) const {
        cost_estimate c;
        if (p <= 1 || n_bytes == 0) return c;
        const double seg = static_cast<double>(options_.segment_bytes);
        // Rank r sends every chunk but r in the reduce-scatter and every chunk but r+1 in the all-gather; chunks
        // differ by at most one byte, so the busiest rank is found in O(p).
        double all_messages = 0, all_bytes = 0;
        std::vector<double> chunk_messages(static_cast<std::size_t>(p)), chunk_bytes(static_cast<std::size_t>(p));
        for (int i = 0; i < p; ++i) {
            const block b = partition(n_bytes, p, i);
            chunk_bytes[static_cast<std::size_t>(i)] = static_cast<double>(b.count);
            chunk_messages[static_cast<std::size_t>(i)] = detail::segments(static_cast<double>(b.count), seg);
            all_messages += chunk_messages[static_cast<std::size_t>(i)];
            all_bytes += chunk_bytes[static_cast<std::size_t>(i)];
        }
        double messages = 0, sent = 0;
        for (int r = 0; r < p; ++r) {
            const auto a = static_cast<std::size_t>(r), b = static_cast<std::size_t>((r + 1) % p);
            messages = std::max(messages, 2 * all_messages - chunk_messages[a] - chunk_messages[b]);
            sent = std::max(sent, 2 * all_bytes - chunk_bytes[a] - chunk_bytes[b]);
        }
        const double n = static_cast<double>(n_bytes);
        c.latency_terms = messages;
        c.bandwidth_bytes = 2.0 * (p - 1) * n / p;
        c.reduced_bytes = (p - 1) * n / p;
        c.sent_messages = messages;
        c.sent_bytes = sent;
        return c;
    }
    /// The same on ranks of several nodes (cost_on; allreduce/cost.hpp): on nodes of contiguous ranks a chunk
    /// crosses between nodes on `nodes` of every p hops, and the ring has no rounds that wait for each other (a
    /// rank goes on when its own segment arrives), so its latency is the hops' mean, (p - nodes) alpha + nodes
    /// alpha' per p; one rank per node sends across at a time, so the bytes go at the between-node beta. On
    /// other layouts every hop counts across, g ranks of a node sharing its nic (an upper bound).
    [[nodiscard]] cost_estimate cost(const level_shape& shape, std::size_t n_bytes, const cost_constants& k) const {
        cost_estimate c = cost(shape.ranks, n_bytes, k);
        if (shape.nodes <= 1 || c.latency_terms == 0) return c;
        if (!shape.contiguous) return across_nodes(c, shape.largest_node);
        const double crossing = static_cast<double>(shape.nodes) / shape.ranks;
        c.inter_latency_terms = c.latency_terms * crossing;
        c.latency_terms -= c.inter_latency_terms;
        c.inter_bandwidth_bytes = c.bandwidth_bytes;
        c.bandwidth_bytes = 0;
        return c;
    }

    template <communicator C, floating_element T>
    void run(transport<C>& t, std::span<T> data, reduce_op op) const {
        if (t.size() <= 1) return;
        const std::vector<block> blocks = even_blocks(data.size(), t.size());
        pipeline<C, T>(t, data, op, std::span<const block>(blocks), true, true);
    }

    /// The even partition of n elements over p ranks.
    [[nodiscard]] static std::vector<block> even_blocks(std::size_t n, int p) {
        std::vector<block> blocks(static_cast<std::size_t>(p));
        for (int i = 0; i < p; ++i) blocks[static_cast<std::size_t>(i)] = partition(n, p, i);
        return blocks;
    }

    /// Afterwards rank r's block `blocks[r]` holds the combined values (divided by p for an average); the other
    /// blocks hold partial sums.
    template <communicator C, floating_element T>
    void reduce_scatter(transport<C>& t, std::span<T> data, reduce_op op, std::span<const block> blocks) const {
        if (t.size() <= 1) return;
        pipeline<C, T>(t, data, op, blocks, true, false);
    }

    /// Rank r's block `blocks[r]` is complete on entry; afterwards every block is, on every rank.
    template <communicator C, element_type T>
    void allgather(transport<C>& t, std::span<T> data, std::span<const block> blocks) const {
        if (t.size() <= 1) return;
        pipeline<C, T>(t, data, reduce_op::sum, blocks, false, true);
    }

    /// Pipelined chain reduce: ranks root+p-1 -> ... -> root+1 -> root, each combining its input into what passes.
    /// `output` (may alias `input`) receives the result on root and is workspace elsewhere (scratch when empty).
    template <communicator C, floating_element T>
    void reduce(transport<C>& t, std::span<const T> input, std::span<T> output, reduce_op op, int root) const {
        const int p = t.size();
        const int v = (t.rank() - root + p) % p;  // position along the chain, root at 0
        const std::size_t n = input.size();
        if (p <= 1) {
            if (output.data() != input.data() && output.size() == n)
                std::copy(input.begin(), input.end(), output.begin());
            return;
        }
        const int upstream = v + 1 < p ? (root + v + 1) % p : -1;
        const int downstream = v > 0 ? (root + v - 1) % p : -1;
        std::span<T> acc = output;
        if (upstream >= 0 && v > 0 && acc.size() != n) acc = t.template scratch<T>(n);
        const std::size_t seg = segment_elements<T>();
        const std::size_t count = transport<C>::segments(n, seg);
        const int depth = options_.pipeline_depth;
        const auto range = [&](std::size_t j) { return block{j * seg, std::min(seg, n - j * seg)}; };
        std::span<T> slots;
        if (upstream >= 0 && !t.direct() && count > 0)
            slots = t.template scratch<T>(static_cast<std::size_t>(depth) * std::min(seg, n));
        std::vector<typename transport<C>::template incoming<T>> window(static_cast<std::size_t>(depth));
        const auto post = [&](std::size_t j) {
            const block b = range(j);
            const std::size_t w = std::min(seg, n);
            window[j % window.size()] =
                t.template receive<T>(upstream, chain_channel, b.count,
                                      t.direct() ? std::span<T>() : slots.subspan((j % window.size()) * w, b.count));
        };
        if (upstream >= 0)
            for (std::size_t j = 0; j < std::min<std::size_t>(count, window.size()); ++j) post(j);
        std::vector<typename transport<C>::outgoing> sends;
        sends.reserve(count);
        for (std::size_t j = 0; j < count; ++j) {
            const block b = range(j);
            std::span<const T> mine = input.subspan(b.offset, b.count);
            if (upstream >= 0) {
                auto& in = window[j % window.size()];
                in.wait(t.limit());
                T* dst = acc.data() + b.offset;
                combine(dst, in.data(), mine.data(), b.count, op, v == 0 ? p : 1);
                detail::charge_combine(t.comm(), b.count * sizeof(T));
                in.release();
                if (j + window.size() < count) post(j + window.size());
                mine = std::span<const T>(dst, b.count);
            }
            if (downstream >= 0) sends.push_back(t.template send<T>(downstream, chain_channel, mine));
        }
        for (auto& s : sends) s.wait(t.limit());
    }

    /// Pipelined chain broadcast from root: root -> root+1 -> ... -> root+p-1, segment by segment.
    template <communicator C, element_type T>
    void broadcast(transport<C>& t, std::span<T> data, int root) const {
        const int p = t.size();
        if (p <= 1) return;
        const int v = (t.rank() - root + p) % p;
        const int upstream = v > 0 ? (root + v - 1) % p : -1;
        const int downstream = v + 1 < p ? (root + v + 1) % p : -1;
        const std::size_t n = data.size();
        const std::size_t seg = segment_elements<T>();
        const std::size_t count = transport<C>::segments(n, seg);
        std::vector<typename transport<C>::template incoming<T>> recvs;
        if (upstream >= 0) {
            recvs.reserve(count);
            for (std::size_t j = 0; j < count; ++j)
                recvs.push_back(t.template receive_into<T>(upstream, chain_channel,
                                                           data.subspan(j * seg, std::min(seg, n - j * seg))));
        }
        std::vector<typename transport<C>::outgoing> sends;
        sends.reserve(count);
        for (std::size_t j = 0; j < count; ++j) {
            if (upstream >= 0) recvs[j].wait(t.limit());
            if (downstream >= 0)
                sends.push_back(t.template send<T>(
                    downstream, chain_channel, std::span<const T>(data.subspan(j * seg, std::min(seg, n - j * seg)))));
        }
        for (auto& s : sends) s.wait(t.limit());
    }

private:
    /// The ring as one wavefront over its steps (reduce-scatter steps, then all-gather steps): segment j of step
    /// s+1 leaves as soon as segment j of step s has been combined or received, so there is no pause between
    /// steps and the all-gather forwards segments while they are still in cache. Step s uses channel s, so each
    /// channel carries its segments in order. Rank r sends chunk (r-s-1) in reduce-scatter step s and chunk (r-s)
    /// in all-gather step s, and receives the chunk before it; with p > 32 (more steps than channels) the steps
    /// run one after the other instead.
    template <communicator C, element_type T>
    void pipeline(transport<C>& t, std::span<T> data, reduce_op op, std::span<const block> blocks, bool scatter,
                  bool gather) const {
        using incoming = typename transport<C>::template incoming<T>;
        using outgoing = typename transport<C>::outgoing;
        const int p = t.size(), r = t.rank();
        const int next = (r + 1) % p, prev = (r - 1 + p) % p;
        const int rs_steps = scatter ? p - 1 : 0;
        const int steps = rs_steps + (gather ? p - 1 : 0);
        const std::size_t seg = segment_elements<T>();
        const auto chunk = [&](int c) { return blocks[static_cast<std::size_t>(((c % p) + p) % p)]; };
        const auto sent_chunk = [&](int step) {
            return step < rs_steps ? chunk(r - step - 1) : chunk(r - (step - rs_steps));
        };
        const auto received_chunk = [&](int step) {
            return step < rs_steps ? chunk(r - step - 2) : chunk(r - (step - rs_steps) - 1);
        };
        const auto piece = [&](const block& b, std::size_t j) {
            return data.subspan(b.offset + j * seg, std::min(seg, b.count - j * seg));
        };
        const auto count = [&](const block& b) { return transport<C>::segments(b.count, seg); };

        if (!options_.wavefront || steps + 2 > channels_per_call) {  // one step after the other
            for (int step = 0; step < steps; ++step) {
                const block out = sent_chunk(step), in = received_chunk(step);
                if (step < rs_steps) {
                    if constexpr (floating_element<T>)
                        t.exchange_reduce(next, std::span<const T>(data.subspan(out.offset, out.count)), prev,
                                          data.subspan(in.offset, in.count),
                                          combine_spec{op, true, step == rs_steps - 1 ? p : 1}, seg,
                                          options_.pipeline_depth, 0);
                } else {
                    t.exchange_copy(next, std::span<const T>(data.subspan(out.offset, out.count)), prev,
                                    data.subspan(in.offset, in.count), seg, 1);
                }
            }
            return;
        }

        const auto depth = static_cast<std::size_t>(options_.pipeline_depth);
        std::vector<std::vector<outgoing>> sends(static_cast<std::size_t>(steps));
        std::vector<std::vector<incoming>> recvs(static_cast<std::size_t>(steps));
        std::vector<std::size_t> posted(static_cast<std::size_t>(steps), 0);
        std::vector<std::span<T>> slots(static_cast<std::size_t>(steps));
        std::size_t waves = 0;
        for (int step = 0; step < steps; ++step) {
            const block in = received_chunk(step);
            recvs[static_cast<std::size_t>(step)].resize(count(in));
            sends[static_cast<std::size_t>(step)].reserve(count(sent_chunk(step)));
            if (step < rs_steps && t.needs_slots() && in.count > 0)
                slots[static_cast<std::size_t>(step)] = t.template scratch<T>(depth * std::min(seg, in.count));
            waves = std::max(waves, static_cast<std::size_t>(step) + count(in));
        }
        // An all-gather receive lands where a reduce-scatter send of the same rank read from: it may be posted
        // only once that send has completed (MPI forbids a receive into a buffer a pending send still reads).
        const auto blocker = [&](int step, std::size_t j) -> outgoing* {
            if (step < rs_steps || !scatter) return nullptr;
            auto& earlier = sends[static_cast<std::size_t>(step - rs_steps)];
            return j < earlier.size() ? &earlier[j] : nullptr;
        };
        const auto post = [&](int step, bool may_block) {
            const auto k = static_cast<std::size_t>(step);
            const std::size_t j = posted[k];
            const block in = received_chunk(step);
            if (j >= recvs[k].size()) return false;
            if (outgoing* b = blocker(step, j)) {
                if (!may_block && !b->test()) return false;
                b->wait(t.limit());
            }
            const std::span<T> dst = piece(in, j);
            if (step < rs_steps) {
                if constexpr (floating_element<T>) {
                    const std::size_t w = std::min(seg, in.count);
                    recvs[k][j] = t.template receive_combine<T>(
                        prev, step, dst, combine_spec{op, true, step == rs_steps - 1 ? p : 1},
                        t.needs_slots() ? slots[k].subspan((j % depth) * w, dst.size()) : std::span<T>());
                }
            } else {
                recvs[k][j] = t.template receive_into<T>(prev, step, dst);
            }
            ++posted[k];
            return true;
        };
        // Step 0 sends our own data; receives go `depth` segments ahead on every step.
        {
            const block out = sent_chunk(0);
            for (std::size_t j = 0; j < count(out); ++j)
                sends[0].push_back(t.template send<T>(next, 0, std::span<const T>(piece(out, j))));
        }
        for (int step = 0; step < steps; ++step)
            while (posted[static_cast<std::size_t>(step)] < depth && post(step, false)) {}
        for (std::size_t wave = 0; wave < waves; ++wave) {
            for (int step = 0; step < steps; ++step) {
                if (wave < static_cast<std::size_t>(step)) break;
                const auto k = static_cast<std::size_t>(step);
                const std::size_t j = wave - k;
                if (j >= recvs[k].size()) continue;
                while (posted[k] <= j) post(step, true);
                incoming& in = recvs[k][j];
                in.wait(t.limit());  // a reduce-scatter segment is combined into place on arrival
                const std::span<T> dst = piece(received_chunk(step), j);
                in.release();
                if (step + 1 < steps)
                    sends[k + 1].push_back(t.template send<T>(next, step + 1, std::span<const T>(dst)));
                while (posted[k] < std::min(j + 1 + depth, recvs[k].size()) && post(step, false)) {}
            }
        }
        for (auto& list : sends)
            for (auto& o : list) o.wait(t.limit());
    }

    template <class T>
    [[nodiscard]] std::size_t segment_elements() const noexcept {
        return std::max<std::size_t>(1, options_.segment_bytes / sizeof(T));
    }
    options_type options_{};
};

static_assert(schedule_for<ring, comm::local>,
              "hitch::allreduce::ring must model hitch::allreduce_schedule on comm::local");
static_assert(rooted_schedule_for<ring, comm::local>,
              "hitch::allreduce::ring must offer reduce and broadcast (hierarchical's Intra)");

}  // namespace hitch::allreduce
