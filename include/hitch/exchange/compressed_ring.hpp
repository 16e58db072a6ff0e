#pragma once
// The compression-aware ring of the compressed exchange (onebit, qsgd, terngrad and their error_feedback).
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

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/partition.hpp"
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

namespace hitch::compress {

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
        if constexpr (wrapped)
            return codec.inner();
        else
            return codec;
    }();
    auto& hop_state = [&]() -> typename hop_codec_t::state& {
        if constexpr (wrapped)
            return s.codec.inner;
        else
            return s.codec;
    }();
    std::vector<float>& r_in = [&]() -> std::vector<float>& {
        if constexpr (wrapped)
            return s.codec.residual;
        else
            return s.ring_residual;
    }();
    std::vector<float>& r_out = [&]() -> std::vector<float>& {
        if constexpr (wrapped)
            return s.codec.next;
        else
            return s.ring_next;
    }();
    detail::set_stream(hop_state, g.rank());
    const std::span<float> mine = detail::float_view(bucket, s.scratch);
    const std::size_t n = s.count;
    const int p = g.size(), me = g.rank();
    const auto next = (me + 1) % p, prev = (me - 1 + p) % p;
    s.messages.resize(static_cast<std::size_t>(p));
    s.accumulator.resize(n);
    aggregation_stats stats{aggregation_path::compressed_ring, exchange_kind::compressed_ring, 0, 0};

    // A hop state for chunk-sized encodes: codecs check the state's size, so each chunk gets its own.
    std::vector<typename hop_codec_t::state> chunk_states;
    for (int c = 0; c < p; ++c) {
        chunk_states.push_back(hop.make_state(allreduce::partition(n, p, c).count));
        if constexpr (requires { hop_state.step; })
            chunk_states.back().step = hop_state.step * static_cast<std::uint64_t>(p) + static_cast<std::uint64_t>(c);
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
        else
            return hop.encode(tensor_view<const float>(values, b.count), cs, out);
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
            const std::uint8_t code =
                detail::attempt([&] { encode_chunk(me, mine.data() + chunk(me).offset, out_message); }, error);
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

}  // namespace hitch::compress
