#pragma once
// compress::dgc: Deep Gradient Compression (Lin, Han, Mao, Wang and Dally 2018, ICLR). Top-k sparsification with
// the paper's four corrections, per bucket:
//
//   local gradient clipping   g <- g min(1, (c / sqrt(N)) / ||g||_2)    (c: clip_norm, N: ranks; off when c = 0)
//   momentum correction       u <- m u + g;   v <- v + u                (Nesterov: u <- m (u + g); v <- v + u + g)
//   sparsification            send v at the k largest |v| (k from the sparsity schedule), by sampled threshold
//   momentum factor masking   v <- 0 and u <- 0 where sent
//   warm-up                   sparsity 75%, 93.75%, 98.4375%, 99.6%, then the final (99.9%), each warm-up stage
//                             lasting warmup_steps encodes (the paper: one epoch each over the first four epochs)
//
// The accumulated velocity v is DGC's own error feedback, so dgc must not be wrapped in error_feedback; momentum is
// applied here, so pair dgc with plain SGD (the decoded message is the update direction).
//
// Bytes on the wire: as topk (32 + 8 + 4k + index varints); state: u and v (2n floats, saved) and the step, with a
// second u and v so that an encode can be taken back.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/sparse.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/compress/tuning.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/options.hpp"

namespace hitch::compress {

struct dgc_options {
    /// Momentum m of the momentum correction.
    double momentum = 0.9;
    bool nesterov = false;
    /// Density after the warm-up (the paper's 99.9% sparsity).
    double final_density = 0.001;
    /// Encodes per warm-up stage (0: no warm-up, the final density from the start).
    std::uint64_t warmup_steps = 0;
    /// Local clipping threshold c of the global gradient norm (0: no clipping) ...
    double clip_norm = 0.0;
    /// ... divided by sqrt(ranks), the number of workers N.
    int ranks = 1;
    double sample_fraction = tuning::topk_sample_fraction;
    std::size_t min_sample = tuning::topk_min_sample;
    std::uint64_t seed = 0xd6c0de;

    void validate() const {
        option_validator("hitch::compress::dgc_options")
            .half_open("momentum", momentum, 0.0, 1.0)
            .open_closed("final_density", final_density, 0.0, 1.0)
            .non_negative("clip_norm", clip_norm)
            .at_least("ranks", ranks, 1)
            .open_closed("sample_fraction", sample_fraction, 0.0, 1.0)
            .at_least("min_sample", min_sample, std::size_t{16});
    }
};

namespace detail {

/// Sum of g_i^2 in double, in a fixed order that the GPU reproduces: blocks of tuning::dgc_norm_block elements, each
/// with eight lanes (element i of a block into lane i % 8, in order) folded ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7));
/// the blocks' sums added in order within groups of tuning::dgc_norm_group blocks, and the groups' sums in order.
/// A float's square is exact in double, so only the order of the additions matters.
[[nodiscard]] inline double dgc_squared_norm(const float* g, std::size_t n) {
    constexpr std::size_t block = tuning::dgc_norm_block, group = block * tuning::dgc_norm_group;
    double total = 0.0;
    for (std::size_t g0 = 0; g0 < n; g0 += group) {
        double group_sum = 0.0;
        for (std::size_t b0 = g0; b0 < std::min(n, g0 + group); b0 += block) {
            double lanes[8] = {};
            const std::size_t end = std::min(n, b0 + block);
            std::size_t i = b0;
            for (; i + 8 <= end; i += 8)
                for (std::size_t j = 0; j < 8; ++j) lanes[j] += static_cast<double>(g[i + j]) * g[i + j];
            for (std::size_t j = 0; i < end; ++i, ++j) lanes[j] += static_cast<double>(g[i]) * g[i];
            group_sum +=
                ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
        }
        total += group_sum;
    }
    return total;
}

}  // namespace detail

/// Deep Gradient Compression: momentum-corrected, clipped, masked top-k with a warm-up schedule.
class dgc : public detail::codec_base<dgc> {
public:
    static constexpr std::uint8_t codec_id = codec_ids::dgc;
    static constexpr std::string_view name = "dgc";
    static constexpr std::string_view who = "hitch::compress::dgc";
    static constexpr bool additive = false;
    static constexpr bool needs_error_feedback = false;
    static constexpr bool ring_compressible = false;
    static constexpr bool own_error_feedback = true;

    /// Densities of the warm-up stages: sparsity 75%, 93.75%, 98.4375%, 99.6%.
    static constexpr std::array<double, 4> warmup_density = {0.25, 0.0625, 0.015625, 0.004};

    using options_type = dgc_options;
    struct state {
        std::size_t count = 0;
        std::uint64_t step = 0;
        std::vector<float> u;                 // momentum
        std::vector<float> v;                 // accumulated velocity (what has not been sent)
        std::vector<float> u_other, v_other;  // the previous u and v after an encode (for undo), else workspace
        detail::sparse_selection selection;   // workspace
        std::vector<float> scratch;           // workspace
    };

