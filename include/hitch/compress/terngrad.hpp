#pragma once
// compress::terngrad: TernGrad (Wen, Xu, Yan, Wu, Wang, Chen and Li 2017, "TernGrad: Ternary gradients to reduce
// communication in distributed deep learning"). Per bucket (the paper: per layer), with scale s_t = max |v|:
//
//   tern(v_i) = s_t sign(v_i) b_i,   b_i ~ Bernoulli(|v_i| / s_t)
//
// an unbiased ternary estimate (E[tern(v)] = v, eq. 3) whose error per element is below s_t. Optional gradient
// clipping (section 3.5) first bounds every element at c sigma, sigma the standard deviation of the bucket's
// elements (the paper uses c = 2.5); the estimate is then unbiased for the clipped gradient.
//
// s_t is known only after a pass over the bucket. Without clipping or a residual the encode still reads the floats
// once: it quantises each block against the largest magnitude seen so far and thins the codes afterwards (see
// encode_one_pass), which gives every element the same probability |v_i| / s_t of a non-zero code, independently.
// With clipping (sigma first) or error feedback (the residual needs s_t) it reads them twice.
//
// Bytes on the wire: 32 + 8 + ceil(n / 4). Payload: f32 scale | u32 0 | 2-bit codes, element i at bits
// [2i, 2i + 2) least significant first: 00 zero, 10 +s_t, 11 -s_t (01 is corrupt).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/compress/detail/bitstream.hpp"
#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/moments.hpp"
#include "hitch/compress/detail/pack.hpp"
#include "hitch/compress/detail/quantize.hpp"
#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/tuning.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/options.hpp"

namespace hitch::compress {

struct terngrad_options {
    /// Gradient clipping at clip_sigmas standard deviations; 0 turns it off (unbiased for the raw gradient).
    double clip_sigmas = 0.0;
    /// Seeds the stochastic rounding (mixed with the state's stream, e.g. the rank, and step).
    std::uint64_t seed = 0x7e4a9a4d;
    /// Threads one bucket's encode and decode may use (the message does not depend on it).
    parallelism parallel{};

    void validate() const {
        option_validator("hitch::compress::terngrad_options").non_negative("clip_sigmas", clip_sigmas);
        parallel.validate("hitch::compress::terngrad_options");
    }
};

/// TernGrad: stochastic ternary values times the bucket's largest magnitude; unbiased.
class terngrad : public detail::codec_base<terngrad> {
public:
    static constexpr std::uint8_t codec_id = codec_ids::terngrad;
    static constexpr std::string_view name = "terngrad";
    static constexpr std::string_view who = "hitch::compress::terngrad";
    static constexpr bool additive = false;
    static constexpr bool needs_error_feedback = false;
    static constexpr bool ring_compressible = true;

    using options_type = terngrad_options;
    struct state {
        std::size_t count = 0;
        std::uint64_t step = 0;
        std::uint64_t stream = 0;  // differs between ranks so their rounding is independent (the aggregation sets it)
    };

    terngrad() = default;
    explicit terngrad(options_type o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] state make_state(std::size_t count) const { return {count, 0, 0}; }
    [[nodiscard]] static constexpr std::size_t message_bytes(std::size_t n) noexcept {
        return wire::header_bytes + 8 + detail::code_bytes(n, 2);
    }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept { return message_bytes(n); }

    std::size_t encode_floats(std::span<const float> in, state& s, std::vector<std::byte>& bytes, dtype type) const {
        return encode_impl<false>(in.data(), nullptr, nullptr, in.size(), s, bytes, type);
    }

    /// Encodes v = g + r_in; r_out = v - tern(v).
    std::size_t encode_ef_floats(std::span<const float> g, std::span<const float> r_in, std::span<float> r_out,
                                 state& s, std::vector<std::byte>& bytes, dtype type) const {
        return encode_impl<true>(g.data(), r_in.data(), r_out.data(), g.size(), s, bytes, type);
    }

