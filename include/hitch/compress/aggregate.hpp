#pragma once
// Compression-aware aggregation: every rank passes its bucket; every rank gets the sum over ranks of what the
// codec delivers (optionally the mean). The algorithm follows from the codec's traits at compile time:
//
//   low_rank_compressor (powersgd)      P summed by an all-reduce, orthogonalised, Q summed by an all-reduce
//   additive (none, fp16, bf16, randomk and their error_feedback)
//                                       the encoded elements are summed in transit by an all-reduce schedule
//   ring_compressible (onebit, qsgd, terngrad and their error_feedback)
//                                       compression-aware ring (below)
//   otherwise (threshold, topk, dgc, ...)
//                                       all-gather of the messages, then decode-and-add in rank order
//
//   hitch::allreduce::group g(comm);
//   hitch::compress::qsgd codec;
//   auto state = hitch::compress::make_aggregation_state(codec, bucket.size());
//   hitch::compress::aggregate(g, codec, state, hitch::view(bucket));   // bucket: mine in, sum over ranks out
//
// Compression-aware ring (the scheme of 1-bit Adam, Tang et al. 2021, with error feedback at the workers and the
// servers, here at every hop of a ring): the bucket is cut into p chunks. In p - 1 reduce-scatter steps each rank
// receives a chunk's compressed partial sum from its left neighbour, decodes it, adds its own contribution, and
// re-encodes it with error feedback: what the re-encoding loses stays in this rank's residual for that chunk and is
// added the next time it encodes the chunk (for codecs that need error feedback, see ring_hop_feedback; unbiased
// quantisers re-encode without a residual). Each rank then holds one fully reduced chunk, encodes it once more with
// its residual, and p - 1 all-gather steps pass those messages around unchanged; every rank decodes the same p
// messages, so the result is the same bits everywhere. Traffic stays compressed end to end: 2 (p - 1) messages of
// a chunk per rank. Each rank encodes every chunk exactly once per call, so one residual the size of the bucket
// holds all of its hop residuals, and sum over ranks of (input + old residual) = result + sum of new residuals.
//
// Guarantees of every path: all ranks call it with the same bucket size (checked: mismatch_error); a rank whose
// encode fails (non_finite_error, ...) tells the others through the exchange's first collective, every rank
// throws, no rank waits for a deadline, and nothing is lost: the failing rank's state never changed and the others
// take back their encode (undo). Blocking calls have the group's deadline (timeout_error).
//
// The allgather and ring paths give bit-identical results on every rank (same messages, same decode order). The
// all-reduce paths give whatever the schedule gives (the ring schedules reduce each element in one order, so
// they are bit-identical too).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "hitch/allreduce/automatic.hpp"
#include "hitch/allreduce/collectives.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/partition.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/comm/agree.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/tensor.hpp"

