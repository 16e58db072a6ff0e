#pragma once
// What the compressed exchanges that re-encode in transit share (the ring, halving-doubling, hierarchical): the
// codec, state and residual each hop encodes with; a fresh hop state per encoded range, seeded per call; the
// failure protocol, where a rank's status travels in the size words that precede every payload; the link that
// sends sizes then payloads; the call's descriptor; and the compression-aware ring over a list of participating
// ranks.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/partition.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/aggregation.hpp"
#include "hitch/exchange/detail/bucket.hpp"
#include "hitch/exchange/detail/encode_failure.hpp"

namespace hitch::compress::detail {

/// The codec that encodes at the hops (the inner codec of error_feedback<X>), its persistent state, and the
/// residual the hops read (r_in) and write (r_out): error_feedback's own, else the aggregation state's.
template <class Codec>
struct hops {
    using codec_type = typename ring_codec<Codec>::type;
    using state_type = typename codec_type::state;
    static constexpr bool feedback = ring_hop_feedback<Codec>;

    const codec_type& codec;
    state_type& state;
    std::vector<float>& r_in;
    std::vector<float>& r_out;

    /// A state for encodes of `count` elements (codecs check the state's size), its random numbers seeded by the
    /// call (state.step), the range (`index` of `per_call`) and the stream (a rank or ring position).
    [[nodiscard]] state_type state_for(std::size_t count, std::uint64_t per_call, std::uint64_t index,
                                       int stream) const {
        state_type s = codec.make_state(count);
        if constexpr (requires { s.step; }) s.step = state.step * per_call + index;
        set_stream(s, stream);
        return s;
    }
    /// Encodes `values` (elements [b.offset, b.offset + b.count) of the bucket), with the hop residual where the
    /// codec needs one.
    std::size_t encode(const float* values, allreduce::block b, state_type& s, std::vector<std::byte>& out) const {
        if constexpr (feedback)
            return codec.encode_ef(tensor_view<const float>(values, b.count),
                                   std::span<const float>(r_in.data() + b.offset, b.count),
                                   std::span<float>(r_out.data() + b.offset, b.count), s, out);
        else
            return codec.encode(tensor_view<const float>(values, b.count), s, out);
    }
    void decode(std::span<const std::byte> message, float* out, std::size_t count) const {
        codec.decode(message, tensor_view<float>(out, count));
    }
    /// After a successful call: the new residual replaces the old (on ranks that encoded every element), and the
    /// next call draws fresh random numbers.
    void finish(bool encoded) const {
        if constexpr (feedback)
            if (encoded) std::swap(r_in, r_out);
        if constexpr (requires { state.step; }) ++state.step;
    }
};

template <class Codec>
[[nodiscard]] hops<Codec> hops_of(const Codec& codec, aggregation_state<Codec>& s) {
    using hop_codec_t = typename ring_codec<Codec>::type;
    static_assert(!ring_hop_feedback<Codec> || residual_compressor<hop_codec_t>,
                  "aggregate: a codec that needs error feedback re-encodes at every hop with a residual: it (or the "
                  "codec inside error_feedback) must model hitch::residual_compressor (encode_ef)");
    if constexpr (is_error_feedback<Codec>::value)
        return {codec.inner(), s.codec.inner, s.codec.residual, s.codec.next};
    else
        return {codec, s.codec, s.ring_residual, s.ring_next};
}

/// Decodes messages[c] into block c of `parts` blocks of `out`: every rank decodes the same messages.
template <class Codec>
void decode_blocks(const hops<Codec>& h, const std::vector<std::vector<std::byte>>& messages, int parts,
                   std::span<float> out) {
    for (int c = 0; c < parts; ++c) {
        const allreduce::block b = allreduce::partition(out.size(), parts, c);
        h.decode(std::span<const std::byte>(messages[static_cast<std::size_t>(c)]), out.data() + b.offset, b.count);
    }
}

/// The descriptor every compressed exchange checks across ranks: an all-reduce of n elements of T, the codec and
/// bucket size in the fingerprint, and the exchange's name as the schedule.
template <class HopCodec>
[[nodiscard]] allreduce::call_options compressed_call(const aggregate_options& options, std::size_t n,
                                                      std::uint64_t extra = 0) {
    allreduce::call_options call = options.call;
    call.fingerprint ^= 0x2545f4914f6cdd1dull * (n + 1) ^ static_cast<std::uint64_t>(HopCodec::codec_id) ^ extra;
    return call;
}

/// This rank's status in an exchange and the first failure it heard of. A failure travels in place of the size
/// words (abort_flag | rank << 8 | code); a rank that knows of one still takes every step, without payloads, so
/// every rank hears of it, and nothing is swapped in: no state changes anywhere.
class exchange_status {
public:
    static constexpr std::uint64_t abort_flag = std::uint64_t{1} << 63;

