#pragma once
// compress::threshold: threshold quantisation (Strom 2015, "Scalable distributed DNN training using commodity GPU
// cloud computing"). Elements whose magnitude reaches tau are sent as +tau or -tau with their index; everything else
// stays behind:
//
//   sent_i = sign(v_i) tau   if |v_i| >= tau,   else nothing;   r_i = v_i - sent_i   (with error feedback)
//
// Strom keeps r as the residual and adds it to the next gradient, so large updates go out over several steps:
// use error_feedback<threshold> for the paper's algorithm. Indices are coded compactly: the gap to the previous
// index, with the sign in its lowest bit, as a variable-length integer (most gaps fit one or two bytes, where
// Strom's packed 32-bit words take four).
//
// Bytes on the wire: 32 + 12 + sum over sent elements of varint_size(gap << 1 | sign), where gap is the index for
// the first element and (index - previous index - 1) after it.
// Payload: u64 count | f32 tau | count varints.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/sparse.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/options.hpp"

namespace hitch::compress {

struct threshold_options {
    /// The magnitude at which an element is sent (Strom 2015 uses tau = 2 to 15 for his speech models; pick it for
    /// the scale of your gradients).
    float tau = 1e-3f;
    /// Threads one bucket's encode may use (the message does not depend on it).
    parallelism parallel{};

    void validate() const {
        option_validator("hitch::compress::threshold_options").open("tau", tau, 0.0f, 3.0e38f);
        parallel.validate("hitch::compress::threshold_options");
    }
};

/// Strom's threshold quantisation: send +-tau where |v| >= tau.
class threshold : public detail::codec_base<threshold> {
public:
    static constexpr std::uint8_t codec_id = codec_ids::threshold;
    static constexpr std::string_view name = "threshold";
    static constexpr std::string_view who = "hitch::compress::threshold";
    static constexpr bool additive = false;
    static constexpr bool needs_error_feedback = true;
    static constexpr bool ring_compressible = false;

    using options_type = threshold_options;
    struct state {
        std::size_t count = 0;
        detail::sparse_selection selection;  // workspace
    };

    threshold() = default;
    explicit threshold(options_type o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] state make_state(std::size_t count) const { return {count, {}}; }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept {
        return wire::header_bytes + 12 + n * wire::varint_size(2 * static_cast<std::uint64_t>(n) + 1);
    }

    std::size_t encode_floats(std::span<const float> in, state& s, std::vector<std::byte>& bytes, dtype type) const {
        bool finite = true;
        detail::collect_at_least_parallel(in.data(), in.size(), options_.tau, s.selection, finite, options_.parallel);
        if (!finite) detail::throw_non_finite(who);
        return write(s.selection, in.size(), bytes, type);
    }

    /// Encodes v = g + r_in; r_out = v with the sent elements reduced by +-tau.
    std::size_t encode_ef_floats(std::span<const float> g, std::span<const float> r_in, std::span<float> r_out,
                                 state& s, std::vector<std::byte>& bytes, dtype type) const {
        detail::for_chunks(g.size(), 4096, options_.parallel, [&](std::size_t lo, std::size_t hi) {
            for (std::size_t i = lo; i < hi; ++i) r_out[i] = g[i] + r_in[i];
        });
        bool finite = true;
        detail::collect_at_least_parallel(r_out.data(), r_out.size(), options_.tau, s.selection, finite,
                                          options_.parallel);
        if (!finite) detail::throw_non_finite(who, "the bucket plus its residual");
        const std::size_t size = write(s.selection, g.size(), bytes, type);
        for (std::size_t j = 0; j < s.selection.size(); ++j) {
            float& r = r_out[s.selection.index[j]];
            r -= std::signbit(r) ? -options_.tau : options_.tau;
        }
        return size;
    }

    template <bool Add>
    void decode_floats(const wire::message_view& m, std::span<float> out) const {
        const std::size_t n = out.size();
        wire::reader r(m.payload, who);
        const std::uint64_t count = r.count("sent count", n);
        const float tau = r.get<float>("tau");
        if (!(tau > 0.0f) || !std::isfinite(tau))
            r.fail(hitch::detail::concat("tau ", tau, " is not positive and finite"));
        const auto rest = r.rest();
        if (count > rest.size())
            r.fail(hitch::detail::concat("truncated: ", count, " indices in ", rest.size(), " bytes"));
        // Parse and check everything before touching `out`.
        std::vector<std::uint64_t> index(static_cast<std::size_t>(count));
        std::vector<std::uint8_t> negative(static_cast<std::size_t>(count));
        wire::varint_reader vr(rest.data(), rest.data() + rest.size(), who);
        std::uint64_t next = 0;
        for (std::size_t j = 0; j < count; ++j) {
            const std::uint64_t code = vr.next();
            const std::uint64_t gap = code >> 1;
            if (gap >= n || next + gap >= n)
                r.fail(hitch::detail::concat("index of entry ", j, " is outside the bucket of ", n, " elements"));
            index[j] = next + gap;
            negative[j] = static_cast<std::uint8_t>(code & 1u);
            next = index[j] + 1;
        }
        if (!vr.done())
            r.fail(hitch::detail::concat(rest.data() + rest.size() - vr.position(),
                                         " unexpected bytes after the indices"));
        if constexpr (!Add) std::fill(out.begin(), out.end(), 0.0f);
        for (std::size_t j = 0; j < count; ++j) out[index[j]] += negative[j] ? -tau : tau;
    }

    /// Exact message size for a known selection (for the tests and the benchmark's accounting).
    [[nodiscard]] static std::size_t message_bytes(const detail::sparse_selection& sel) {
        std::size_t bytes = wire::header_bytes + 12;
        std::uint64_t prev = 0;
        for (std::size_t j = 0; j < sel.size(); ++j) {
            const std::uint64_t gap = j == 0 ? sel.index[j] : sel.index[j] - prev - 1;
            bytes += wire::varint_size(gap << 1 | static_cast<std::uint64_t>(std::signbit(sel.value[j])));
            prev = sel.index[j];
        }
        return bytes;
    }

    void save_state(const state& s, std::vector<std::byte>& blob) const {
        detail::save_empty_state<codec_id>(empty_state{s.count}, blob);
    }
    void load_state(std::span<const std::byte> blob, state& s) const {
        empty_state e{s.count};
        detail::load_empty_state<codec_id>(blob, e, who);
    }

private:
    std::size_t write(const detail::sparse_selection& sel, std::size_t n, std::vector<std::byte>& bytes,
                      dtype type) const {
        const std::size_t payload = message_bytes(sel) - wire::header_bytes;
        wire::writer w(bytes, codec_id, type, n, payload);
        std::byte* p = w.payload();
        wire::store_le<std::uint64_t>(p, sel.size());
        wire::store_le(p + 8, options_.tau);
        p += 12;
        std::uint64_t prev = 0;
        for (std::size_t j = 0; j < sel.size(); ++j) {
            const std::uint64_t gap = j == 0 ? sel.index[j] : sel.index[j] - prev - 1;
            p = wire::put_varint(p, gap << 1 | static_cast<std::uint64_t>(std::signbit(sel.value[j])));
            prev = sel.index[j];
        }
        return w.finish(payload);
    }

    options_type options_{};
};

static_assert(compressor<threshold>, "compress::threshold must model hitch::compressor");
static_assert(residual_compressor<threshold>, "compress::threshold must model hitch::residual_compressor");

}  // namespace hitch::compress
