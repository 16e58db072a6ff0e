#pragma once
// compress::onebit: 1-bit SGD (Seide, Fu, Droppo, Li and Yu 2014, "1-bit stochastic gradient descent and its
// application to data-parallel distributed training of speech DNNs").
//
// Each element v_i is sent as its sign bit; the decoder replaces it by one of two reconstruction values per group,
// the means of the group's non-negative and negative elements:
//
//   a = mean{ v_i : v_i >= 0 },   b = mean{ v_i : v_i < 0 },   D(m)_i = (sign bit of v_i) ? b : a
//
// Seide et al. keep one pair per column of a weight matrix; here a group is `group_size` consecutive elements (0:
// the whole bucket). The group's sum is preserved exactly up to rounding (count * mean = sum), and the error of an
// element is at most max |v| over its group. The quantisation is biased, so the paper carries the error to the next
// minibatch ("error feedback"): use error_feedback<onebit>, or the compression-aware ring, which does that at
// every hop.
//
// Bytes on the wire: 32 + 8 + 8 G + ceil(n / 8), G = number of groups (1 when group_size is 0).
// Payload: u64 group_size | G x (f32 a, f32 b) | sign bits, element i at bit i % 8 of byte i / 8 (padding bits 0).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/parallel.hpp"
#include "hitch/compress/detail/simd.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/options.hpp"

namespace hitch::compress {

struct onebit_options {
    /// Elements sharing one pair of reconstruction values: 0 for the whole bucket, else a multiple of 8.
    std::size_t group_size = 0;
    /// Threads one bucket's encode and decode may use (the message does not depend on it).
    parallelism parallel{};