    template <bool Add>
    void decode_floats(const wire::message_view& m, std::span<float> out) const {
        const std::size_t n = out.size();
        wire::reader r(m.payload, who);
        const float scale = r.get<float>("scale");
        if (r.get<std::uint32_t>("padding") != 0) r.fail("padding bytes are not zero");
        if (!std::isfinite(scale) || scale < 0.0f)
            r.fail(hitch::detail::concat("scale ", scale, " is not a finite non-negative number"));
        const auto codes = r.take(detail::code_bytes(n, 2), "codes");
        r.expect_end();
        // 01 in any position is corrupt: a byte is valid iff no pair has its low bit without its high bit.
        for (std::size_t j = 0; j < codes.size(); ++j) {
            const auto c = static_cast<unsigned>(codes[j]);
            if ((c & 0x55u & ~(c >> 1)) != 0) r.fail(hitch::detail::concat("code 01 in byte ", j));
        }
        if (n % 4 != 0 && (static_cast<unsigned>(codes.back()) >> (2 * (n % 4))) != 0)
            r.fail("padding bits are not zero");
        static const detail::byte_tables tables(2, 1);
        detail::for_chunks(n, block, options_.parallel, [&](std::size_t lo, std::size_t hi) {
            detail::run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA {
                detail::decode_bytes<Add>(tables, codes.data() + lo / 4, hi - lo, scale, out.data() + lo);
            });
        });
    }

    /// Takes back the last encode's step (the aggregation calls it when another rank failed to encode).
    void undo(state& s) const noexcept { detail::step_back(s); }

    /// Blob payload: u64 step, u64 stream.
    void save_state(const state& s, std::vector<std::byte>& blob) const {
        detail::save_counters<2>(codec_id, s.count, {s.step, s.stream}, blob);
    }
    void load_state(std::span<const std::byte> blob, state& s) const {
        const auto v = detail::load_counters<2>(blob, codec_id, s.count, who, {"step", "stream"});
        s.step = v[0];
        s.stream = v[1];
    }

private:
    /// Elements quantised per block (codes in cache between quantising and packing).
    static constexpr std::size_t block = tuning::terngrad_pack_block;

    /// Elements per running-maximum step of the one-pass encode (in L1 between its max and its quantisation).
    static constexpr std::size_t step_block = tuning::moment_block;
    /// The running maximum restarts at every segment, so chunks of whole segments give the same message on any
    /// number of threads.
    static constexpr std::size_t segment = detail::rng_block;
    /// Tag mixed into the seed of the thinning draws (independent of the rounding's).
    static constexpr std::uint64_t thinning_stream = 0x7417a1e5ull;

