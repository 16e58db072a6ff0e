#pragma once
// The stochastic quantiser of qsgd and terngrad for host and device (no CUDA header): per-element rounding
// (compress/detail/stochastic_round.hpp), the group reductions in the host's fixed order (compress/detail/
// moments.hpp: 32 float lanes per block of tuning::moment_block elements, folded into double by a fixed tree, the
// blocks added in order), the per-group scalars, the b-bit code streams (compress/detail/bitstream.hpp) and the
// Elias-gamma lengths (compress/detail/elias_gamma.hpp). Each is written once and run by the kernels
// (qsgd.cuh, terngrad.cuh); the host tests run the same functions against the CPU codecs, bit for bit.

#include <cstddef>
#include <cstdint>

#include "hitch/compress/tuning.hpp"
#include "hitch/cuda/compress/cast.hpp"
#include "hitch/cuda/compress/random.hpp"
#include "hitch/cuda/detail/hd.hpp"

namespace hitch::cuda::compress::detail {

// ---- one element ----------------------------------------------------------------------------------------------------

/// compress::detail::quantizer: y = min(|v| (clipped) * to_levels, s), level = floor(y + U) at most `levels`,
/// decoded magnitude level * unit.
struct quantizer {
    float to_levels = 0.0f;
    float unit = 0.0f;
    float s = 0.0f;
    std::int32_t levels = 0;
    float clip = 0.0f;
};

/// compress::detail::quantize_kernel for one element: the code (level << 1 | sign) of v = g (+ r_in) from its 32
/// random bits, and with EF the residual r_out = v - decoded.
template <bool EF, bool Clip>
[[nodiscard]] HITCH_HD_INLINE std::uint32_t quantize_element(float g, float r_in, float& r_out,
                                                             std::uint32_t random_bits, const quantizer& q) noexcept {
    float v = g;
    if constexpr (EF) v = hd::add(v, r_in);
    float a = abs_value(v);
    if constexpr (Clip) a = q.clip < a ? q.clip : a;
    const float x = hd::mul(a, q.to_levels);
    const float y = q.s < x ? q.s : x;
    const float f = hd::from_bits((random_bits >> 9) | 0x3f800000u);
    const std::int32_t floor_plus_one = static_cast<std::int32_t>(hd::add(y, f)) - 1;
    const std::int32_t level = q.levels < floor_plus_one ? q.levels : floor_plus_one;
    const std::uint32_t negative = (hd::bits(v) >> 31) & (level > 0 ? 1u : 0u);
    if constexpr (EF) {
        const float sent = hd::mul(static_cast<float>(level), q.unit);
        r_out = hd::sub(v, negative ? -sent : sent);
    }
    return static_cast<std::uint32_t>(level) << 1 | negative;
}

/// The decoded value of a code at scale `unit` (bitstream.hpp's tables and qsgd's decode_codes give the same bits).
[[nodiscard]] HITCH_HD_INLINE float code_value(std::uint32_t code, float unit) noexcept {
    const float magnitude = hd::mul(static_cast<float>(code >> 1), unit);
    return (code & 1u) ? -magnitude : magnitude;
}

/// A code the decoders refuse: a level above s, or a negative zero.
[[nodiscard]] HITCH_HD_INLINE bool code_invalid(std::uint32_t code, std::uint32_t s) noexcept {
    return (code >> 1) > s || code == 1u;
}

// ---- group reductions -----------------------------------------------------------------------------------------------

/// Elements per reduction block and lanes per block (moments.hpp: element i of a block into lane i % 32).
inline constexpr std::size_t moment_block = hitch::compress::tuning::moment_block;
inline constexpr unsigned moment_lanes = 32;

/// One lane's float accumulators.
struct moment_lane {
    float sum = 0.0f;
    float squares = 0.0f;
    float max_abs = 0.0f;
    std::uint32_t bad = 0;
};

/// Adds v = g (+ r) to a lane (moments_kernel's inner step).
template <bool EF, bool Squares, bool Sum, bool Max>
HITCH_HD_INLINE void moment_add(moment_lane& l, float g, float r) noexcept {
    float v = g;
    if constexpr (EF) v = hd::add(v, r);
    const float a = abs_value(v);
    if constexpr (Sum) l.sum = hd::add(l.sum, v);
    if constexpr (Squares) l.squares = hd::add(l.squares, hd::mul(v, v));
    if constexpr (Max) {
        l.max_abs = a > l.max_abs ? a : l.max_abs;
        l.bad |= a <= 3.40282347e38f ? 0u : 1u;
    }
}

/// A block's (or a group's) reductions, as moments.hpp's group_moments.
struct moments {
    double sum = 0.0;
    double sum_squares = 0.0;
    float max_abs = 0.0f;
    std::uint32_t bad = 0;
};

/// The fixed tree of moments_kernel: lanes j and j + w for w = 16, 8, 4, 2, 1, in double (x has 32 entries; the
/// result is x[0]). The kernels do the same with warp shuffles.
HITCH_HD_INLINE void moment_tree(double* x) noexcept {
    for (unsigned w = moment_lanes / 2; w >= 1; w /= 2)
        for (unsigned j = 0; j < w; ++j) x[j] = hd::add(x[j], x[j + w]);
}

/// Adds a block's reductions to a running total (moments_kernel's and moments_parallel's order: block by block).
HITCH_HD_INLINE void moment_accumulate(moments& total, const moments& block) noexcept {
    total.sum = hd::add(total.sum, block.sum);
    total.sum_squares = hd::add(total.sum_squares, block.sum_squares);
    total.max_abs = block.max_abs > total.max_abs ? block.max_abs : total.max_abs;
    total.bad |= block.bad;
}

/// The reductions of one block of `len` elements from its lanes (moments_kernel's per-block code; the kernels compute
/// the lanes in parallel, one per warp lane).
template <bool EF, bool Squares, bool Sum, bool Max>
[[nodiscard]] inline moments block_moments(const float* g, const float* r, std::size_t len) noexcept {
    moment_lane lanes[moment_lanes];
    for (std::size_t i = 0; i < len; ++i)
        moment_add<EF, Squares, Sum, Max>(lanes[i % moment_lanes], g[i], EF ? r[i] : 0.0f);
    double s[moment_lanes], q[moment_lanes];
    moments out;
    for (unsigned j = 0; j < moment_lanes; ++j) {
        s[j] = static_cast<double>(lanes[j].sum);
        q[j] = static_cast<double>(lanes[j].squares);
        out.max_abs = lanes[j].max_abs > out.max_abs ? lanes[j].max_abs : out.max_abs;
        out.bad |= lanes[j].bad;
    }
    moment_tree(s);
    moment_tree(q);
    out.sum = s[0];
    out.sum_squares = q[0];
    return out;
}

/// A group of `len` elements cut into reduction blocks (block b starts at b * moment_block within the group).
[[nodiscard]] HITCH_HD_INLINE constexpr std::size_t moment_blocks(std::size_t len) noexcept {
    return (len + moment_block - 1) / moment_block;
}

// ---- per-group scalars ----------------------------------------------------------------------------------------------

/// qsgd's group: its norm (sent) and quantiser, from the group's sum of squares; `finite` false refuses the bucket.
struct qsgd_group {
    float norm = 0.0f;
    quantizer q;
    bool finite = true;
};
[[nodiscard]] HITCH_HD_INLINE qsgd_group qsgd_setup(double sum_squares, std::uint32_t levels) noexcept {
    qsgd_group g;
    g.finite = finite(sum_squares);
    g.norm = static_cast<float>(hd::sqrt(sum_squares));
    const auto s = static_cast<float>(levels);
    g.q.to_levels =
        g.norm > 0.0f ? static_cast<float>(hd::div(static_cast<double>(levels), static_cast<double>(g.norm))) : 0.0f;
    g.q.unit = hd::div(g.norm, s);
    g.q.s = s;
    g.q.levels = static_cast<std::int32_t>(levels);
    g.q.clip = 0.0f;
    return g;
}

/// terngrad's two-pass scale and quantiser from the bucket's reductions (clip_sigmas 0: no clipping).
struct terngrad_scalars {
    float scale = 0.0f;
    quantizer q;
};
[[nodiscard]] HITCH_HD_INLINE terngrad_scalars terngrad_setup(const moments& m, std::size_t n,
                                                              double clip_sigmas) noexcept {
    float clip = hd::from_bits(0x7f800000u);
    float scale = m.max_abs;
    if (clip_sigmas > 0.0 && n > 0) {
        const auto count = static_cast<double>(n);
        const double mean = hd::div(m.sum, count);
        const double spread = dsub(hd::div(m.sum_squares, count), hd::mul(mean, mean));
        const double variance = 0.0 < spread ? spread : 0.0;
        clip = static_cast<float>(hd::mul(clip_sigmas, hd::sqrt(variance)));
        scale = clip < scale ? clip : scale;
    }
    terngrad_scalars t;
    t.scale = scale;
    t.q = {scale > 0.0f ? hd::div(1.0f, scale) : 0.0f, scale, 1.0f, 1, clip};
    return t;
}

/// terngrad's one-pass quantiser for a block whose running maximum is r.
[[nodiscard]] HITCH_HD_INLINE quantizer terngrad_running(float r) noexcept {
    return {r > 0.0f ? hd::div(1.0f, r) : 0.0f, r, 1.0f, 1, hd::from_bits(0x7f800000u)};
}

/// terngrad's thinning threshold of a block with running maximum r under the bucket's scale (only when
/// scale > 0 and r != scale).
[[nodiscard]] HITCH_HD_INLINE std::uint32_t terngrad_threshold(float r, float scale) noexcept {
    return static_cast<std::uint32_t>(hd::mul(hd::div(r, scale), 8388608.0f));
}

// ---- code streams ---------------------------------------------------------------------------------------------------

/// Bytes of n codes of b bits (compress::detail::code_bytes).
[[nodiscard]] HITCH_HD_INLINE constexpr std::size_t code_bytes(std::size_t n, unsigned b) noexcept {
    return (n * b + 7) / 8;
}

/// Packs count (at most 8) codes of b bits, least significant first, into ceil(count b / 8) bytes at out (the last
/// zero-padded): compress::detail::pack_codes on a run starting at a byte boundary.
HITCH_HD_INLINE void pack_codes8(const std::uint32_t* codes, unsigned count, unsigned b, unsigned char* out) noexcept {
    std::uint64_t acc = 0;
    unsigned bits = 0;
    for (unsigned i = 0; i < count; ++i) {
        acc |= static_cast<std::uint64_t>(codes[i]) << bits;
        bits += b;
        while (bits >= 8) {
            *out++ = static_cast<unsigned char>(acc);
            acc >>= 8;
            bits -= 8;
        }
    }
    if (bits > 0) *out = static_cast<unsigned char>(acc);
}

/// The b-bit code that starts `bit` bits into `bytes` (which hold it whole): compress::detail::code_at.
[[nodiscard]] HITCH_HD_INLINE std::uint32_t code_from(const unsigned char* bytes, unsigned bit, unsigned b) noexcept {
    const unsigned last = (bit + b - 1) / 8;
    std::uint32_t word = 0;
    for (unsigned k = 0; k <= last; ++k) word |= static_cast<std::uint32_t>(bytes[k]) << (8 * k);
    return (word >> bit) & ((1u << b) - 1u);
}

// ---- Elias-gamma lengths --------------------------------------------------------------------------------------------

[[nodiscard]] HITCH_HD_INLINE unsigned bit_width64(std::uint64_t x) noexcept {
#if defined(__CUDA_ARCH__)
    return 64u - static_cast<unsigned>(__clzll(static_cast<long long>(x)));
#else
    return static_cast<unsigned>(std::bit_width(x));
#endif
}

/// Bits of gamma(x), x >= 1 (bit_writer::gamma_bits).
[[nodiscard]] HITCH_HD_INLINE std::uint64_t gamma_bits(std::uint64_t x) noexcept { return 2 * bit_width64(x) - 1; }

/// Bits of one Elias entry of qsgd: the gap to the previous non-zero level, the sign, the level.
[[nodiscard]] HITCH_HD_INLINE std::uint64_t elias_entry_bits(std::uint64_t gap, std::uint32_t code) noexcept {
    return gamma_bits(gap) + 1 + gamma_bits(code >> 1);
}

}  // namespace hitch::cuda::compress::detail