    void validate() const {
        option_validator("hitch::compress::onebit_options")
            .require(group_size % 8 == 0, "group_size", group_size, "0 or a positive multiple of 8");
        parallel.validate("hitch::compress::onebit_options");
    }
};

namespace detail {

HITCH_COMPRESS_STRICT_FP_BEGIN

/// Sums of one group's non-negative and negative elements (sign-bit split), accumulated in sixteen double lanes
/// (element i of a 512-element block into lane i % 16: sixteen independent chains keep the adds busy), folded in
/// lane order per block: the AVX2 and the baseline code follow exactly this order, so they produce the same bits.
struct sign_sums {
    double positive = 0.0;
    double negative = 0.0;
    std::size_t negatives = 0;
};

inline constexpr std::size_t sign_block = 512;
/// A bucket sent as one group sums its blocks' sums in runs of this many blocks (fixes the bits of its two means).
inline constexpr std::size_t sign_sum_blocks = 128;

/// Tail of a block (fewer than 8 elements): packs them into one byte, adds into the lane arrays.
template <bool EF>
inline void sign_tail(const float* g, const float* r, std::byte* bits, std::size_t count, double* pos, double* neg,
                      std::size_t& negatives) {
    unsigned byte = 0;
    for (std::size_t j = 0; j < count; ++j) {
        float v = g[j];
        if constexpr (EF) v += r[j];
        const bool s = std::signbit(v);
        byte |= static_cast<unsigned>(s) << j;
        pos[j] += s ? 0.0 : static_cast<double>(v);
        neg[j] += s ? static_cast<double>(v) : 0.0;
    }
    *bits = static_cast<std::byte>(byte);
    negatives += static_cast<std::size_t>(std::popcount(byte));
}

/// Adds one block's lanes (in lane order) into a block partial, records it, and adds it to the running total: the
/// total is the sum of block partials in block order whichever thread computed which block.
inline constexpr std::size_t sign_lanes = 16;

inline void finish_block(const double* pos, const double* neg, std::size_t negatives, sign_sums& total,
                         sign_sums* partial) {
    sign_sums block;
    for (std::size_t j = 0; j < sign_lanes; ++j) {
        block.positive += pos[j];
        block.negative += neg[j];
    }
    block.negatives = negatives;
    if (partial != nullptr) *partial = block;
    total.positive += block.positive;
    total.negative += block.negative;
    total.negatives += block.negatives;
}

template <bool EF>
inline sign_sums sign_pass_portable(const float* g, const float* r, std::byte* bits, std::size_t n,
                                    sign_sums* partials) {
    sign_sums out;
    for (std::size_t start = 0; start < n; start += sign_block) {
        const std::size_t end = std::min(n, start + sign_block);
        double pos[sign_lanes] = {}, neg[sign_lanes] = {};
        std::size_t negatives = 0;
        std::size_t i = start;
        for (; i + 8 <= end; i += 8) {
            const std::size_t lane = (i - start) % sign_lanes;
            unsigned byte = 0;
            for (std::size_t j = 0; j < 8; ++j) {
                float v = g[i + j];
                if constexpr (EF) v += r[i + j];
                const bool s = std::signbit(v);
                byte |= static_cast<unsigned>(s) << j;
                pos[lane + j] += s ? 0.0 : static_cast<double>(v);
                neg[lane + j] += s ? static_cast<double>(v) : 0.0;
            }
            bits[i / 8] = static_cast<std::byte>(byte);
            negatives += static_cast<std::size_t>(std::popcount(byte));
        }
        if (i < end) {
            const std::size_t lane = (i - start) % sign_lanes;
            sign_tail<EF>(g + i, EF ? r + i : r, bits + i / 8, end - i, pos + lane, neg + lane, negatives);
        }
        finish_block(pos, neg, negatives, out, partials != nullptr ? partials + start / sign_block : nullptr);
    }
    return out;
}

#if HITCH_COMPRESS_X86
/// Eight elements: their sign byte, and their values added into two vectors of positive and two of negative lanes.
/// Returns how many are negative.
template <bool EF>
__attribute__((target("avx2,f16c,bmi,bmi2,popcnt"), always_inline)) inline std::size_t sign8_avx2(
    const float* g, const float* r, std::byte* bits, __m256d* p, __m256d* q) {
    const __m256 zero = _mm256_setzero_ps();
    __m256 v = _mm256_loadu_ps(g);
    if constexpr (EF) v = _mm256_add_ps(v, _mm256_loadu_ps(r));
    const int m = _mm256_movemask_ps(v);
    *bits = static_cast<std::byte>(m);
    const __m256 pv = _mm256_blendv_ps(v, zero, v);  // v where the sign bit is clear, else +0
    const __m256 nv = _mm256_blendv_ps(zero, v, v);  // v where the sign bit is set, else +0
    p[0] = _mm256_add_pd(p[0], _mm256_cvtps_pd(_mm256_castps256_ps128(pv)));
    p[1] = _mm256_add_pd(p[1], _mm256_cvtps_pd(_mm256_extractf128_ps(pv, 1)));
    q[0] = _mm256_add_pd(q[0], _mm256_cvtps_pd(_mm256_castps256_ps128(nv)));
    q[1] = _mm256_add_pd(q[1], _mm256_cvtps_pd(_mm256_extractf128_ps(nv, 1)));
    return static_cast<std::size_t>(_mm_popcnt_u32(static_cast<unsigned>(m)));
}

template <bool EF>
HITCH_TARGET_AVX2 inline sign_sums sign_pass_avx2(const float* g, const float* r, std::byte* bits, std::size_t n,
                                                  sign_sums* partials) {
    sign_sums out;
    for (std::size_t start = 0; start < n; start += sign_block) {
        const std::size_t end = std::min(n, start + sign_block);
        // Lanes 0-3, 4-7, 8-11, 12-15 of the positive and negative sums.
        __m256d p[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
        __m256d q[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
        std::size_t negatives = 0;
        std::size_t i = start;
        for (; i + 16 <= end; i += 16) {
            negatives += sign8_avx2<EF>(g + i, EF ? r + i : r, bits + i / 8, p, q);
            negatives += sign8_avx2<EF>(g + i + 8, EF ? r + i + 8 : r, bits + i / 8 + 1, p + 2, q + 2);
        }
        if (i + 8 <= end) {
            negatives += sign8_avx2<EF>(g + i, EF ? r + i : r, bits + i / 8, p, q);
            i += 8;
        }
        alignas(32) double pos[sign_lanes], neg[sign_lanes];
        for (int k = 0; k < 4; ++k) {
            _mm256_store_pd(pos + 4 * k, p[k]);
            _mm256_store_pd(neg + 4 * k, q[k]);
        }
        if (i < end) {
            const std::size_t lane = (i - start) % sign_lanes;
            sign_tail<EF>(g + i, EF ? r + i : r, bits + i / 8, end - i, pos + lane, neg + lane, negatives);
        }
        finish_block(pos, neg, negatives, out, partials != nullptr ? partials + start / sign_block : nullptr);
    }
    return out;
}

template <bool Add>
HITCH_TARGET_AVX2 inline void sign_decode_avx2(const std::byte* bits, float a, float b, float* out, std::size_t n) {
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i byte = _mm256_set1_epi32(static_cast<int>(bits[i / 8]));
        const __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(byte, lane_bit), lane_bit);
        __m256 v = _mm256_blendv_ps(va, vb, _mm256_castsi256_ps(set));
        if constexpr (Add) v = _mm256_add_ps(v, _mm256_loadu_ps(out + i));
        _mm256_storeu_ps(out + i, v);
    }
    for (; i < n; ++i) {
        const float v = ((static_cast<unsigned>(bits[i / 8]) >> (i % 8)) & 1u) ? b : a;
        if constexpr (Add)
            out[i] += v;
        else
            out[i] = v;
    }
}
#endif

/// The sign bits of v = g (+ r) and the sums of its two halves. With `partials`, block k's sums are also stored at
/// partials[k] (the caller then combines chunks computed apart in block order).
template <bool EF>
inline sign_sums sign_pass(const float* g, const float* r, std::byte* bits, std::size_t n,
                           sign_sums* partials = nullptr) {
#if HITCH_COMPRESS_X86
    if (use_wide()) return sign_pass_avx2<EF>(g, r, bits, n, partials);
#endif
    return sign_pass_portable<EF>(g, r, bits, n, partials);
}

template <bool Add>
inline void sign_decode(const std::byte* bits, float a, float b, float* out, std::size_t n) {
#if HITCH_COMPRESS_X86
    if (use_wide()) return sign_decode_avx2<Add>(bits, a, b, out, n);
#endif
    for (std::size_t i = 0; i < n; ++i) {
        const float v = ((static_cast<unsigned>(bits[i / 8]) >> (i % 8)) & 1u) ? b : a;
        if constexpr (Add)
            out[i] += v;
        else
            out[i] = v;
    }
}

/// r_out = (g + r_in) - (sign(g + r_in) ? b : a): the part of v the message does not carry.
HITCH_COMPRESS_ALWAYS_INLINE void sign_residual(const float* g, const float* r_in, float* r_out, float a, float b,
                                                std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        const float v = g[i] + r_in[i];
        r_out[i] = v - (std::signbit(v) ? b : a);
    }
}

HITCH_COMPRESS_STRICT_FP_END

}  // namespace detail