    explicit exchange_status(int rank) : rank_(rank) {}

    /// Runs f(); an exception becomes this rank's failure (kept to rethrow). True when it succeeded.
    template <class F>
    bool attempt(F&& f) {
        const std::uint8_t code = detail::attempt(std::forward<F>(f), error_);
        if (code != encode_ok && failure_ == 0) failure_ = abort_flag | static_cast<std::uint64_t>(rank_) << 8 | code;
        return code == encode_ok;
    }
    /// Takes in a word a peer sent: true for a size, false for a failure (the first one heard is kept).
    bool hear(std::uint64_t word) {
        if ((word & abort_flag) == 0) return true;
        if (failure_ == 0) failure_ = word;
        return false;
    }
    [[nodiscard]] bool ok() const noexcept { return failure_ == 0; }
    /// What to send in place of `size`.
    [[nodiscard]] std::uint64_t word(std::size_t size) const noexcept { return ok() ? size : failure_; }

    /// After the exchange: throws on every rank if any rank failed (the failing rank its own error).
    void throw_if_failed(std::string_view exchange) const {
        if (ok()) return;
        if (error_) std::rethrow_exception(error_);
        const auto rank = static_cast<int>((failure_ >> 8) & 0xffffffu);
        const auto code = static_cast<std::uint8_t>(failure_ & 0xffu);
        const std::string text = hitch::detail::concat(
            aggregate_who, ": ", exchange, ": rank ", rank, " could not encode",
            code == encode_non_finite ? " (NaN or an infinity)" : "", "; every rank stops here and no state changed");
        if (code == encode_non_finite) throw non_finite_error(text);
        throw hitch::error(text);
    }

private:
    int rank_;
    std::uint64_t failure_ = 0;
    std::exception_ptr error_;
};

/// Size words (one per message, channel 0) then the messages (one payload, channel 1) between this rank and its
/// peers of one step, carrying the status (see exchange_status). Counts the bytes this rank sends.
template <class C>
class hop_link {
public:
    hop_link(allreduce::transport<C>& t, exchange_status& status) : t_(t), status_(status) {}

    /// Sends `out` to `to` while receiving in.size() messages from `from` (-1: none). True when the step carried
    /// payloads and no failure is known.
    bool exchange(int to, std::span<const std::vector<std::byte>> out, int from, std::span<std::vector<std::byte>> in) {
        const bool sending = to >= 0 && !out.empty(), receiving = from >= 0 && !in.empty();
        out_words_.clear();
        for (const auto& m : out) out_words_.push_back(status_.word(m.size()));
        in_words_.assign(receiving ? in.size() : 0, 0);
        {
            std::optional<incoming<std::uint64_t>> r;
            if (receiving) r.emplace(t_.receive_into(from, 0, std::span<std::uint64_t>(in_words_)));
            std::optional<outgoing> w;
            if (sending) w.emplace(t_.send(to, 0, std::span<const std::uint64_t>(out_words_)));
            if (r) r->wait(t_.limit());
            if (w) w->wait(t_.limit());
        }
        const bool in_ok = !receiving || status_.hear(in_words_.front());
        const bool out_ok = sending && (out_words_.front() & exchange_status::abort_flag) == 0;
        const std::span<const std::byte> payload = out_ok ? pack(out) : std::span<const std::byte>();
        std::span<std::byte> landing;
        if (receiving && in_ok) {
            if (in.size() == 1) {
                in[0].resize(static_cast<std::size_t>(in_words_[0]));
                landing = in[0];
            } else {
                std::size_t total = 0;
                for (std::uint64_t w : in_words_) total += static_cast<std::size_t>(w);
                packed_in_.resize(total);
                landing = packed_in_;
            }
        }
        std::optional<incoming<std::byte>> r;
        if (receiving && in_ok) r.emplace(t_.receive_into(from, 1, landing));
        std::optional<outgoing> w;
        if (out_ok) {
            w.emplace(t_.send(to, 1, payload));
            sent_bytes_ += payload.size() + 8 * out.size();
        }
        if (r) r->wait(t_.limit());
        if (w) w->wait(t_.limit());
        if (receiving && in_ok && in.size() != 1) {
            std::size_t at = 0;
            for (std::size_t i = 0; i < in.size(); ++i) {
                const auto size = static_cast<std::size_t>(in_words_[i]);
                in[i].assign(packed_in_.begin() + static_cast<std::ptrdiff_t>(at),
                             packed_in_.begin() + static_cast<std::ptrdiff_t>(at + size));
                at += size;
            }
        }
        return in_ok && status_.ok();
    }
    bool send(int to, std::span<const std::vector<std::byte>> out) { return exchange(to, out, -1, {}); }
    bool receive(int from, std::span<std::vector<std::byte>> in) { return exchange(-1, {}, from, in); }

