#pragma once
// What every codec shares: the public encode/decode entry points for any floating element type, built on a
// codec's float kernels (float is the fast path; half, bfloat16 and double buckets go through a float buffer),
// the state of codecs without state, and the checks on buckets.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/compress/detail/parallel.hpp"
#include "hitch/compress/tuning.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/core/crc32c.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/tensor.hpp"

namespace hitch::compress {

/// The state of a codec that keeps none: just the bucket size it was made for (checked on load).
struct empty_state {
    std::size_t count = 0;
};

namespace detail {

template <class T>
void require_host(const tensor_view<T>& v, std::string_view who) {
    if (!v.on_host())
        throw config_error(hitch::detail::concat(who, ": the bucket is in ", name(v.space()),
                                                 " memory; the host codecs need host memory"));
}

/// `in` as floats: the span itself for float, else converted into `scratch`.
template <class T>
[[nodiscard]] std::span<const float> as_floats(tensor_view<T> in, std::vector<float>& scratch) {
    using U = std::remove_const_t<T>;
    if constexpr (std::is_same_v<U, float>) {
        return {in.data(), in.size()};
    } else {
        scratch.resize(in.size());
        for (std::size_t i = 0; i < in.size(); ++i) scratch[i] = static_cast<float>(in[i]);
        return scratch;
    }
}

/// Stores float values into a bucket of any floating type: out = v, or out += v (in float arithmetic).
template <bool Add, class T>
void store_floats(std::span<const float> v, tensor_view<T> out) {
    for (std::size_t i = 0; i < v.size(); ++i) {
        if constexpr (Add)
            out[i] = T(static_cast<float>(out[i]) + v[i]);
        else
            out[i] = T(v[i]);
    }
}

/// Throws non_finite_error for a bucket holding NaN or inf (found by a reduction the codec computes anyway).
[[noreturn]] inline void throw_non_finite(std::string_view who, std::string_view what = "the bucket") {
    throw non_finite_error(hitch::detail::concat(
        who, ": ", what,
        " holds NaN or an infinity; nothing was changed (skip the step, e.g. with the loss scaler, or find the "
        "source)"));
}

template <class T>
inline constexpr bool is_float_v = std::is_same_v<std::remove_const_t<T>, float>;

/// A codec that computes its error-feedback residual in the same pass as its message (see codec_base::encode_ef).
/// (It names the state type as a parameter so that the check waits for the call: a constraint on the class's own
/// parameter alone would be checked, and remembered, while the codec is still incomplete.)
template <class Derived, class State>
concept has_fused_residual = requires(const Derived& d, std::span<const float> in, std::span<const float> r_in,
                                      std::span<float> r_out, State& s, std::vector<std::byte>& bytes, dtype type) {
    { d.encode_ef_floats(in, r_in, r_out, s, bytes, type) } -> std::convertible_to<std::size_t>;
};

/// The public encode / decode / decode_add of a codec, for every floating element type. Derived provides
///   static constexpr std::uint8_t codec_id; static constexpr std::string_view who;
///   std::size_t encode_floats(std::span<const float>, state&, std::vector<std::byte>&, dtype) const;
///   template <bool Add> void decode_floats(const wire::message_view&, std::span<float>) const;
template <class Derived>
class codec_base {
public:
    /// Encodes `in` into `bytes` (resized to the message) and returns the message's size in bytes.
    template <class T, class State>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode(tensor_view<T> in, State& state, std::vector<std::byte>& bytes) const {
        require_host(in, Derived::who);
        check_state_size(state, in.size());
        std::vector<float> scratch;
        return self().encode_floats(as_floats(in, scratch), state, bytes, dtype_of<std::remove_const_t<T>>());
    }