/// 1-bit quantisation with per-group reconstruction values (Seide et al. 2014).
class onebit : public detail::codec_base<onebit> {
public:
    static constexpr std::uint8_t codec_id = codec_ids::onebit;
    static constexpr std::string_view name = "onebit";
    static constexpr std::string_view who = "hitch::compress::onebit";
    static constexpr bool additive = false;
    static constexpr bool needs_error_feedback = true;
    static constexpr bool ring_compressible = true;

    using options_type = onebit_options;
    using state = empty_state;

    onebit() = default;
    explicit onebit(options_type o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] state make_state(std::size_t count) const { return {count}; }

    [[nodiscard]] std::size_t groups(std::size_t n) const noexcept {
        if (n == 0) return 0;
        return options_.group_size == 0 ? 1 : detail::ceil_div(n, options_.group_size);
    }
    /// The exact message size for n elements.
    [[nodiscard]] std::size_t message_bytes(std::size_t n) const noexcept {
        return wire::header_bytes + 8 + 8 * groups(n) + detail::ceil_div(n, 8);
    }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept { return message_bytes(n); }

    std::size_t encode_floats(std::span<const float> in, state&, std::vector<std::byte>& bytes, dtype type) const {
        return encode_impl<false>(in.data(), nullptr, nullptr, in.size(), bytes, type);
    }

