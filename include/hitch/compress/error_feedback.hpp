#pragma once
// compress::error_feedback<Codec>: keeps, per bucket, the residual r of what the codec did not send and adds it to
// the next gradient (Seide et al. 2014; Strom 2015; Karimireddy et al. 2019, "Error feedback fixes SignSGD"):
//
//   v_t = g_t + r_{t-1};   send m_t = C(v_t);   r_t = v_t - D(m_t)
//
// so nothing is lost, only delayed: over T steps, sum_t D(m_t) + r_T = sum_t g_t (up to float rounding). The wire
// format is the inner codec's (same codec id); the traits are its own except needs_error_feedback.
//
// The residual is double-buffered: the new one is written beside the old and swapped in only when the encode
// succeeds, so a refused bucket (non_finite_error) leaves the state exactly as it was. Codecs that model
// hitch::residual_compressor compute the residual in the same pass as the message; others are decoded back.
//
// The residual saves to a versioned, checksummed blob (save_state / load_state) with the inner codec's state
// nested in it, for checkpoints next to the optimizer's state.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/fixed_string.hpp"

namespace hitch::compress {

namespace detail {

/// Codecs whose algorithm already accumulates what it did not send (DGC's velocity, PowerSGD's error) declare
/// `static constexpr bool own_error_feedback = true`.
template <class Codec>
inline constexpr bool has_own_error_feedback = [] {
    if constexpr (requires { Codec::own_error_feedback; })
        return static_cast<bool>(Codec::own_error_feedback);
    else
        return false;
}();

/// Codec::summable_t<T> where the codec has one (named lazily, so codecs without it can still be wrapped).
template <class Codec, class T>
struct summable_of {};
template <class Codec, class T>
    requires requires { typename Codec::template summable_t<T>; }
struct summable_of<Codec, T> {
    using type = typename Codec::template summable_t<T>;
};

inline constexpr std::string_view ef_prefix = "ef_";

/// "ef_" followed by Codec::name, in static storage (what join_names<ef_prefix, Codec::name> gives, spelled without
/// a reference template argument naming a member of Codec, which nvcc's front end cannot pass on: a .cu file that
/// includes this header then compiles too).
template <class Codec>
struct ef_name {
    static constexpr std::size_t size = ef_prefix.size() + Codec::name.size();
    static constexpr fixed_string<size> value = [] {
        fixed_string<size> out{};
        std::size_t at = 0;
        for (const char c : ef_prefix) out.chars[at++] = c;
        for (const char c : Codec::name) out.chars[at++] = c;
        return out;
    }();
};

}  // namespace detail

/// Wraps any codec with a per-bucket residual (error feedback).
template <class Codec>
class error_feedback {
    static_assert(check_compressor<Codec>());
    static_assert(!detail::has_own_error_feedback<Codec>,
                  "error_feedback<Codec>: this codec already keeps its own residual (DGC's accumulated velocity, "
                  "PowerSGD's error); wrapping it would count the residual twice");

public:
    using inner_codec = Codec;
    using options_type = typename Codec::options_type;
    static constexpr std::uint8_t codec_id = Codec::codec_id;
    static constexpr std::string_view name = detail::ef_name<Codec>::value.view();
    static constexpr std::string_view who = "hitch::compress::error_feedback";
    static constexpr bool additive = Codec::additive;
    static constexpr bool needs_error_feedback = false;
    static constexpr bool ring_compressible = Codec::ring_compressible;

    struct state {
        typename Codec::state inner;
        std::vector<float> residual;  // r_{t-1}: what earlier steps did not send
        std::vector<float> next;      // where the encode writes r_t before it is swapped in
        std::vector<float> decoded;   // for codecs that cannot report their residual
        std::size_t count = 0;
    };
    template <class T>
    using summable_t = typename detail::summable_of<Codec, T>::type;

    error_feedback() = default;
    explicit error_feedback(Codec codec) : codec_(std::move(codec)) {}
    explicit error_feedback(const options_type& o) : codec_(o) {}
    [[nodiscard]] const options_type& options() const noexcept { return codec_.options(); }

    [[nodiscard]] const Codec& inner() const noexcept { return codec_; }

    [[nodiscard]] state make_state(std::size_t count) const {
        state s{codec_.make_state(count), std::vector<float>(count, 0.0f), std::vector<float>(count, 0.0f), {}, count};
        return s;
    }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const { return codec_.max_message_bytes(n); }

    /// Encodes g + r and keeps the new residual. Returns the message size in bytes.
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode(tensor_view<T> g, state& s, std::vector<std::byte>& bytes) const {
        check(s, g.size());
        std::size_t size = 0;
        if constexpr (residual_compressor<Codec>) {
            size = codec_.encode_ef(g, std::span<const float>(s.residual), std::span<float>(s.next), s.inner, bytes);
        } else {
            add_residual(g, s);
            size = codec_.encode(tensor_view<const float>(s.next.data(), s.next.size()), s.inner, bytes);
            s.decoded.resize(s.count);
            codec_.decode(std::span<const std::byte>(bytes), tensor_view<float>(s.decoded.data(), s.count));
            for (std::size_t i = 0; i < s.count; ++i) s.next[i] -= s.decoded[i];
        }
        std::swap(s.residual, s.next);
        return size;
    }