namespace hitch::compress {

/// The aggregation algorithms.
enum class aggregation_path : std::uint8_t { allreduce = 1, low_rank = 2, allgather = 3, compressed_ring = 4 };

[[nodiscard]] constexpr std::string_view name(aggregation_path p) noexcept {
    switch (p) {
        case aggregation_path::allreduce: return "allreduce";
        case aggregation_path::low_rank: return "low_rank";
        case aggregation_path::allgather: return "allgather";
        case aggregation_path::compressed_ring: return "compressed_ring";
    }
    return "invalid-path";
}

namespace detail {

template <class Codec>
struct is_error_feedback : std::false_type {};
template <class Codec>
struct is_error_feedback<error_feedback<Codec>> : std::true_type {};

/// The codec that encodes at the hops of the compressed ring: the inner codec of error_feedback<X>, else itself.
template <class Codec>
struct ring_codec {
    using type = Codec;
};
template <class Codec>
struct ring_codec<error_feedback<Codec>> {
    using type = Codec;
};

}  // namespace detail

/// Whether the compressed ring keeps a residual at every hop: for codecs that need error feedback (biased ones such as
/// onebit, whose compression is a contraction) and for any codec the user wrapped in error_feedback. Unbiased
/// quantisers (qsgd, terngrad) re-encode at each hop without one: error feedback on an unbiased quantiser whose
/// variance exceeds the energy of its input (QSGD with s = 7 on groups of 512: up to 3.2 ||v||^2) is not a
/// contraction, its residual grows step after step, while unbiased hops keep the sum unbiased.
template <class Codec>
inline constexpr bool ring_hop_feedback = detail::is_error_feedback<Codec>::value || Codec::needs_error_feedback;

/// The path `aggregate` takes for Codec.
template <class Codec>
inline constexpr aggregation_path aggregation_path_of = [] {
    if constexpr (low_rank_compressor<Codec>) return aggregation_path::low_rank;
    else if constexpr (Codec::additive) return aggregation_path::allreduce;
    else if constexpr (Codec::ring_compressible) return aggregation_path::compressed_ring;
    else return aggregation_path::allgather;
}();

/// Per-bucket state of the aggregation: the codec's state, the ring's residual, and reusable buffers.
template <class Codec>
struct aggregation_state {
    typename Codec::state codec;
    std::size_t count = 0;
    /// This rank's residual at the hops of the compressed ring (unused when Codec is error_feedback<X>, whose own
    /// residual serves, or on the other paths).
    std::vector<float> ring_residual;
    std::vector<float> ring_next;
    // workspace
    std::vector<std::byte> message;
    std::vector<float> accumulator, scratch, p, q;
    std::vector<std::vector<std::byte>> messages;
};

/// What one call did.
struct aggregation_stats {
    aggregation_path path = aggregation_path::allgather;
    /// Bytes of this rank's encoded contribution (its message, or the elements it all-reduced).
    std::size_t message_bytes = 0;
    /// Bytes this rank sent, where the path moves its own messages (allgather: the blobs it forwarded; ring: every
    /// hop's message); for the all-reduce paths, the bytes the schedule's all-reduce carries per rank in a ring,
    /// 2 (p - 1) / p of the summed elements.
    std::size_t sent_bytes = 0;
};

struct aggregate_options {
    /// Divide the sum by the number of ranks.
    bool average = false;
    /// Options of the collectives (agreement checks, deadline).
    allreduce::call_options call{};
};

/// A state for a bucket of `count` elements.
template <compressor Codec>
[[nodiscard]] aggregation_state<Codec> make_aggregation_state(const Codec& codec, std::size_t count) {
    return make_aggregation_state(codec, codec.make_state(count), count);
}
/// A state around a codec state made elsewhere (e.g. powersgd's make_state(count, shapes)).
template <compressor Codec>
[[nodiscard]] aggregation_state<Codec> make_aggregation_state(const Codec&, typename Codec::state codec_state,
                                                              std::size_t count) {
    aggregation_state<Codec> s;
    s.codec = std::move(codec_state);
    s.count = count;
    if constexpr (aggregation_path_of<Codec> == aggregation_path::compressed_ring &&
                  !detail::is_error_feedback<Codec>::value && ring_hop_feedback<Codec>) {
        s.ring_residual.assign(count, 0.0f);
        s.ring_next.assign(count, 0.0f);
    }
    return s;
}

/// Flag of aggregation-state blobs (the codec's state and the compressed ring's residual).
inline constexpr std::uint8_t aggregation_state_flag = 2;

/// Saves an aggregation state: the codec's state blob nested with the ring's residual (versioned and checksummed
/// like every blob, for checkpoints). Payload: u64 residual length | floats | u64 codec blob length | codec blob.
template <compressor Codec>
void save_state(const Codec& codec, const aggregation_state<Codec>& s, std::vector<std::byte>& blob) {
    std::vector<std::byte> body, inner;
    wire::put_scalar<std::uint64_t>(body, s.ring_residual.size());
    wire::put_floats(body, s.ring_residual);
    codec.save_state(s.codec, inner);
    wire::put_scalar<std::uint64_t>(body, inner.size());
    body.insert(body.end(), inner.begin(), inner.end());
    wire::seal_state(blob, Codec::codec_id, s.count, body, aggregation_state_flag);
}

/// Loads what save_state wrote into a state made for the same codec and bucket; anything else is
/// corrupt_message_error, and `s` is left as it was.
template <compressor Codec>
void load_state(const Codec& codec, std::span<const std::byte> blob, aggregation_state<Codec>& s) {
    constexpr std::string_view who = "hitch::compress::load_state (aggregation)";
    const wire::message_view m = wire::open_state(blob, Codec::codec_id, s.count, who, aggregation_state_flag);
    wire::reader r(m.payload, who);
    const std::uint64_t n = r.count("ring residual length", s.count);
    if (n != s.ring_residual.size())
        r.fail(hitch::detail::concat("ring residual of ", n, " elements where the state has ", s.ring_residual.size()));
    std::vector<float> residual;
    wire::get_floats(r, residual, n, "ring residual");
    const std::uint64_t inner_size = r.count("codec state length", r.remaining());
    const auto inner_blob = r.take(inner_size, "codec state");
    r.expect_end();
    for (float x : residual)
        if (!std::isfinite(x)) r.fail("the saved ring residual holds NaN or an infinity");
    typename Codec::state inner = s.codec;
    codec.load_state(inner_blob, inner);
    s.codec = std::move(inner);
    s.ring_residual = std::move(residual);
}

namespace detail {

inline constexpr std::string_view aggregate_who = "hitch::compress::aggregate";

/// Codes a rank reports about its own encode.
inline constexpr std::uint8_t encode_ok = 0;
inline constexpr std::uint8_t encode_non_finite = 1;
inline constexpr std::uint8_t encode_failed = 2;

/// Runs f(), turning its exception into a code (and keeping it to rethrow).
template <class F>
std::uint8_t attempt(F&& f, std::exception_ptr& error) {
    try {
        f();
        return encode_ok;
    } catch (const non_finite_error&) {
        error = std::current_exception();
        return encode_non_finite;
    } catch (...) {
        error = std::current_exception();
        return encode_failed;
    }
}

/// After the ranks exchanged their codes: if any failed, the healthy ranks take back their encode and every rank
/// throws (the failing one its own error, the others one naming the failing ranks).
template <class Codec>
void settle(const Codec& codec, typename Codec::state& state, std::span<const std::uint8_t> codes, int me,
            std::exception_ptr error) {
    std::string failed;
    bool non_finite = true;
    for (std::size_t r = 0; r < codes.size(); ++r)
        if (codes[r] != encode_ok) {
            failed += hitch::detail::concat(failed.empty() ? "" : ", ", r);
            non_finite = non_finite && codes[r] == encode_non_finite;
        }
    if (failed.empty()) return;
    if (codes[static_cast<std::size_t>(me)] == encode_ok) {
        if constexpr (requires { codec.undo(state); }) codec.undo(state);
    } else {
        std::rethrow_exception(error);
    }
    const std::string text = hitch::detail::concat(aggregate_who, ": rank(s) ", failed, " could not encode their bucket",
                                                   non_finite ? " (NaN or an infinity)" : "",
                                                   "; every rank stops here and no state changed");
    if (non_finite) throw non_finite_error(text);
    throw hitch::error(text);
}

/// Streams the stochastic codecs' state ("stream") is set to the rank, so the ranks' rounding is independent.
template <class State>
void set_stream(State& s, int rank) {
    if constexpr (requires { s.stream; }) s.stream = static_cast<std::uint64_t>(rank);
    if constexpr (requires { s.inner; }) set_stream(s.inner, rank);
}

template <class T>
void require_bucket(const tensor_view<T>& bucket, std::size_t count) {
    if (!bucket.on_host())
        throw config_error(hitch::detail::concat(aggregate_who, ": the bucket is in ", name(bucket.space()),
                                                 " memory; host buckets only"));
    if (bucket.size() != count)
        throw config_error(hitch::detail::concat(aggregate_who, ": the state was made for a bucket of ", count,
                                                 " elements, the bucket has ", bucket.size()));
}

/// `bucket` as floats in `scratch` (or itself for float buckets).
template <class T>
std::span<float> float_view(tensor_view<T> bucket, std::vector<float>& scratch) {
    if constexpr (std::is_same_v<T, float>) {
        return {bucket.data(), bucket.size()};
    } else {
        scratch.resize(bucket.size());
        for (std::size_t i = 0; i < bucket.size(); ++i) scratch[i] = static_cast<float>(bucket[i]);
        return scratch;
    }
}

/// out = values (scaled by 1/p for the mean), converting to the bucket's type.
template <class T>
void write_result(std::span<const float> values, tensor_view<T> out, bool average, int p) {
    const float f = average ? 1.0f / static_cast<float>(p) : 1.0f;
    for (std::size_t i = 0; i < values.size(); ++i) out[i] = T(average ? values[i] * f : values[i]);
}

/// Exchanges one status byte per rank (sequenced with the group's other calls) and returns all of them.
template <communicator C>
std::vector<std::uint8_t> exchange_codes(allreduce::group<C>& g, std::uint8_t mine, std::size_t count,
                                         const allreduce::call_options& options) {
    std::vector<std::uint8_t> all(static_cast<std::size_t>(g.size()));
    allreduce::call_options o = options;
    o.fingerprint ^= 0x9e3779b97f4a7c15ull * (count + 1);  // ranks with different bucket sizes fail the check
    allreduce::allgather(g, tensor_view<const std::uint8_t>(&mine, 1), tensor_view<std::uint8_t>(all), o);
    return all;
}

}  // namespace detail

// ================================================ the paths ===================================================

/// All-gather of every rank's message, then decode-and-add in rank order (the same bits on every rank).
template <communicator C, compressor Codec, floating_element T>
aggregation_stats aggregate_allgather(allreduce::group<C>& g, const Codec& codec, aggregation_state<Codec>& s,
                                      tensor_view<T> bucket, const aggregate_options& options = {}) {
    detail::require_bucket(bucket, s.count);
    detail::set_stream(s.codec, g.rank());
    std::exception_ptr error;
    const std::uint8_t code = detail::attempt(
        [&] { codec.encode(tensor_view<const T>(bucket.data(), bucket.size()), s.codec, s.message); }, error);
    // A failed encode contributes a one-byte blob with its code (a message is never shorter than its header).
    const std::byte failure_blob[1] = {static_cast<std::byte>(code)};
    const std::span<const std::byte> mine = code == detail::encode_ok ? std::span<const std::byte>(s.message)
                                                                      : std::span<const std::byte>(failure_blob);
    allreduce::call_options call = options.call;
    call.fingerprint ^= 0x51ed27092f4a1c3bull * (s.count + 1);
    const allreduce::byte_blocks blobs = allreduce::allgather_bytes(g, mine, call);
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(g.size()), detail::encode_ok);
    for (int r = 0; r < g.size(); ++r) {
        const auto b = blobs.blob(r);
        if (b.size() == 1)
            codes[static_cast<std::size_t>(r)] = static_cast<std::uint8_t>(b[0]) == detail::encode_non_finite
                                                     ? detail::encode_non_finite
                                                     : detail::encode_failed;
    }
    detail::settle(codec, s.codec, codes, g.rank(), error);
    s.accumulator.assign(s.count, 0.0f);
    try {
        for (int r = 0; r < g.size(); ++r) codec.decode_add(blobs.blob(r), tensor_view<float>(s.accumulator));
    } catch (...) {
        if constexpr (requires { codec.undo(s.codec); }) codec.undo(s.codec);
        throw;
    }
    detail::write_result(s.accumulator, bucket, options.average, g.size());
    aggregation_stats stats{aggregation_path::allgather, s.message.size(), 0};
    const auto p = static_cast<std::size_t>(g.size());
    for (std::size_t k = 1; k < p; ++k)  // the ring all-gather forwards every blob but the one it would send back
        stats.sent_bytes += blobs.blob(static_cast<int>((static_cast<std::size_t>(g.rank()) + p - k + 1) % p)).size();
    return stats;
}