    /// Encodes v = g + r_in; r_out = v - D(message).
    std::size_t encode_ef_floats(std::span<const float> g, std::span<const float> r_in, std::span<float> r_out, state&,
                                 std::vector<std::byte>& bytes, dtype type) const {
        return encode_impl<true>(g.data(), r_in.data(), r_out.data(), g.size(), bytes, type);
    }

    template <bool Add>
    void decode_floats(const wire::message_view& m, std::span<float> out) const {
        const std::size_t n = out.size();
        wire::reader r(m.payload, who);
        const std::uint64_t group = r.get<std::uint64_t>("group size");
        if (group % 8 != 0) r.fail(hitch::detail::concat("group size ", group, " is not a multiple of 8"));
        const std::size_t g_count = n == 0 ? 0 : (group == 0 || group >= n ? 1 : detail::ceil_div(n, group));
        const auto pairs = r.take(8 * static_cast<std::uint64_t>(g_count), "reconstruction values");
        const auto bits = r.take(detail::ceil_div(n, 8), "sign bits");
        r.expect_end();
        for (std::size_t k = 0; k < g_count; ++k) {
            const float a = wire::load_le<float>(pairs.data() + 8 * k);
            const float b = wire::load_le<float>(pairs.data() + 8 * k + 4);
            if (!std::isfinite(a) || !std::isfinite(b) || std::signbit(a) || !(b <= 0.0f))
                r.fail(hitch::detail::concat("reconstruction values (", a, ", ", b, ") of group ", k,
                                             " are not a non-negative and a non-positive finite mean"));
        }
        if (n % 8 != 0 && (static_cast<unsigned>(bits[n / 8]) >> (n % 8)) != 0) r.fail("padding bits are not zero");
        const std::size_t size = group == 0 || group >= n ? n : static_cast<std::size_t>(group);
        // Chunks on 512-element boundaries; each piece decodes with its group's pair.
        detail::for_chunks(n, detail::sign_block, options_.parallel, [&](std::size_t lo, std::size_t hi) {
            for (std::size_t begin = lo; begin < hi;) {
                const std::size_t k = begin / size, end = std::min(hi, (k + 1) * size);
                detail::sign_decode<Add>(bits.data() + begin / 8, wire::load_le<float>(pairs.data() + 8 * k),
                                         wire::load_le<float>(pairs.data() + 8 * k + 4), out.data() + begin,
                                         end - begin);
                begin = end;
            }
        });
    }

