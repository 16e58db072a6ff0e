#pragma once
// compress::randomk: random-k sparsification (Stich, Cordonnier and Jaggi 2018, "Sparsified SGD with memory";
// Wangni et al. 2018). k = round(density n) coordinates are drawn uniformly without replacement from a seed that
// every rank shares, so all ranks pick the same coordinates at the same step and no indices travel: the message
// carries the draw's 64-bit key, and the decoder draws the same coordinates again.
//
// Scaled (default), the estimate is unbiased: D(m)_i = (n / k) v_i for a drawn i, else 0, so E[D(m)] = v.
// Unscaled (scale = false) it is the contraction used with error feedback (error_feedback<randomk>).
//
// Because every rank sends the same coordinates, messages add in transit: randomk is additive, and the
// aggregation all-reduces the k values (after checking that every rank drew with the same key).
//
// Bytes on the wire: 32 + 16 + 4k. Payload: u64 key | u64 k | k x f32 values (in ascending index order).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/options.hpp"

namespace hitch::compress {

struct randomk_options {
    /// Fraction of the bucket sent: k = round(density n), at least 1 for a non-empty bucket.
    double density = 0.01;
    /// Multiply the sent values by n / k (unbiased); off for use with error feedback.
    bool scale = true;
    /// Shared by every rank: the coordinates of step t are a function of (seed, t).
    std::uint64_t seed = 0x4a4d0c0d;

    void validate() const {
        option_validator("hitch::compress::randomk_options").open_closed("density", density, 0.0, 1.0);
    }
};

namespace detail {

/// k distinct indices of [0, n), uniformly drawn from `key`, ascending. Draws the smaller of the chosen set and
/// its complement into a bitmap (so fewer than two draws per index are expected), then reads the bitmap in order.
inline void random_indices(std::uint64_t key, std::size_t n, std::size_t k, std::vector<std::uint64_t>& out,
                           std::vector<std::uint64_t>& bitmap) {
    out.clear();
    if (k >= n) {
        out.resize(n);
        std::iota(out.begin(), out.end(), std::uint64_t{0});
        return;
    }
    if (k == 0) return;
    const bool complement = k > n / 2;
    const std::size_t pick = complement ? n - k : k;
    bitmap.assign((n + 63) / 64, 0);
    xoshiro256ss rng(key);
    for (std::size_t picked = 0; picked < pick;) {
        const std::uint64_t i = rng.below(n);
        const std::uint64_t bit = std::uint64_t{1} << (i % 64);
        std::uint64_t& word = bitmap[i / 64];
        if ((word & bit) == 0) {
            word |= bit;
            ++picked;
        }
    }
    out.reserve(k);
    for (std::size_t w = 0; w < bitmap.size(); ++w) {
        std::uint64_t bits = complement ? ~bitmap[w] : bitmap[w];
        if (w + 1 == bitmap.size() && n % 64 != 0) bits &= (std::uint64_t{1} << (n % 64)) - 1;
        while (bits != 0) {
            out.push_back(w * 64 + static_cast<std::uint64_t>(std::countr_zero(bits)));
            bits &= bits - 1;
        }
    }
}

}  // namespace detail

/// Random-k sparsification from a shared seed: no indices on the wire, additive.
class randomk : public detail::codec_base<randomk> {
public:
    static constexpr std::uint8_t codec_id = codec_ids::randomk;
    static constexpr std::string_view name = "randomk";
    static constexpr std::string_view who = "hitch::compress::randomk";
    static constexpr bool additive = true;
    static constexpr bool needs_error_feedback = false;
    static constexpr bool ring_compressible = false;

    using options_type = randomk_options;
    struct state {
        std::size_t count = 0;
        std::uint64_t step = 0;              // the same on every rank
        std::uint64_t last_key = 0;          // key of the last draw
        std::vector<std::uint64_t> indices;  // the last draw's coordinates
        std::vector<std::uint64_t> bitmap;   // workspace
    };
    template <class T>
    using summable_t = float;

    randomk() = default;
    explicit randomk(options_type o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] state make_state(std::size_t count) const { return {count, 0, 0, {}, {}}; }
    [[nodiscard]] std::size_t k(std::size_t n) const noexcept { return detail::selected_count(n, options_.density); }
    [[nodiscard]] std::size_t message_bytes(std::size_t n) const noexcept { return wire::header_bytes + 16 + 4 * k(n); }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept { return message_bytes(n); }
    /// The factor the sent values carry.
    [[nodiscard]] float factor(std::size_t n) const noexcept {
        return options_.scale && n != 0 ? static_cast<float>(static_cast<double>(n) / static_cast<double>(k(n))) : 1.0f;
    }