    /// Encodes v = g + r_in and writes r_out = v - D(message) in the same pass (error feedback, and the compressed
    /// ring's hops). r_out must not overlap r_in; it is unspecified when the encode throws.
    template <class T, class State>
        requires(floating_element<std::remove_const_t<T>> && has_fused_residual<Derived, State>)
    std::size_t encode_ef(tensor_view<T> g, std::span<const float> r_in, std::span<float> r_out, State& state,
                          std::vector<std::byte>& bytes) const {
        require_host(g, Derived::who);
        check_state_size(state, g.size());
        if (r_in.size() != g.size() || r_out.size() != g.size())
            throw config_error(hitch::detail::concat(Derived::who, ": residuals of ", r_in.size(), " and ",
                                                     r_out.size(), " elements for a bucket of ", g.size()));
        std::vector<float> scratch;
        return self().encode_ef_floats(as_floats(g, scratch), r_in, r_out, state, bytes,
                                       dtype_of<std::remove_const_t<T>>());
    }

    /// out = the decoded message.
    template <class T>
        requires floating_element<T>
    void decode(std::span<const std::byte> bytes, tensor_view<T> out) const {
        decode_any<false>(bytes, out);
    }
    /// acc += the decoded message.
    template <class T>
        requires floating_element<T>
    void decode_add(std::span<const std::byte> bytes, tensor_view<T> acc) const {
        decode_any<true>(bytes, acc);
    }

protected:
    template <bool Add, class T>
    void decode_any(std::span<const std::byte> bytes, tensor_view<T> out) const {
        require_host(out, Derived::who);
        const wire::message_view m = wire::open(bytes, {Derived::who, Derived::codec_id});
        wire::expect_count(m, out.size(), Derived::who);
        if constexpr (std::is_same_v<T, float>) {
            self().template decode_floats<Add>(m, std::span<float>(out.data(), out.size()));
        } else {
            std::vector<float> scratch(out.size());
            self().template decode_floats<false>(m, scratch);
            store_floats<Add>(scratch, out);
        }
    }

    template <class State>
    static void check_state_size(const State& state, std::size_t n) {
        if constexpr (requires { state.count; }) {
            if (state.count != n)
                throw config_error(hitch::detail::concat(Derived::who, ": the state was made for a bucket of ",
                                                         state.count, " elements, the bucket has ", n));
        }
    }