    void save_state(const state& s, std::vector<std::byte>& blob) const { detail::save_empty_state<codec_id>(s, blob); }
    void load_state(std::span<const std::byte> blob, state& s) const {
        detail::load_empty_state<codec_id>(blob, s, who);
    }

private:
    template <bool EF>
    std::size_t encode_impl(const float* g, const float* r_in, float* r_out, std::size_t n,
                            std::vector<std::byte>& bytes, dtype type) const {
        const std::size_t g_count = groups(n);
        const std::size_t payload = 8 + 8 * g_count + detail::ceil_div(n, 8);
        wire::writer w(bytes, codec_id, type, n, payload);
        std::byte* p = w.payload();
        wire::store_le<std::uint64_t>(p, options_.group_size >= n ? 0 : options_.group_size);
        std::byte* pairs = p + 8;
        std::byte* bits = pairs + 8 * g_count;
        const std::size_t size = options_.group_size == 0 || options_.group_size >= n ? n : options_.group_size;
        const auto values = [](const detail::sign_sums& s, std::size_t len) {
            const std::size_t negatives = s.negatives, positives = len - negatives;
            return std::pair<float, float>{
                positives == 0 ? 0.0f : static_cast<float>(s.positive / static_cast<double>(positives)),
                negatives == 0 ? 0.0f : static_cast<float>(s.negative / static_cast<double>(negatives))};
        };
        const auto residual = [&](std::size_t begin, std::size_t len, float a, float b) {
            detail::run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA {
                detail::sign_residual(g + begin, r_in + begin, r_out + begin, a, b, len);
            });
        };
        const char* what = EF ? "the bucket plus its residual" : "the bucket";
        if (g_count == 1) {
            // One group: chunks of whole 512-element blocks in parallel, block sums combined in order.
            std::vector<detail::sign_sums> partials(detail::ceil_div(n, detail::sign_block));
            detail::for_chunks(n, detail::sign_block, options_.parallel, [&](std::size_t b, std::size_t e) {
                detail::sign_pass<EF>(g + b, EF ? r_in + b : nullptr, bits + b / 8, e - b,
                                      partials.data() + b / detail::sign_block);
            });
            // The block sums in order within runs of sign_sum_blocks blocks, then the runs' sums in order: a fixed
            // order that a GPU reproduces with one thread per run (a single chain over n / 512 blocks would not
            // spread). Buckets of up to sign_sum_blocks * 512 elements are one run.
            detail::sign_sums total;
            for (std::size_t r0 = 0; r0 < partials.size(); r0 += detail::sign_sum_blocks) {
                detail::sign_sums run;
                for (std::size_t b = r0; b < std::min(partials.size(), r0 + detail::sign_sum_blocks); ++b) {
                    run.positive += partials[b].positive;
                    run.negative += partials[b].negative;
                    run.negatives += partials[b].negatives;
                }
                total.positive += run.positive;
                total.negative += run.negative;
                total.negatives += run.negatives;
            }
            if (!std::isfinite(total.positive) || !std::isfinite(total.negative)) detail::throw_non_finite(who, what);
            const std::pair<float, float> ab = values(total, n);
            const float a = ab.first, b = ab.second;  // plain names: lambdas below capture them
            wire::store_le(pairs, a);
            wire::store_le(pairs + 4, b);
            if constexpr (EF)
                detail::for_chunks(n, detail::sign_block, options_.parallel,
                                   [&](std::size_t lo, std::size_t hi) { residual(lo, hi - lo, a, b); });
        } else {
            // Groups are independent: whole groups per chunk.
            std::vector<unsigned char> finite(g_count, 1);
            detail::for_chunks(n, size, options_.parallel, [&](std::size_t lo, std::size_t hi) {
                for (std::size_t begin = lo; begin < hi; begin += size) {
                    const std::size_t k = begin / size, len = std::min(size, n - begin);
                    const detail::sign_sums s =
                        detail::sign_pass<EF>(g + begin, EF ? r_in + begin : nullptr, bits + begin / 8, len);
                    if (!std::isfinite(s.positive) || !std::isfinite(s.negative)) {
                        finite[k] = 0;
                        continue;
                    }
                    const auto [a, b] = values(s, len);
                    wire::store_le(pairs + 8 * k, a);
                    wire::store_le(pairs + 8 * k + 4, b);
                    if constexpr (EF) residual(begin, len, a, b);
                }
            });
            if (std::find(finite.begin(), finite.end(), 0) != finite.end()) detail::throw_non_finite(who, what);
        }
        return w.finish(payload);
    }

    options_type options_{};
};

static_assert(compressor<onebit>, "compress::onebit must model hitch::compressor");
static_assert(residual_compressor<onebit>, "compress::onebit must model hitch::residual_compressor");

}  // namespace hitch::compress