    dgc() = default;
    explicit dgc(options_type o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] state make_state(std::size_t count) const {
        return {count,
                0,
                std::vector<float>(count, 0.0f),
                std::vector<float>(count, 0.0f),
                std::vector<float>(count, 0.0f),
                std::vector<float>(count, 0.0f),
                {},
                {}};
    }
    /// The density the schedule gives at encode number `step`.
    [[nodiscard]] double density(std::uint64_t step) const noexcept {
        if (options_.warmup_steps == 0) return options_.final_density;
        const std::uint64_t stage = step / options_.warmup_steps;
        if (stage >= warmup_density.size()) return options_.final_density;
        return std::max(warmup_density[stage], options_.final_density);
    }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept {
        return wire::header_bytes + 8 +
               detail::selected_count(n, std::max(density(0), options_.final_density)) * (4 + wire::varint_size(n));
    }

    std::size_t encode_floats(std::span<const float> g, state& s, std::vector<std::byte>& bytes, dtype type) const {
        const std::size_t n = g.size();
        if (s.u.size() != n || s.v.size() != n || s.u_other.size() != n || s.v_other.size() != n)
            throw config_error(hitch::detail::concat(who, ": the state's vectors do not match the bucket of ", n));
        // The norm pass also refuses non-finite gradients before the state changes.
        const double norm2 = detail::dgc_squared_norm(g.data(), n);
        if (!std::isfinite(norm2)) detail::throw_non_finite(who);
        float scale = 1.0f;
        if (options_.clip_norm > 0.0) {
            const double limit = options_.clip_norm / std::sqrt(static_cast<double>(options_.ranks));
            const double norm = std::sqrt(norm2);
            if (norm > limit) scale = static_cast<float>(limit / norm);
        }
        // The new u and v go beside the old ones, swapped in at the end (undo swaps them back).
        const auto m = static_cast<float>(options_.momentum);
        const float* u0 = s.u.data();
        const float* v0 = s.v.data();
        float* u = s.u_other.data();
        float* v = s.v_other.data();
        if (options_.nesterov) {
            for (std::size_t i = 0; i < n; ++i) {
                const float gi = scale * g[i];
                u[i] = m * (u0[i] + gi);
                v[i] = v0[i] + (u[i] + gi);
            }
        } else {
            for (std::size_t i = 0; i < n; ++i) {
                u[i] = m * u0[i] + scale * g[i];
                v[i] = v0[i] + u[i];
            }
        }
        const std::size_t k = detail::selected_count(n, density(s.step));
        const detail::sampling how{options_.sample_fraction, options_.min_sample, tuning::topk_sample_attempts};
        if (!detail::topk_sampled(v, n, k, detail::draw_key(options_.seed, 0, s.step), how, s.selection, s.scratch))
            detail::throw_non_finite(who, "the accumulated velocity");
        const std::size_t payload = detail::sparse_payload_bytes(s.selection);
        wire::writer w(bytes, codec_id, type, n, payload);
        detail::write_sparse(w.payload(), s.selection);
        for (std::uint64_t i : s.selection.index) {  // momentum factor masking
            u[i] = 0.0f;
            v[i] = 0.0f;
        }
        std::swap(s.u, s.u_other);
        std::swap(s.v, s.v_other);
        ++s.step;
        return w.finish(payload);
    }

    /// Takes back the last encode (the aggregation calls it when another rank failed): the previous momentum and
    /// velocity are swapped back in.
    void undo(state& s) const noexcept {
        std::swap(s.u, s.u_other);
        std::swap(s.v, s.v_other);
        if (s.step > 0) --s.step;
    }

    template <bool Add>
    void decode_floats(const wire::message_view& m, std::span<float> out) const {
        detail::sparse_selection sel;
        detail::read_sparse(m.payload, out.size(), who, sel);
        detail::scatter<Add>(sel, out);
    }

    /// Blob payload: u64 step | n floats u | n floats v.
    void save_state(const state& s, std::vector<std::byte>& blob) const {
        std::vector<std::byte> body;
        wire::put_scalar<std::uint64_t>(body, s.step);
        wire::put_floats(body, s.u);
        wire::put_floats(body, s.v);
        wire::seal_state(blob, codec_id, s.count, body);
    }
    void load_state(std::span<const std::byte> blob, state& s) const {
        const wire::message_view m = wire::open_state(blob, codec_id, s.count, who);
        wire::reader r(m.payload, who);
        const auto step = r.get<std::uint64_t>("step");
        std::vector<float> u, v;
        wire::get_floats(r, u, s.count, "momentum");
        wire::get_floats(r, v, s.count, "velocity");
        r.expect_end();
        for (std::size_t i = 0; i < s.count; ++i)
            if (!std::isfinite(u[i]) || !std::isfinite(v[i])) r.fail("the saved state holds NaN or an infinity");
        s.step = step;
        s.u = std::move(u);
        s.v = std::move(v);
        s.u_other.assign(s.count, 0.0f);
        s.v_other.assign(s.count, 0.0f);
    }

private:
    options_type options_{};
};

static_assert(compressor<dgc>, "compress::dgc must model hitch::compressor");

}  // namespace hitch::compress