/// The additive path: encode_summable, all-reduce (sum) with Schedule, decode_summed.
template <class Schedule = allreduce::automatic, communicator C, compressor Codec, floating_element T>
aggregation_stats aggregate_allreduce(allreduce::group<C>& g, const Codec& codec, aggregation_state<Codec>& s,
                                      tensor_view<T> bucket, const Schedule& schedule = Schedule{},
                                      const aggregate_options& options = {}) {
    static_assert(summable_compressor<Codec>,
                  "aggregate_allreduce: Codec::additive is true but it lacks the summable form (summable_t, "
                  "summable_count, encode_summable, decode_summed); see hitch::summable_compressor");
    detail::require_bucket(bucket, s.count);
    const auto p = static_cast<std::size_t>(g.size());
    const allreduce::reduce_op op = options.average ? allreduce::reduce_op::average : allreduce::reduce_op::sum;
    aggregation_stats stats{aggregation_path::allreduce, 0, 0};
    if constexpr (std::is_same_v<Codec, none>) {
        // Identity: the bucket itself is all-reduced (the all-reduce checks the sizes).
        allreduce::allreduce(g, bucket, op, schedule, options.call);
        stats.message_bytes = bucket.size_bytes();
        stats.sent_bytes = p > 1 ? 2 * (p - 1) * bucket.size_bytes() / p : 0;
        return stats;
    } else {
        using S = typename Codec::template summable_t<T>;
        const std::size_t m = codec.summable_count(s.codec, s.count);
        std::vector<S> values(m);
        std::exception_ptr error;
        const std::uint8_t code = detail::attempt(
            [&] { codec.encode_summable(tensor_view<const T>(bucket.data(), bucket.size()), s.codec, std::span<S>(values)); },
            error);
        const std::vector<std::uint8_t> codes = detail::exchange_codes(g, code, s.count, options.call);
        detail::settle(codec, s.codec, codes, g.rank(), error);
        allreduce::call_options call = options.call;
        if constexpr (requires { codec.agreement_value(s.codec); }) call.fingerprint ^= codec.agreement_value(s.codec);
        try {
            allreduce::allreduce(g, tensor_view<S>(values), op, schedule, call);
        } catch (...) {
            if constexpr (requires { codec.undo(s.codec); }) codec.undo(s.codec);
            throw;
        }
        codec.decode_summed(std::span<const S>(values), s.codec, bucket);
        stats.message_bytes = m * sizeof(S);
        stats.sent_bytes = p > 1 ? 2 * (p - 1) * m * sizeof(S) / p : 0;
        return stats;
    }
}