    template <class T>
        requires floating_element<T>
    void decode(std::span<const std::byte> bytes, tensor_view<T> out) const {
        codec_.decode(bytes, out);
    }
    template <class T>
        requires floating_element<T>
    void decode_add(std::span<const std::byte> bytes, tensor_view<T> acc) const {
        codec_.decode_add(bytes, acc);
    }

    // Additive form (when the inner codec has one): the residual is what the summable encoding lost locally.
    [[nodiscard]] std::size_t summable_count(const state& s, std::size_t n) const
        requires summable_compressor<Codec>
    {
        return codec_.summable_count(s.inner, n);
    }
    template <class T, class S>
        requires summable_compressor<Codec>
    void encode_summable(tensor_view<T> g, state& s, std::span<S> out) const {
        check(s, g.size());
        add_residual(g, s);
        codec_.encode_summable(tensor_view<const float>(s.next.data(), s.count), s.inner, out);
        s.decoded.resize(s.count);
        codec_.decode_summed(std::span<const S>(out.data(), out.size()), s.inner,
                             tensor_view<float>(s.decoded.data(), s.count));
        for (std::size_t i = 0; i < s.count; ++i) s.next[i] -= s.decoded[i];
        std::swap(s.residual, s.next);
    }
    template <class S, class T>
        requires summable_compressor<Codec>
    void decode_summed(std::span<const S> sum, const state& s, tensor_view<T> out) const {
        codec_.decode_summed(sum, s.inner, out);
    }

    /// Takes back the last successful encode (the aggregation calls it when another rank failed, so the exchange
    /// delivered nothing): the previous residual, still beside the current one, is swapped back in.
    void undo(state& s) const {
        std::swap(s.residual, s.next);
        if constexpr (requires { codec_.undo(s.inner); }) codec_.undo(s.inner);
    }

    /// Blob payload: u64 n, n floats of residual, u64 length of the inner codec's blob, that blob.
    void save_state(const state& s, std::vector<std::byte>& blob) const {
        std::vector<std::byte> body;
        wire::put_scalar<std::uint64_t>(body, s.count);
        wire::put_floats(body, s.residual);
        std::vector<std::byte> inner;
        codec_.save_state(s.inner, inner);
        wire::put_scalar<std::uint64_t>(body, inner.size());
        body.insert(body.end(), inner.begin(), inner.end());
        wire::seal_state(blob, codec_id, s.count, body, wire::flag_error_feedback);
    }
    void load_state(std::span<const std::byte> blob, state& s) const {
        const wire::message_view m = wire::open_state(blob, codec_id, s.count, who, wire::flag_error_feedback);
        wire::reader r(m.payload, who);
        const std::uint64_t n = r.count("residual length", s.count);
        if (n != s.count) r.fail(hitch::detail::concat("residual of ", n, " elements for a bucket of ", s.count));
        std::vector<float> residual;
        wire::get_floats(r, residual, n, "residual");
        const std::uint64_t inner_size = r.count("inner state length", r.remaining());
        const auto inner_blob = r.take(inner_size, "inner state");
        r.expect_end();
        for (float x : residual)
            if (!std::isfinite(x)) r.fail("the saved residual holds NaN or an infinity");
        typename Codec::state inner = codec_.make_state(s.count);
        codec_.load_state(inner_blob, inner);
        s.inner = std::move(inner);
        s.residual = std::move(residual);
        s.next.assign(s.count, 0.0f);
    }

private:
    void check(const state& s, std::size_t n) const {
        if (s.count != n || s.residual.size() != n || s.next.size() != n)
            throw config_error(hitch::detail::concat(who, ": the state was made for a bucket of ", s.count,
                                                     " elements, the bucket has ", n));
    }
    /// next = g + residual, refusing non-finite values before anything changes.
    template <class T>
    void add_residual(tensor_view<T> g, state& s) const {
        detail::require_host(g, who);
        bool finite = true;
        for (std::size_t i = 0; i < s.count; ++i) {
            s.next[i] = static_cast<float>(g[i]) + s.residual[i];
            finite = finite && std::isfinite(s.next[i]);
        }
        if (!finite) detail::throw_non_finite(who, "the bucket plus its residual");
    }

    Codec codec_{};
};

static_assert(compressor<error_feedback<none>>, "compress::error_feedback<none> must model hitch::compressor");
static_assert(summable_compressor<error_feedback<none>>,
              "compress::error_feedback of an additive codec must model hitch::summable_compressor");

}  // namespace hitch::compress