    /// One pass over the bucket instead of two (no clipping, no residual). Each block of 4096 elements is
    /// quantised as soon as it is read, with the largest magnitude seen so far in its segment, R_b, as the scale:
    /// P(code != 0) = |v| / R_b. Once the bucket's largest magnitude S is known, the non-zero codes of a block with
    /// R_b < S are kept with probability R_b / S (thinning): P(code != 0) = |v| / S, each element independently,
    /// which is TernGrad's distribution exactly (up to the 2^-23 resolution of the draws). Only the 2-bit codes are
    /// read again, not the floats.
    std::size_t encode_one_pass(const float* g, std::size_t n, state& s, std::vector<std::byte>& bytes,
                                dtype type) const {
        const std::size_t payload = 8 + detail::code_bytes(n, 2);
        wire::writer w(bytes, codec_id, type, n, payload);
        std::byte* p = w.payload();
        const std::size_t blocks = detail::ceil_div_size(n, step_block);
        std::vector<float> running(blocks, 0.0f);  // R_b
        std::vector<unsigned char> finite(detail::ceil_div_size(n, segment), 1);
        const detail::counter_rng base(detail::draw_key(options_.seed, s.stream, s.step));
        const detail::isa tier = detail::best_isa();
        detail::for_chunks(n, segment, options_.parallel, [&](std::size_t lo, std::size_t hi) {
            std::vector<std::uint8_t> codes(std::min(step_block, hi - lo));
            detail::run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA {
                for (std::size_t seg = lo; seg < hi; seg += segment) {
                    float r = 0.0f;
                    const std::size_t seg_end = std::min(hi, seg + segment);
                    for (std::size_t begin = seg; begin < seg_end; begin += step_block) {
                        const std::size_t len = std::min(step_block, seg_end - begin);
                        const std::uint32_t top = detail::max_abs_bits(g + begin, len);
                        if (top >= detail::infinity_bits) finite[seg / segment] = 0;
                        const float max_abs = std::bit_cast<float>(top);
                        r = max_abs > r ? max_abs : r;
                        running[begin / step_block] = r;
                        const detail::quantizer q{r > 0.0f ? 1.0f / r : 0.0f, r, 1.0f, 1,
                                                  std::numeric_limits<float>::infinity()};
                        // The next step's floats are prefetched while this one is quantised (from L1), so the
                        // memory works in both halves of the step rather than only in the maximum's.
                        const float* ahead = begin + 2 * len <= hi ? g + begin + len : nullptr;
                        detail::quantize<false, false>(g + begin, nullptr, nullptr, len, begin, base, q, codes.data(),
                                                       tier, ahead);
                        detail::pack_codes(codes.data(), len, 2, p + 8 + begin / 4, tier);
                    }
                }
            });
        });
        if (std::find(finite.begin(), finite.end(), 0) != finite.end()) detail::throw_non_finite(who, "the bucket");
        const float scale = running.empty() ? 0.0f : *std::max_element(running.begin(), running.end());
        wire::store_le(p, scale);
        wire::store_le<std::uint32_t>(p + 4, 0);
        // Thinning, and the checksum of each step's codes while they are in cache.
        const detail::counter_rng thin_base(detail::draw_key(options_.seed ^ thinning_stream, s.stream, s.step));
        const detail::chunk_plan plan = detail::plan_chunks(n, step_block, options_.parallel);
        detail::chunk_checksums sums(plan.count);
        detail::run_chunks(plan, [&](std::size_t c, std::size_t lo, std::size_t hi) {
            detail::run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA {
                for (std::size_t begin = lo; begin < hi; begin += step_block) {
                    const std::size_t len = std::min(step_block, hi - begin);
                    std::byte* codes = p + 8 + begin / 4;
                    const float r = running[begin / step_block];
                    if (scale > 0.0f && r != scale) {
                        // P(keep) = floor(2^23 R_b / S) / 2^23 (R_b / S < 1 here; R_b = 0 left nothing to keep).
                        const auto threshold = static_cast<std::uint32_t>((r / scale) * 8388608.0f);
                        detail::thin(codes, len, begin, thin_base, threshold, tier);
                    }
                    sums.add(c, codes, detail::code_bytes(len, 2));
                }
            });
        });
        ++s.step;
        return w.finish_with_payload_crc(payload, sums.combined(std::span<const std::byte>(p, 8)));
    }

    template <bool EF>
    std::size_t encode_impl(const float* g, const float* r_in, float* r_out, std::size_t n, state& s,
                            std::vector<std::byte>& bytes, dtype type) const {
        const bool clipping = options_.clip_sigmas > 0.0;
        if constexpr (!EF) {
            if (!clipping) return encode_one_pass(g, n, s, bytes, type);
        }
        const detail::group_moments mo =
            clipping ? detail::moments_parallel<EF, true, true>(g, r_in, n, options_.parallel)
                     : detail::moments_parallel<EF, false, false>(g, r_in, n, options_.parallel);
        if (!mo.finite) detail::throw_non_finite(who, EF ? "the bucket plus its residual" : "the bucket");
        float clip = std::numeric_limits<float>::infinity();
        float scale = mo.max_abs;
        if (clipping && n > 0) {
            const double mean = mo.sum / static_cast<double>(n);
            const double variance = std::max(0.0, mo.sum_squares / static_cast<double>(n) - mean * mean);
            clip = static_cast<float>(options_.clip_sigmas * std::sqrt(variance));
            scale = std::min(scale, clip);
        }
        const std::size_t payload = 8 + detail::code_bytes(n, 2);
        wire::writer w(bytes, codec_id, type, n, payload);
        std::byte* p = w.payload();
        wire::store_le(p, scale);
        wire::store_le<std::uint32_t>(p + 4, 0);
        const detail::quantizer q{scale > 0.0f ? 1.0f / scale : 0.0f, scale, 1.0f, 1, clip};
        const detail::counter_rng base(detail::draw_key(options_.seed, s.stream, s.step));
        const detail::isa tier = detail::best_isa();
        // Chunks of whole blocks, each with its own code buffer; the codes of an element depend only on its index.
        detail::for_chunks(n, block, options_.parallel, [&](std::size_t lo, std::size_t hi) {
            std::vector<std::uint8_t> codes(std::min(block, hi - lo));
            detail::run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA {
                for (std::size_t begin = lo; begin < hi; begin += block) {
                    const std::size_t len = std::min(block, hi - begin);
                    const float* gb = g + begin;
                    const float* rb = EF ? r_in + begin : nullptr;
                    float* ob = EF ? r_out + begin : nullptr;
                    if (clipping)
                        detail::quantize<EF, true>(gb, rb, ob, len, begin, base, q, codes.data(), tier);
                    else
                        detail::quantize<EF, false>(gb, rb, ob, len, begin, base, q, codes.data(), tier);
                    detail::pack_codes(codes.data(), len, 2, p + 8 + begin / 4, tier);
                }
            });
        });
        ++s.step;
        return w.finish(payload);
    }

    options_type options_{};
};

static_assert(compressor<terngrad>, "compress::terngrad must model hitch::compressor");
static_assert(residual_compressor<terngrad>, "compress::terngrad must model hitch::residual_compressor");

}  // namespace hitch::compress