/// PowerSGD's two rounds: P summed, orthogonalised on every rank, Q summed.
template <class Schedule = allreduce::automatic, communicator C, compressor Codec, floating_element T>
aggregation_stats aggregate_low_rank(allreduce::group<C>& g, const Codec& codec, aggregation_state<Codec>& s,
                                     tensor_view<T> bucket, const Schedule& schedule = Schedule{},
                                     const aggregate_options& options = {}) {
    static_assert(low_rank_compressor<Codec>, "aggregate_low_rank: Codec must model hitch::low_rank_compressor");
    detail::require_bucket(bucket, s.count);
    s.p.resize(codec.p_count(s.codec));
    s.q.resize(codec.q_count(s.codec));
    std::exception_ptr error;
    // compute_p validates the bucket and changes no lasting state, so nothing needs undoing on failure.
    const std::uint8_t code = detail::attempt(
        [&] { codec.compute_p(tensor_view<const T>(bucket.data(), bucket.size()), s.codec, std::span<float>(s.p)); }, error);
    detail::settle(codec, s.codec, detail::exchange_codes(g, code, s.count, options.call), g.rank(), error);
    allreduce::allreduce(g, tensor_view<float>(s.p), allreduce::reduce_op::sum, schedule, options.call);
    codec.compute_q(std::span<const float>(s.p), s.codec, std::span<float>(s.q));
    allreduce::allreduce(g, tensor_view<float>(s.q), allreduce::reduce_op::sum, schedule, options.call);
    if (options.average) {
        s.accumulator.resize(s.count);
        codec.finish_low_rank(std::span<const float>(s.p), std::span<const float>(s.q), s.codec,
                              tensor_view<float>(s.accumulator));
        detail::write_result(s.accumulator, bucket, true, g.size());
    } else {
        codec.finish_low_rank(std::span<const float>(s.p), std::span<const float>(s.q), s.codec, bucket);
    }
    const auto p = static_cast<std::size_t>(g.size());
    const std::size_t bytes = 4 * (s.p.size() + s.q.size());
    return {aggregation_path::low_rank, bytes, p > 1 ? 2 * (p - 1) * bytes / p : 0};
}

