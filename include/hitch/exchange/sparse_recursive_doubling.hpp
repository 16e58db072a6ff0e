#pragma once
// The sparse recursive doubling of the compressed exchange, for all-gather codecs (topk, threshold, dgc, ...): the
// SparCML all-reduce (Renggli et al. SC'19). Each rank encodes its bucket, decodes its own message and keeps its
// nonzeros as a sparse set (exchange/detail/sparse_set.hpp); in lg p rounds each rank swaps its set with the rank
// whose number differs in the round's bit and both merge (union of the indices, a + b where both: the same bits on
// both sides). A set whose union stops being sparse turns dense and stays so, which bounds a round at 4 n bytes.
// A world size that is not a power of two first folds its p - 2^k extra ranks into partners, which hand them the
// result at the end. Every rank ends with the same bits, the sum over ranks of what their messages deliver.
//
// Per round a rank sends 8 + (sparse: 8 k_r, dense: 4 n) bytes, k_r the entries of its set after r - 1 merges:
// k_1 = d n (d the codec's density), and k_(r+1) = 2 k_r - overlap between k_r (disjoint supports: 2^r d n; equal
// supports: d n). docs/compression.md gives the model.
//
// The failure protocol is that of exchange/compressed_ring.hpp: the first word of every message is its size or,
// once a rank has failed or heard of a failure, abort_flag | rank << 8 | code, so every rank learns of a failed
// encode within the call, none waits for a deadline, the healthy ranks take back their encode and all throw.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/aggregation.hpp"
#include "hitch/exchange/detail/bucket.hpp"
#include "hitch/exchange/detail/encode_failure.hpp"
#include "hitch/exchange/detail/sparse_set.hpp"

namespace hitch::compress {

/// Sparse recursive doubling (see the file comment). For all-gather codecs; any compressor works.
template <communicator C, compressor Codec, floating_element T>
aggregation_stats aggregate_sparse_recursive_doubling(allreduce::group<C>& g, const Codec& codec,
                                                      aggregation_state<Codec>& s, tensor_view<T> bucket,
                                                      const aggregate_options& options = {});

// ---------------------------------------------------------------------------------------------------------------

namespace detail {

/// A rank reports this code when a set it received failed read_sparse's checks.
inline constexpr std::uint8_t sparse_corrupt = 3;

inline constexpr std::uint64_t sparse_abort_flag = std::uint64_t{1} << 63;

/// The messages of one sparse exchange call: each is a size word (or a failure word) on channel 0, then the set on
/// channel 1 when neither side has failed. Keeps the first failure heard of (the lowest rank's, so every rank that
/// hears of several settles on the same one) and the bytes this rank sent.
template <communicator C>
class sparse_messages {
public:
    /// `out_bytes` and `in_bytes`: wire buffers to reuse.
    sparse_messages(allreduce::transport<C>& t, std::size_t n, std::vector<std::byte>& out_bytes,
                    std::vector<std::byte>& in_bytes)
        : t_(t), n_(n), out_bytes_(out_bytes), in_bytes_(in_bytes) {}

    /// Records a failure of this rank (code: encode_non_finite, encode_failed or sparse_corrupt).
    void fail_here(std::uint8_t code) { note(sparse_abort_flag | static_cast<std::uint64_t>(t_.rank()) << 8 | code); }
    [[nodiscard]] bool failed() const noexcept { return failure_ != 0; }
    [[nodiscard]] std::uint64_t failure() const noexcept { return failure_; }
    [[nodiscard]] std::size_t sent_bytes() const noexcept { return sent_; }
    /// The exception this rank hit, if any.
    std::exception_ptr error;