    [[nodiscard]] const Derived& self() const noexcept { return static_cast<const Derived&>(*this); }
};

/// Saves / loads the state of a codec without state (only the size travels, and is checked).
template <std::uint8_t Id>
void save_empty_state(const empty_state& s, std::vector<std::byte>& blob) {
    wire::seal_state(blob, Id, s.count, {});
}
template <std::uint8_t Id>
void load_empty_state(std::span<const std::byte> blob, empty_state& s, std::string_view who) {
    const wire::message_view m = wire::open_state(blob, Id, s.count, who);
    if (!m.payload.empty()) wire::corrupt(who, "a state blob of a stateless codec carries a payload");
}

/// Runs convert(begin, end) -> bool (false: a non-finite result) over [0, n) in chunks of the plan, each writing
/// `width` bytes per element at out + width * begin, and checksums every block of output while it is in cache.
/// Returns whether all results were finite and the payload's raw CRC32C (state from zero, chunks combined in
/// order). Used by the element-wise codecs, whose payload is exactly their converted elements.
template <class Convert>
std::pair<bool, std::uint32_t> convert_and_checksum(std::size_t n, std::size_t width, std::byte* out,
                                                    const parallelism& how, Convert&& convert) {
    constexpr std::size_t block = tuning::checksum_block;
    const chunk_plan plan = plan_chunks(n, block, how);
    std::vector<std::uint32_t> raw(plan.count, 0);
    std::vector<unsigned char> finite(plan.count, 1);
    run_chunks(plan, [&](std::size_t c, std::size_t begin, std::size_t end) {
        std::uint32_t crc = 0;
        bool ok = true;
        for (std::size_t b = begin; b < end; b += block) {
            const std::size_t e = std::min(end, b + block);
            ok = convert(b, e) && ok;
            crc = crc32c_update(crc, std::span<const std::byte>(out + width * b, width * (e - b)));
        }
        raw[c] = crc;
        finite[c] = ok ? 1 : 0;
    });
    std::uint32_t total = raw[0];
    bool ok = finite[0] != 0;
    for (std::size_t c = 1; c < plan.count; ++c) {
        const auto [b, e] = plan.chunk(c);
        total = crc32c_shift_bytes(total, width * (e - b)) ^ raw[c];
        ok = ok && finite[c] != 0;
    }
    return {ok, total};
}

/// The raw CRC32C of a payload written chunk by chunk (one chunk per plan chunk, each chunk's bytes contiguous and
/// the chunks in order): each chunk checksums its bytes while they are in cache, a few KiB at a time (pieces too
/// short for the checksum's three interleaved streams are joined first), then the states are combined.
class chunk_checksums {
public:
    explicit chunk_checksums(std::size_t chunks) : chunks_(chunks) {}
    /// Appends [p, p + n) to chunk c's bytes (called by chunk c's thread only, its pieces in order).
    void add(std::size_t c, const std::byte* p, std::size_t n) {
        chunk& x = chunks_[c];
        if (x.end != p) x.flush();  // not contiguous with what is pending
        if (x.begin == nullptr || x.begin == x.end) x.begin = p;
        x.end = p + n;
        if (static_cast<std::size_t>(x.end - x.begin) >= batch_bytes) x.flush();
    }
    /// The raw state (from zero) of `head` followed by every chunk's bytes.
    [[nodiscard]] std::uint32_t combined(std::span<const std::byte> head = {}) {
        std::uint32_t total = crc32c_update(0, head);
        for (chunk& x : chunks_) {
            x.flush();
            total = crc32c_shift_bytes(total, x.bytes) ^ x.raw;
        }
        return total;
    }

private:
    static constexpr std::size_t batch_bytes = 4 * hitch::detail::crc32c_stream_bytes;
    struct chunk {
        std::uint32_t raw = 0;
        std::size_t bytes = 0;
        const std::byte* begin = nullptr;
        const std::byte* end = nullptr;
        void flush() {
            if (begin == end) return;
            const auto n = static_cast<std::size_t>(end - begin);
            raw = crc32c_update(raw, std::span<const std::byte>(begin, n));
            bytes += n;
            begin = end;
        }
    };
    std::vector<chunk> chunks_;
};

/// State blobs of codecs whose state is a few counters (steps, streams): the counters as u64, in order.
template <std::size_t N>
void save_counters(std::uint8_t codec, std::size_t count, const std::array<std::uint64_t, N>& values,
                   std::vector<std::byte>& blob) {
    std::vector<std::byte> body;
    for (std::uint64_t v : values) wire::put_scalar<std::uint64_t>(body, v);
    wire::seal_state(blob, codec, count, body);
}
template <std::size_t N>
[[nodiscard]] std::array<std::uint64_t, N> load_counters(std::span<const std::byte> blob, std::uint8_t codec,
                                                         std::size_t count, std::string_view who,
                                                         const std::array<std::string_view, N>& names) {
    const wire::message_view m = wire::open_state(blob, codec, count, who);
    wire::reader r(m.payload, who);
    std::array<std::uint64_t, N> values{};
    for (std::size_t k = 0; k < N; ++k) values[k] = r.get<std::uint64_t>(names[k]);
    r.expect_end();
    return values;
}

/// Takes back an encode's step (codecs whose only state change per encode is their step counter).
template <class State>
void step_back(State& s) noexcept {
    if (s.step > 0) --s.step;
}

/// ceil(a / b) for b > 0.
[[nodiscard]] constexpr std::size_t ceil_div(std::size_t a, std::size_t b) noexcept { return a / b + (a % b != 0); }

}  // namespace detail
}  // namespace hitch::compress