    [[nodiscard]] std::size_t sent_bytes() const noexcept { return sent_bytes_; }
    [[nodiscard]] exchange_status& status() noexcept { return status_; }
    [[nodiscard]] allreduce::transport<C>& transport() noexcept { return t_; }

private:
    using outgoing = typename allreduce::transport<C>::outgoing;
    template <class T>
    using incoming = typename allreduce::transport<C>::template incoming<T>;

    /// One message goes as it is; several as one payload.
    std::span<const std::byte> pack(std::span<const std::vector<std::byte>> out) {
        if (out.size() == 1) return out[0];
        packed_out_.clear();
        for (const auto& m : out) packed_out_.insert(packed_out_.end(), m.begin(), m.end());
        return packed_out_;
    }

    allreduce::transport<C>& t_;
    exchange_status& status_;
    std::vector<std::uint64_t> out_words_, in_words_;
    std::vector<std::byte> packed_out_, packed_in_;
    std::size_t sent_bytes_ = 0;
};

/// One message as a span of one, for hop_link.
[[nodiscard]] inline std::span<std::vector<std::byte>> one(std::vector<std::byte>& m) noexcept { return {&m, 1}; }

/// The compression-aware ring (exchange/compressed_ring.hpp) among `ring` (ranks of the transport, in ring order),
/// this rank at position `pos`: `mine` (the bucket's n values) is cut into ring.size() chunks; afterwards
/// messages[c] holds chunk c's final message on every participant. `acc` (n floats) is workspace. Returns the size
/// of this rank's first message.
template <class C, class Codec>
std::size_t ring_among(hop_link<C>& link, const hops<Codec>& h, std::span<const int> ring, int pos,
                       std::span<const float> mine, std::span<float> acc,
                       std::vector<std::vector<std::byte>>& messages) {
    const int q = static_cast<int>(ring.size());
    const std::size_t n = mine.size();
    const int next = ring[static_cast<std::size_t>((pos + 1) % q)];
    const int prev = ring[static_cast<std::size_t>((pos - 1 + q) % q)];
    const auto wrap = [q](int c) { return ((c % q) + q) % q; };
    const auto chunk = [&](int c) { return allreduce::partition(n, q, wrap(c)); };
    std::vector<typename hops<Codec>::state_type> chunk_states;
    for (int c = 0; c < q; ++c)
        chunk_states.push_back(
            h.state_for(chunk(c).count, static_cast<std::uint64_t>(q), static_cast<std::uint64_t>(c), pos));
    const auto encode_chunk = [&](int c, const float* values, std::vector<std::byte>& out) {
        h.encode(values, chunk(c), chunk_states[static_cast<std::size_t>(wrap(c))], out);
    };
    messages.resize(static_cast<std::size_t>(q));
    exchange_status& status = link.status();
    std::vector<std::byte> out_message, in_message;

    // Reduce-scatter: the first message is this rank's own chunk `pos`.
    if (status.ok()) status.attempt([&] { encode_chunk(pos, mine.data() + chunk(pos).offset, out_message); });
    const std::size_t first = out_message.size();
    for (int k = 0; k < q - 1; ++k) {
        const int c = pos - k - 1;  // the chunk arriving now
        if (!link.exchange(next, one(out_message), prev, one(in_message))) continue;
        const allreduce::block b = chunk(c);
        float* a = acc.data() + b.offset;
        status.attempt([&] {
            h.decode(std::span<const std::byte>(in_message), a, b.count);
            for (std::size_t i = 0; i < b.count; ++i) a[i] += mine[b.offset + i];
            encode_chunk(c, a, out_message);
        });
    }
    // out_message now holds chunk pos + 1, fully reduced: all-gather the q final messages.
    messages[static_cast<std::size_t>(wrap(pos + 1))] = out_message;
    for (int k = 0; k < q - 1; ++k) {
        const int send_c = wrap(pos + 1 - k), recv_c = wrap(pos - k);
        link.exchange(next, one(messages[static_cast<std::size_t>(send_c)]), prev,
                      one(messages[static_cast<std::size_t>(recv_c)]));
    }
    return first;
}

}  // namespace hitch::compress::detail
