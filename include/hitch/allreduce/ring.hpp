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
#include "hitch/allreduce/transport.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/concepts/allreduce_schedule.hpp"
#include "hitch/core/options.hpp"

namespace hitch::allreduce {

class ring {
public:
    struct options {
        /// Bytes per pipelined message; a chunk larger than this streams as several.
        std::size_t segment_bytes = std::size_t{1} << 20;
        /// Receives kept in flight per step (each needs one segment of scratch on the message path).
        int pipeline_depth = 4;

        void validate() const {
            option_validator("hitch::allreduce::ring::options")
                .closed("segment_bytes", segment_bytes, std::size_t{64}, std::size_t{1} << 30)
                .closed("pipeline_depth", pipeline_depth, 1, 64);
        }
    };

    static constexpr std::string_view name = "ring";
    static constexpr int reduce_scatter_channel = 0;
    static constexpr int allgather_channel = 1;
    static constexpr int chain_channel = 2;

    ring() = default;
    explicit ring(const options& o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options& settings() const noexcept { return options_; }

    [[nodiscard]] cost_estimate cost(int p, std::size_t n_bytes, const cost_constants& = {}) const {
        cost_estimate c;
        if (p <= 1 || n_bytes == 0) return c;
        const double seg = static_cast<double>(options_.segment_bytes);
        double messages = 0;
        double sent = 0;
        for (int r = 0; r < p; ++r) {  // the busiest rank, with chunks that differ by at most one byte
            double m = 0, b = 0;
            for (int s = 0; s < p - 1; ++s) {
                const block rs = partition(n_bytes, p, ((r - s - 1) % p + p) % p);
                const block ag = partition(n_bytes, p, ((r - s) % p + p) % p);
                m += detail::segments(static_cast<double>(rs.count), seg) + detail::segments(static_cast<double>(ag.count), seg);
                b += static_cast<double>(rs.count + ag.count);
            }
            messages = std::max(messages, m);
            sent = std::max(sent, b);
        }
        const double n = static_cast<double>(n_bytes);
        c.latency_terms = messages;
        c.bandwidth_bytes = 2.0 * (p - 1) * n / p;
        c.reduced_bytes = (p - 1) * n / p;
        c.sent_messages = messages;
        c.sent_bytes = sent;
        return c;
    }

    template <communicator C, floating_element T>
    void run(transport<C>& t, std::span<T> data, reduce_op op) const {
        if (t.size() <= 1) return;
        const std::vector<block> blocks = even_blocks(data.size(), t.size());
        reduce_scatter(t, data, op, blocks);
        allgather(t, data, std::span<const block>(blocks));
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
        const int p = t.size(), r = t.rank();
        if (p <= 1) return;
        const int next = (r + 1) % p, prev = (r - 1 + p) % p;
        const std::size_t seg = segment_elements<T>();
        for (int s = 0; s < p - 1; ++s) {
            const block out = blocks[static_cast<std::size_t>(((r - s - 1) % p + p) % p)];
            const block in = blocks[static_cast<std::size_t>(((r - s - 2) % p + p) % p)];
            const combine_spec spec{op, true, s == p - 2 ? p : 1};
            t.exchange_reduce(next, std::span<const T>(data.subspan(out.offset, out.count)), prev,
                              data.subspan(in.offset, in.count), spec, seg, options_.pipeline_depth,
                              reduce_scatter_channel);
        }
    }

    /// Rank r's block `blocks[r]` is complete on entry; afterwards every block is, on every rank.
    template <communicator C, element_type T>
    void allgather(transport<C>& t, std::span<T> data, std::span<const block> blocks) const {
        const int p = t.size(), r = t.rank();
        if (p <= 1) return;
        const int next = (r + 1) % p, prev = (r - 1 + p) % p;
        const std::size_t seg = segment_elements<T>();
        for (int s = 0; s < p - 1; ++s) {
            const block out = blocks[static_cast<std::size_t>(((r - s) % p + p) % p)];
            const block in = blocks[static_cast<std::size_t>(((r - s - 1) % p + p) % p)];
            t.exchange_copy(next, std::span<const T>(data.subspan(out.offset, out.count)), prev,
                            data.subspan(in.offset, in.count), seg, allgather_channel);
        }
    }

    /// Pipelined chain reduce: ranks root+p-1 -> ... -> root+1 -> root, each combining its input into what passes.
    /// `output` (may alias `input`) receives the result on root and is workspace elsewhere (scratch when empty).
    template <communicator C, floating_element T>
    void reduce(transport<C>& t, std::span<const T> input, std::span<T> output, reduce_op op, int root) const {
        const int p = t.size();
        const int v = (t.rank() - root + p) % p;  // position along the chain, root at 0
        const std::size_t n = input.size();
        if (p <= 1) {
            if (output.data() != input.data() && output.size() == n) std::copy(input.begin(), input.end(), output.begin());
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
        if (upstream >= 0 && !t.direct() && count > 0) slots = t.template scratch<T>(static_cast<std::size_t>(depth) * std::min(seg, n));
        std::vector<typename transport<C>::template incoming<T>> window(static_cast<std::size_t>(depth));
        const auto post = [&](std::size_t j) {
            const block b = range(j);
            const std::size_t w = std::min(seg, n);
            window[j % window.size()] = t.template receive<T>(
                upstream, chain_channel, b.count, t.direct() ? std::span<T>() : slots.subspan((j % window.size()) * w, b.count));
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
                recvs.push_back(t.template receive_into<T>(upstream, chain_channel, data.subspan(j * seg, std::min(seg, n - j * seg))));
        }
        std::vector<typename transport<C>::outgoing> sends;
        sends.reserve(count);
        for (std::size_t j = 0; j < count; ++j) {
            if (upstream >= 0) recvs[j].wait(t.limit());
            if (downstream >= 0)
                sends.push_back(t.template send<T>(downstream, chain_channel,
                                                   std::span<const T>(data.subspan(j * seg, std::min(seg, n - j * seg)))));
        }
        for (auto& s : sends) s.wait(t.limit());
    }

private:
    template <class T>
    [[nodiscard]] std::size_t segment_elements() const noexcept {
        return std::max<std::size_t>(1, options_.segment_bytes / sizeof(T));
    }
    options options_{};
};

static_assert(hitch::allreduce_schedule<ring, comm::local>,
              "hitch::allreduce::ring must model hitch::allreduce_schedule on comm::local");
static_assert(hitch::rooted_schedule<ring, comm::local>,
              "hitch::allreduce::ring must offer reduce and broadcast (hierarchical's Intra)");

}  // namespace hitch::allreduce