    /// Sends `out` to `to` while receiving a set from `from` into `in` (either may be -1: no such side). True when
    /// a set arrived intact and no failure is known. A received size that cannot be a set is a corrupt message:
    /// this rank stops reading from that peer (which then waits for its deadline) and reports sparse_corrupt.
    bool step(int to, const sparse_set* out, int from, sparse_set* in) {
        if (to >= 0 && failure_ == 0) write_sparse(*out, out_bytes_);
        const std::uint64_t out_size = failure_ != 0 ? failure_ : static_cast<std::uint64_t>(out_bytes_.size());
        std::uint64_t in_size = 0;
        {
            typename allreduce::transport<C>::template incoming<std::uint64_t> rs;
            typename allreduce::transport<C>::outgoing ss;
            if (from >= 0) rs = t_.receive_into(from, 0, std::span<std::uint64_t>(&in_size, 1));
            if (to >= 0) ss = t_.send(to, 0, std::span<const std::uint64_t>(&out_size, 1));
            rs.wait(t_.limit());
            ss.wait(t_.limit());
            if (to >= 0) sent_ += sizeof(std::uint64_t);
        }
        bool in_ok = from >= 0 && (in_size & sparse_abort_flag) == 0;
        if (from >= 0 && !in_ok) note(in_size);
        if (in_ok && !plausible_wire_bytes(in_size, n_)) {
            error = std::make_exception_ptr(corrupt_message_error(
                hitch::detail::concat(aggregate_who, ": sparse exchange: rank ", from, " announced a set of ", in_size,
                                      " bytes over ", n_, " elements")));
            fail_here(sparse_corrupt);
            in_ok = false;
        }
        const bool out_ok = to >= 0 && (out_size & sparse_abort_flag) == 0;
        {
            // An empty set has no payload message: the size says it all, and on the direct path a receive_into
            // an empty vector (data() == nullptr) is taken for a plain receive that never frees its sender.
            typename allreduce::transport<C>::template incoming<std::byte> rd;
            typename allreduce::transport<C>::outgoing sd;
            in_bytes_.clear();
            if (in_ok && in_size != 0) {
                in_bytes_.resize(static_cast<std::size_t>(in_size));
                rd = t_.receive_into(from, 1, std::span<std::byte>(in_bytes_));
            }
            if (out_ok && !out_bytes_.empty()) sd = t_.send(to, 1, std::span<const std::byte>(out_bytes_));
            rd.wait(t_.limit());
            sd.wait(t_.limit());
            if (out_ok) sent_ += out_bytes_.size();
        }
        if (!in_ok || failure_ != 0) return false;
        const std::uint8_t code =
            attempt([&] { read_sparse(in_bytes_, n_, *in, "hitch::compress::aggregate"); }, error);
        if (code != encode_ok) fail_here(code == encode_failed ? sparse_corrupt : code);
        return failure_ == 0;
    }

private:
    void note(std::uint64_t f) {
        if (failure_ == 0 || f < failure_) failure_ = f;
    }