    std::size_t encode_floats(std::span<const float> v, state& s, std::vector<std::byte>& bytes, dtype type) const {
        check_finite(v.data(), v.size(), "the bucket");
        draw(s, v.size());
        return write(v.data(), s, bytes, type);
    }

    /// Encodes v = g + r_in at the drawn coordinates; r_out = v - D(m).
    std::size_t encode_ef_floats(std::span<const float> g, std::span<const float> r_in, std::span<float> r_out,
                                 state& s, std::vector<std::byte>& bytes, dtype type) const {
        for (std::size_t i = 0; i < g.size(); ++i) r_out[i] = g[i] + r_in[i];
        check_finite(r_out.data(), r_out.size(), "the bucket plus its residual");
        draw(s, g.size());
        const std::size_t size = write(r_out.data(), s, bytes, type);
        const float f = factor(g.size());
        for (std::uint64_t i : s.indices) r_out[i] -= f * r_out[i];
        return size;
    }

    template <bool Add>
    void decode_floats(const wire::message_view& m, std::span<float> out) const {
        const std::size_t n = out.size();
        wire::reader r(m.payload, who);
        const auto key = r.get<std::uint64_t>("key");
        const std::uint64_t kk = r.count("selected count", n);
        const auto values = r.take(4 * kk, "values");
        r.expect_end();
        for (std::size_t j = 0; j < kk; ++j)
            if (!std::isfinite(wire::load_le<float>(values.data() + 4 * j)))
                r.fail(hitch::detail::concat("value ", j, " is not finite"));
        std::vector<std::uint64_t> indices, bitmap;
        detail::random_indices(key, n, static_cast<std::size_t>(kk), indices, bitmap);
        if constexpr (!Add) std::fill(out.begin(), out.end(), 0.0f);
        for (std::size_t j = 0; j < kk; ++j) out[indices[j]] += wire::load_le<float>(values.data() + 4 * j);
    }

    // Additive form: the k values; every rank drew the same coordinates.
    [[nodiscard]] std::size_t summable_count(const state&, std::size_t n) const noexcept { return k(n); }
    template <class T>
    void encode_summable(tensor_view<T> in, state& s, std::span<float> out) const {
        check_state_size(s, in.size());
        std::vector<float> scratch;
        const std::span<const float> v = detail::as_floats(in, scratch);
        check_finite(v.data(), v.size(), "the bucket");
        draw(s, v.size());
        const float f = factor(v.size());
        for (std::size_t j = 0; j < s.indices.size(); ++j) out[j] = f * v[s.indices[j]];
    }
    template <class T>
    void decode_summed(std::span<const float> sum, const state& s, tensor_view<T> out) const {
        std::fill(out.begin(), out.end(), T(0.0f));
        for (std::size_t j = 0; j < s.indices.size(); ++j) out[s.indices[j]] = T(sum[j]);
    }
    /// What every rank must agree on before the values are summed: the key of the draw.
    [[nodiscard]] std::uint64_t agreement_value(const state& s) const noexcept { return s.last_key; }

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
    static void check_finite(const float* v, std::size_t n, std::string_view what) {
        bool ok = true;
        for (std::size_t i = 0; i < n; ++i) ok &= std::fabs(v[i]) <= 3.40282347e38f;
        if (!ok) detail::throw_non_finite(who, what);
    }
    void draw(state& s, std::size_t n) const {
        s.last_key = detail::draw_key(options_.seed, 0, s.step);
        ++s.step;
        detail::random_indices(s.last_key, n, k(n), s.indices, s.bitmap);
    }
    std::size_t write(const float* v, const state& s, std::vector<std::byte>& bytes, dtype type) const {
        const std::size_t n = s.count, kk = s.indices.size();
        const std::size_t payload = 16 + 4 * kk;
        wire::writer w(bytes, codec_id, type, n, payload);
        std::byte* p = w.payload();
        wire::store_le<std::uint64_t>(p, s.last_key);
        wire::store_le<std::uint64_t>(p + 8, kk);
        const float f = factor(n);
        for (std::size_t j = 0; j < kk; ++j) wire::store_le(p + 16 + 4 * j, f * v[s.indices[j]]);
        return w.finish(payload);
    }

    options_type options_{};
};

static_assert(compressor<randomk>, "compress::randomk must model hitch::compressor");
static_assert(summable_compressor<randomk>, "compress::randomk must model hitch::summable_compressor");
static_assert(residual_compressor<randomk>, "compress::randomk must model hitch::residual_compressor");

}  // namespace hitch::compress