/// The compression-aware ring (see the file comment). For ring_compressible codecs and their error_feedback.
template <communicator C, compressor Codec, floating_element T>
aggregation_stats aggregate_ring(allreduce::group<C>& g, const Codec& codec, aggregation_state<Codec>& s,
                                 tensor_view<T> bucket, const aggregate_options& options = {}) {
    using hop_codec_t = typename detail::ring_codec<Codec>::type;
    constexpr bool feedback = ring_hop_feedback<Codec>;
    static_assert(!feedback || residual_compressor<hop_codec_t>,
                  "aggregate_ring: a codec that needs error feedback re-encodes at every hop with a residual: it (or "
                  "the codec inside error_feedback) must model hitch::residual_compressor (encode_ef)");
    detail::require_bucket(bucket, s.count);
    constexpr bool wrapped = detail::is_error_feedback<Codec>::value;
    const hop_codec_t& hop = [&]() -> const hop_codec_t& {
        if constexpr (wrapped) return codec.inner();
        else return codec;
    }();
    auto& hop_state = [&]() -> typename hop_codec_t::state& {
        if constexpr (wrapped) return s.codec.inner;
        else return s.codec;
    }();
    std::vector<float>& r_in = [&]() -> std::vector<float>& {
        if constexpr (wrapped) return s.codec.residual;
        else return s.ring_residual;
    }();
    std::vector<float>& r_out = [&]() -> std::vector<float>& {
        if constexpr (wrapped) return s.codec.next;
        else return s.ring_next;
    }();
    detail::set_stream(hop_state, g.rank());
    const std::span<float> mine = detail::float_view(bucket, s.scratch);
    const std::size_t n = s.count;
    const int p = g.size(), me = g.rank();
    const auto next = (me + 1) % p, prev = (me - 1 + p) % p;
    s.messages.resize(static_cast<std::size_t>(p));
    s.accumulator.resize(n);
    aggregation_stats stats{aggregation_path::compressed_ring, 0, 0};

    // A hop state for chunk-sized encodes: codecs check the state's size, so each chunk gets its own.
    std::vector<typename hop_codec_t::state> chunk_states;
    for (int c = 0; c < p; ++c) {
        chunk_states.push_back(hop.make_state(allreduce::partition(n, p, c).count));
        if constexpr (requires { hop_state.step; }) chunk_states.back().step = hop_state.step * static_cast<std::uint64_t>(p) + static_cast<std::uint64_t>(c);
        detail::set_stream(chunk_states.back(), me);
    }
    const auto chunk = [&](int c) { return allreduce::partition(n, p, ((c % p) + p) % p); };
    const auto encode_chunk = [&](int c, const float* values, std::vector<std::byte>& out) -> std::size_t {
        const allreduce::block b = chunk(c);
        auto& cs = chunk_states[static_cast<std::size_t>(((c % p) + p) % p)];
        if constexpr (feedback)
            return hop.encode_ef(tensor_view<const float>(values, b.count),
                                 std::span<const float>(r_in.data() + b.offset, b.count),
                                 std::span<float>(r_out.data() + b.offset, b.count), cs, out);
        else return hop.encode(tensor_view<const float>(values, b.count), cs, out);
    };

    // The status of this rank, and the first failure heard of (rank << 8 | code), travel in every size message.
    constexpr std::uint64_t abort_flag = std::uint64_t{1} << 63;
    std::exception_ptr error;
    std::uint64_t failure = 0;  // 0: none; else abort_flag | rank << 8 | code
    const auto fail_here = [&](std::uint8_t code) {
        if (failure == 0) failure = abort_flag | static_cast<std::uint64_t>(me) << 8 | code;
    };

    allreduce::call_options call = options.call;
    call.fingerprint ^= 0x2545f4914f6cdd1dull * (n + 1) ^ static_cast<std::uint64_t>(hop_codec_t::codec_id);
    const auto describe = [n, call] {
        allreduce::call_descriptor d;
        d.operation = static_cast<std::uint8_t>(allreduce::operation::allreduce);
        d.count = n;
        d.type = static_cast<std::uint8_t>(dtype_of<T>());
        d.op = static_cast<std::uint8_t>(allreduce::reduce_op::sum);
        d.root = -1;
        d.fingerprint = call.fingerprint;
        d.set_schedule("compressed_ring");
        return d;
    };
    g.run(call, describe, [&](allreduce::transport<C>& t, const allreduce::call_descriptor&) {
        std::vector<std::byte> out_message, in_message;
        // One step: send (size, then message) to the right, receive from the left. Failures travel as sizes.
        const auto step = [&](const std::vector<std::byte>& send, std::vector<std::byte>& received) -> bool {
            std::uint64_t out_size = failure != 0 ? failure : send.size(), in_size = 0;
            auto rs = t.receive_into(prev, 0, std::span<std::uint64_t>(&in_size, 1));
            auto ss = t.send(next, 0, std::span<const std::uint64_t>(&out_size, 1));
            rs.wait(t.limit());
            ss.wait(t.limit());
            const bool in_ok = (in_size & abort_flag) == 0;
            if (!in_ok && failure == 0) failure = in_size;
            if (in_ok) {
                received.resize(static_cast<std::size_t>(in_size));
                auto rd = t.receive_into(prev, 1, std::span<std::byte>(received));
                if ((out_size & abort_flag) == 0) {
                    auto sd = t.send(next, 1, std::span<const std::byte>(send));
                    rd.wait(t.limit());
                    sd.wait(t.limit());
                    stats.sent_bytes += send.size() + 8;
                } else {
                    rd.wait(t.limit());
                }
            } else if ((out_size & abort_flag) == 0) {
                auto sd = t.send(next, 1, std::span<const std::byte>(send));
                sd.wait(t.limit());
                stats.sent_bytes += send.size() + 8;
            }
            return in_ok && failure == 0;
        };

        // Reduce-scatter: the first message is this rank's own chunk `me`.
        {
            const std::uint8_t code = detail::attempt([&] { encode_chunk(me, mine.data() + chunk(me).offset, out_message); }, error);
            if (code != detail::encode_ok) fail_here(code);
            stats.message_bytes = out_message.size();
        }
        if (p == 1) {
            if (failure == 0) s.messages[0] = out_message;
            return;
        }
        for (int k = 0; k < p - 1; ++k) {
            const int c = me - k - 1;  // the chunk arriving now
            if (!step(out_message, in_message)) continue;
            const allreduce::block b = chunk(c);
            float* acc = s.accumulator.data() + b.offset;
            const std::uint8_t code = detail::attempt(
                [&] {
                    hop.decode(std::span<const std::byte>(in_message), tensor_view<float>(acc, b.count));
                    for (std::size_t i = 0; i < b.count; ++i) acc[i] += mine[b.offset + i];
                    encode_chunk(c, acc, out_message);
                },
                error);
            if (code != detail::encode_ok) fail_here(code);
        }
        // out_message now holds chunk me + 1, fully reduced: all-gather the p final messages.
        const int own = (me + 1) % p;
        s.messages[static_cast<std::size_t>(own)] = out_message;
        for (int k = 0; k < p - 1; ++k) {
            const int send_c = ((me + 1 - k) % p + p) % p, recv_c = ((me - k) % p + p) % p;
            step(s.messages[static_cast<std::size_t>(send_c)], s.messages[static_cast<std::size_t>(recv_c)]);
        }
    });

    if (failure != 0) {
        // Nothing was swapped in, so no rank's state changed; the failing rank rethrows its own error.
        const auto rank = static_cast<int>((failure >> 8) & 0xffffffu);
        const auto code = static_cast<std::uint8_t>(failure & 0xffu);
        if (error) std::rethrow_exception(error);  // this rank failed (perhaps after hearing of another's failure)
        const std::string text =
            hitch::detail::concat(detail::aggregate_who, ": compressed ring: rank ", rank, " could not encode",
                                  code == detail::encode_non_finite ? " (NaN or an infinity)" : "",
                                  "; every rank stops here and no state changed");
        if (code == detail::encode_non_finite) throw non_finite_error(text);
        throw hitch::error(text);
    }
    // Every rank decodes the same p messages.
    for (int c = 0; c < p; ++c) {
        const allreduce::block b = chunk(c);
        hop.decode(std::span<const std::byte>(s.messages[static_cast<std::size_t>(c)]),
                   tensor_view<float>(s.accumulator.data() + b.offset, b.count));
    }
    if constexpr (feedback) std::swap(r_in, r_out);
    if constexpr (requires { hop_state.step; }) ++hop_state.step;
    detail::write_result(s.accumulator, bucket, options.average, p);
    return stats;
}

/// Aggregates `bucket` over the group's ranks with the path Codec's traits select; on return the bucket holds the
/// sum over ranks (options.average: the mean) of what each rank's message delivers.
template <class Schedule = allreduce::automatic, communicator C, compressor Codec, class T>
aggregation_stats aggregate(allreduce::group<C>& g, const Codec& codec, aggregation_state<Codec>& s, tensor_view<T> bucket,
                            const Schedule& schedule = Schedule{}, const aggregate_options& options = {}) {
    static_assert(floating_element<T>, "aggregate: the bucket's elements must be float, double, half or bfloat16");
    constexpr aggregation_path path = aggregation_path_of<Codec>;
    if constexpr (path == aggregation_path::low_rank) return aggregate_low_rank(g, codec, s, bucket, schedule, options);
    else if constexpr (path == aggregation_path::allreduce) return aggregate_allreduce(g, codec, s, bucket, schedule, options);
    else if constexpr (path == aggregation_path::compressed_ring) return aggregate_ring(g, codec, s, bucket, options);
    else return aggregate_allgather(g, codec, s, bucket, options);
}

}  // namespace hitch::compress