    allreduce::transport<C>& t_;
    std::size_t n_;
    std::uint64_t failure_ = 0;
    std::size_t sent_ = 0;
    std::vector<std::byte>& out_bytes_;
    std::vector<std::byte>& in_bytes_;
};

/// Recursive doubling of `set` among `ranks` (ascending, this rank among them); on return every one of them holds
/// the merge of all their sets. Ranks past the largest power of two m2 first hand their set to rank index - m2 and
/// get the result back from it at the end. `incoming` and `merged` are workspace.
template <communicator C>
void sparse_recursive_doubling(sparse_messages<C>& msg, std::span<const int> ranks, int me, std::size_t n,
                               sparse_set& set, sparse_set& incoming, sparse_set& merged) {
    const std::size_t m = ranks.size();
    if (m <= 1) return;
    const auto idx = static_cast<std::size_t>(std::find(ranks.begin(), ranks.end(), me) - ranks.begin());
    const std::size_t m2 = std::bit_floor(m);
    if (idx >= m2) {
        const int partner = ranks[idx - m2];
        msg.step(partner, &set, -1, nullptr);
        msg.step(-1, nullptr, partner, &set);
        return;
    }
    const bool folds = idx + m2 < m;
    if (folds && msg.step(-1, nullptr, ranks[idx + m2], &incoming)) {
        merge(set, incoming, n, merged);
        std::swap(set, merged);
    }
    for (std::size_t mask = 1; mask < m2; mask <<= 1) {
        const int partner = ranks[idx ^ mask];
        if (msg.step(partner, &set, partner, &incoming)) {
            merge(set, incoming, n, merged);
            std::swap(set, merged);
        }
    }
    if (folds) msg.step(ranks[idx + m2], &set, -1, nullptr);
}

/// What the sparse exchanges share around their message pattern: the bucket checks, the encode and own set, the
/// one g.run call with its agreement descriptor, the undo and the errors, the result. `pattern(msg, set)` moves
/// the sets; `schedule` names the exchange in the agreement check; `layout_hash` joins the call's fingerprint.
template <communicator C, compressor Codec, floating_element T, class Pattern>
aggregation_stats run_sparse_exchange(allreduce::group<C>& g, const Codec& codec, aggregation_state<Codec>& s,
                                      tensor_view<T> bucket, const aggregate_options& options,
                                      std::string_view schedule, exchange_kind kind, std::uint64_t layout_hash,
                                      Pattern&& pattern) {
    require_bucket(bucket, s.count);
    const std::size_t n = s.count;
    if (n > std::numeric_limits<std::uint32_t>::max())
        throw config_error(hitch::detail::concat(aggregate_who, ": ", schedule, ": the bucket has ", n,
                                                 " elements; sparse sets index with uint32, at most 4294967295"));
    set_stream(s.codec, g.rank());
    aggregation_stats stats{aggregation_path::allgather, kind, 0, 0};
    allreduce::call_options call = options.call;
    call.fingerprint ^= 0x6a09e667f3bcc909ull * (n + 1) ^ static_cast<std::uint64_t>(Codec::codec_id) ^ layout_hash;
    const auto describe = detail::exchange_descriptor<T>(n, call.fingerprint, schedule);
    bool encoded = false;
    std::uint64_t failure = 0;
    std::exception_ptr error;
    sparse_set& set = s.sparse_own;
    const auto take_back = [&] {
        if constexpr (requires { codec.undo(s.codec); })
            if (encoded) codec.undo(s.codec);
    };
    try {
        g.run(call, describe, [&](allreduce::transport<C>& t, const allreduce::call_descriptor&) {
            sparse_messages<C> msg(t, n, s.sparse_out, s.sparse_in);
            // Encoding after the agreement check leaves the state untouched when the ranks disagree.
            const std::uint8_t code = attempt(
                [&] {
                    codec.encode(tensor_view<const T>(bucket.data(), bucket.size()), s.codec, s.message);
                    encoded = true;
                    s.accumulator.resize(n);
                    codec.decode(std::span<const std::byte>(s.message), tensor_view<float>(s.accumulator));
                    sparse_from_dense(s.accumulator, set);
                },
                msg.error);
            if (code != encode_ok) msg.fail_here(code);
            stats.message_bytes = s.message.size();
            pattern(msg, set);
            failure = msg.failure();
            error = msg.error;
            stats.sent_bytes = msg.sent_bytes();
        });
    } catch (...) {
        take_back();
        throw;
    }
    if (failure != 0) {
        take_back();
        if (error) std::rethrow_exception(error);
        const auto rank = static_cast<int>((failure >> 8) & 0xffffffu);
        const auto code = static_cast<std::uint8_t>(failure & 0xffu);
        const std::string text = hitch::detail::concat(
            aggregate_who, ": ", schedule, ": rank ", rank,
            code == sparse_corrupt
                ? " received a corrupt sparse set"
                : (code == encode_non_finite ? " could not encode (NaN or an infinity)" : " could not encode"),
            "; every rank stops here and no state changed");
        if (code == encode_non_finite) throw non_finite_error(text);
        if (code == sparse_corrupt) throw corrupt_message_error(text);
        throw hitch::error(text);
    }
    s.accumulator.resize(n);
    write_dense(set, s.accumulator);
    write_result(s.accumulator, bucket, options.average, g.size());
    return stats;
}

}  // namespace detail

template <communicator C, compressor Codec, floating_element T>
aggregation_stats aggregate_sparse_recursive_doubling(allreduce::group<C>& g, const Codec& codec,
                                                      aggregation_state<Codec>& s, tensor_view<T> bucket,
                                                      const aggregate_options& options) {
    return detail::run_sparse_exchange(
        g, codec, s, bucket, options, "sparse_recursive_doubling", exchange_kind::sparse_recursive_doubling, 0,
        [&](detail::sparse_messages<C>& msg, detail::sparse_set& set) {
            std::vector<int> all(static_cast<std::size_t>(g.size()));
            for (int r = 0; r < g.size(); ++r) all[static_cast<std::size_t>(r)] = r;
            detail::sparse_recursive_doubling(msg, std::span<const int>(all), g.rank(), s.count, set, s.sparse_received,
                                              s.sparse_merged);
        });
}

}  // namespace hitch::compress
