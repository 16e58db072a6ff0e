#pragma once
// compress::topk: top-k sparsification. The k = round(density n) elements of largest magnitude are sent with their
// values and indices; the rest are dropped (kept, with error feedback: error_feedback<topk>, the scheme of
// Aji and Heafield 2017 and Stich, Cordonnier and Jaggi 2018).
//
// Two selection methods give the same elements:
//   exact    the k-th largest magnitude by std::nth_element over a copy of |v|, then one collecting pass;
//   sampled  (default) DGC's sampled threshold (Lin et al. 2018): the threshold is estimated from a seeded random
//            sample of |v|, one vectorised pass collects everything above it, and an exact selection among those few
//            finishes the job; see compress/detail/sparse.hpp. No full selection over the bucket.
// Ties at the k-th magnitude go to the lowest indices, so both methods, and every rank, agree.
//
// Bytes on the wire: 32 + 8 + 4k + sum of varint_size(gap), gap = first index, then index - previous - 1.
// Payload: u64 k | k x f32 values | k varints.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/sparse.hpp"
#include "hitch/compress/tuning.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/options.hpp"

namespace hitch::compress {

enum class topk_method : std::uint8_t { sampled, exact };

struct topk_options {
    /// Fraction of the bucket sent: k = round(density n), at least 1 for a non-empty bucket.
    double density = 0.01;
    topk_method method = topk_method::sampled;
    /// Sampled method: fraction of the bucket sampled to estimate the threshold (DGC: 0.1% to 1%) ...
    double sample_fraction = tuning::topk_sample_fraction;
    /// ... and never fewer than this many samples.
    std::size_t min_sample = tuning::topk_min_sample;
    /// Seed of the samples (the selection itself does not depend on it; only how fast it is found).
    std::uint64_t seed = 0x70b4c0de;

    void validate() const {
        option_validator("hitch::compress::topk_options")
            .open_closed("density", density, 0.0, 1.0)
            .open_closed("sample_fraction", sample_fraction, 0.0, 1.0)
            .at_least("min_sample", min_sample, std::size_t{16});
    }
};

namespace detail {

/// k for a bucket of n elements at `density`.
[[nodiscard]] inline std::size_t selected_count(std::size_t n, double density) noexcept {
    if (n == 0) return 0;
    const auto k = static_cast<std::size_t>(std::llround(density * static_cast<double>(n)));
    return std::clamp<std::size_t>(k, 1, n);
}

/// The exact size of a sparse message for a known selection.
[[nodiscard]] inline std::size_t sparse_message_bytes(const sparse_selection& sel) {
    return wire::header_bytes + sparse_payload_bytes(sel);
}

}  // namespace detail

/// Top-k sparsification by magnitude, exact or with DGC's sampled threshold.
class topk : public detail::codec_base<topk> {
public:
    static constexpr std::uint8_t codec_id = codec_ids::topk;
    static constexpr std::string_view name = "topk";
    static constexpr std::string_view who = "hitch::compress::topk";
    static constexpr bool additive = false;
    static constexpr bool needs_error_feedback = true;
    static constexpr bool ring_compressible = false;

    using options_type = topk_options;
    struct state {
        std::size_t count = 0;
        std::uint64_t step = 0;              // advances the sampling seed
        detail::sparse_selection selection;  // workspace: the last selection
        std::vector<float> scratch;          // workspace
        int passes = 0;                      // collecting passes of the last sampled selection (0: exact)
    };

    topk() = default;
    explicit topk(options_type o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] state make_state(std::size_t count) const { return {count, 0, {}, {}, 0}; }
    [[nodiscard]] std::size_t k(std::size_t n) const noexcept { return detail::selected_count(n, options_.density); }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept {
        return wire::header_bytes + 8 + k(n) * (4 + wire::varint_size(n));
    }

    std::size_t encode_floats(std::span<const float> in, state& s, std::vector<std::byte>& bytes, dtype type) const {
        select(in.data(), in.size(), s);
        return write(s.selection, in.size(), bytes, type);
    }

    /// Encodes the top-k of v = g + r_in; r_out = v with the sent elements set to zero.
    std::size_t encode_ef_floats(std::span<const float> g, std::span<const float> r_in, std::span<float> r_out,
                                 state& s, std::vector<std::byte>& bytes, dtype type) const {
        for (std::size_t i = 0; i < g.size(); ++i) r_out[i] = g[i] + r_in[i];
        select(r_out.data(), r_out.size(), s);
        const std::size_t size = write(s.selection, g.size(), bytes, type);
        for (std::uint64_t i : s.selection.index) r_out[i] = 0.0f;
        return size;
    }

    template <bool Add>
    void decode_floats(const wire::message_view& m, std::span<float> out) const {
        detail::sparse_selection sel;
        detail::read_sparse(m.payload, out.size(), who, sel);
        detail::scatter<Add>(sel, out);
    }

    /// Takes back the last encode's step (the aggregation calls it when another rank failed to encode).
    void undo(state& s) const noexcept { detail::step_back(s); }

    /// Blob payload: u64 step.
    void save_state(const state& s, std::vector<std::byte>& blob) const {
        detail::save_counters<1>(codec_id, s.count, {s.step}, blob);
    }
    void load_state(std::span<const std::byte> blob, state& s) const {
        const auto v = detail::load_counters<1>(blob, codec_id, s.count, who, {"step"});
        s.step = v[0];
    }

private:
    void select(const float* v, std::size_t n, state& s) const {
        const std::size_t kk = k(n);
        bool finite = true;
        if (options_.method == topk_method::exact) {
            finite = detail::topk_exact(v, n, kk, s.selection, s.scratch);
            s.passes = 0;
        } else {
            const detail::sampling how{options_.sample_fraction, options_.min_sample, tuning::topk_sample_attempts};
            finite = detail::topk_sampled(v, n, kk, detail::draw_key(options_.seed, 0, s.step), how, s.selection,
                                          s.scratch, &s.passes);
        }
        if (!finite) detail::throw_non_finite(who);
        ++s.step;
    }

    std::size_t write(const detail::sparse_selection& sel, std::size_t n, std::vector<std::byte>& bytes,
                      dtype type) const {
        const std::size_t payload = detail::sparse_payload_bytes(sel);
        wire::writer w(bytes, codec_id, type, n, payload);
        detail::write_sparse(w.payload(), sel);
        return w.finish(payload);
    }

    options_type options_{};
};

static_assert(compressor<topk>, "compress::topk must model hitch::compressor");
static_assert(residual_compressor<topk>, "compress::topk must model hitch::residual_compressor");

}  // namespace hitch::compress
