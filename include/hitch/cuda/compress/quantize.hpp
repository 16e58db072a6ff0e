#pragma once
// The stochastic quantiser of qsgd and terngrad for host and device (no CUDA header): per-element rounding
// (compress/detail/stochastic_round.hpp), the group reductions in the host's fixed order (compress/detail/
// moments.hpp: 32 float lanes per block of tuning::moment_block elements, folded into double by a fixed tree, the
// blocks added in order), the per-group scalars, the b-bit code streams (compress/detail/bitstream.hpp) and the
// Elias-gamma lengths (compress/detail/elias_gamma.hpp). Each is written once and run by the kernels
// (qsgd.cuh, terngrad.cuh); the host tests run the same functions against the CPU codecs, bit for bit.

#include <cstddef>
#include <cstdint>
#include <string>

#include "hitch/compress/tuning.hpp"
#include "hitch/core/error.hpp"
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

/// Quantises the `count` elements [first, first + count) of a bucket (within one random-number block) with the
/// encode's keyed generator: codes[j] for element first + j, and with EF its residual in r_out (a kernel thread's
/// run; g, r_in and r_out point at the bucket's element 0).
template <bool EF, bool Clip>
HITCH_HD_INLINE void quantize_run(const float* g, const float* r_in, float* r_out, std::size_t first, unsigned count,
                                  const quantizer& q, const counter_rng& base, std::uint32_t* codes) noexcept {
    const counter_rng rng = base.for_element(first);
    const auto offset = static_cast<std::uint32_t>(first % rng_block);
    for (unsigned j = 0; j < count; ++j) {
        float rest = 0.0f;
        codes[j] = quantize_element<EF, Clip>(g[first + j], EF ? r_in[first + j] : 0.0f, rest, rng.bits(offset + j), q);
        if constexpr (EF) r_out[first + j] = rest;
    }
}

/// terngrad's thinning of a run's codes (compress::detail::thin): a non-zero code of element first + j survives
/// iff thin_keeps with the thinning generator.
HITCH_HD_INLINE void thin_run(std::uint32_t* codes, std::size_t first, unsigned count, const counter_rng& thin_base,
                              std::uint32_t threshold) noexcept {
    const counter_rng rng = thin_base.for_element(first);
    const auto offset = static_cast<std::uint32_t>(first % rng_block);
    for (unsigned j = 0; j < count; ++j)
        if (codes[j] != 0 && !thin_keeps(rng, offset + j, threshold)) codes[j] = 0;
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

/// Reduction blocks of a bucket cut into groups of `size` elements (blocks restart at every group).
struct moment_plan {
    std::size_t n = 0;
    std::size_t size = 0;  // elements per group
    std::size_t groups = 0;
    std::size_t per_group = 1;  // reduction blocks of a full group
    std::size_t blocks = 0;

    [[nodiscard]] HITCH_HD_INLINE std::size_t start_of(std::size_t b) const noexcept {
        return (b / per_group) * size + (b % per_group) * moment_block;
    }
    [[nodiscard]] HITCH_HD_INLINE std::size_t length_of(std::size_t b) const noexcept {
        const std::size_t start = start_of(b), group_end = (b / per_group + 1) * size;
        const std::size_t end = group_end < n ? group_end : n;
        return end - start < moment_block ? end - start : moment_block;
    }
};

[[nodiscard]] HITCH_HD_INLINE moment_plan make_moment_plan(std::size_t n, std::size_t size) {
    moment_plan p;
    p.n = n;
    p.size = size;
    p.groups = n == 0 ? 0 : (n + size - 1) / size;
    p.per_group = size == 0 ? 1 : moment_blocks(size);
    if (p.groups != 0) p.blocks = (p.groups - 1) * p.per_group + moment_blocks(n - (p.groups - 1) * size);
    return p;
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

/// The b-bit code that starts `bit` bits into `bytes`: compress::detail::code_at with a bit offset (any size).
[[nodiscard]] HITCH_HD_INLINE std::uint32_t code_from(const unsigned char* bytes, std::size_t bit,
                                                      unsigned b) noexcept {
    const std::size_t first = bit / 8, last = (bit + b - 1) / 8;
    std::uint32_t word = 0;
    for (std::size_t k = first; k <= last; ++k) word |= static_cast<std::uint32_t>(bytes[k]) << (8 * (k - first));
    return (word >> (bit % 8)) & ((1u << b) - 1u);
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

/// Writes one Elias entry of qsgd (gamma(gap), the sign, gamma(level)) starting at stream bit `at`, as bit_writer
/// writes it, by calling set(p) for each stream bit p that is 1 (the stream starts zeroed).
template <class Set>
HITCH_HD_INLINE void elias_entry(std::uint64_t at, std::uint64_t gap, std::uint32_t code, Set&& set) {
    const auto put = [&](std::uint64_t value, unsigned count) {
        for (unsigned k = 0; k < count; ++k)
            if ((value >> (count - 1 - k)) & 1u) set(at + k);
        at += count;
    };
    const std::uint64_t level = code >> 1;
    const unsigned wg = bit_width64(gap), wl = bit_width64(level);
    at += wg - 1;  // gamma's leading zeros
    put(gap, wg);
    put(code & 1u, 1);
    at += wl - 1;
    put(level, wl);
}

/// What the Elias parse found wrong (kind 0: nothing), in the host decoder's terms: 1 the stream ends or a value
/// overflows in `entry`, 2 its index is outside the bucket, 3 its `level` exceeds s, 4 bits follow the stream.
struct elias_status {
    std::uint32_t kind = 0;
    std::uint64_t entry = 0;
    std::uint64_t level = 0;
};

[[nodiscard]] HITCH_HD_INLINE unsigned countl_zero64(std::uint64_t x) noexcept {
#if defined(__CUDA_ARCH__)
    return static_cast<unsigned>(__clzll(static_cast<long long>(x)));
#else
    return static_cast<unsigned>(std::countl_zero(x));
#endif
}

/// The 64 stream bits from bit `pos` on, first bit highest (bit p is bit 7 - p % 8 of byte p / 8; bits past the
/// end read as zero).
[[nodiscard]] HITCH_HD_INLINE std::uint64_t elias_peek(const unsigned char* s, std::size_t bytes,
                                                       std::uint64_t pos) noexcept {
    const std::uint64_t at = pos / 8;
    const unsigned off = static_cast<unsigned>(pos % 8);
    std::uint64_t w = 0;
    for (unsigned k = 0; k < 8; ++k) w = w << 8 | (at + k < bytes ? s[at + k] : 0u);
    if (off == 0) return w;
    const std::uint64_t next = at + 8 < bytes ? s[at + 8] : 0u;
    return w << off | next >> (8 - off);
}

/// bit_reader::gamma from bit `pos` (advanced past the code): false exactly where the host's reader fails (the
/// stream ends first, or more than 62 leading zeros).
[[nodiscard]] HITCH_HD_INLINE bool elias_gamma(const unsigned char* s, std::size_t bytes, std::uint64_t& pos,
                                               std::uint64_t& x) noexcept {
    const std::uint64_t total = 8 * static_cast<std::uint64_t>(bytes);
    const std::uint64_t w = elias_peek(s, bytes, pos);
    const unsigned zeros = w == 0 ? 64u : countl_zero64(w);
    if (zeros > 62 || zeros >= total - pos) return false;
    if (pos + 2 * static_cast<std::uint64_t>(zeros) + 1 > total) return false;
    x = elias_peek(s, bytes, pos + zeros) >> (63 - zeros);
    pos += 2 * static_cast<std::uint64_t>(zeros) + 1;
    return true;
}

/// qsgd's decode_elias up to the values: walks nnz entries (gamma(gap), sign, gamma(level)) of the stream as the
/// host's decoder does, writing each entry's index and code, and stops at the first thing the host would refuse.
[[nodiscard]] HITCH_HD_INLINE elias_status elias_parse(const unsigned char* s, std::size_t bytes, std::uint64_t nnz,
                                                       std::uint64_t n, std::uint32_t levels, std::uint64_t* index,
                                                       std::uint32_t* code) noexcept {
    const std::uint64_t total = 8 * static_cast<std::uint64_t>(bytes);
    std::uint64_t pos = 0, prev = 0;
    for (std::uint64_t j = 0; j < nnz; ++j) {
        std::uint64_t gap = 0, level = 0;
        bool ok = elias_gamma(s, bytes, pos, gap) && pos < total;
        unsigned sign = 0;
        if (ok) {
            sign = static_cast<unsigned>(elias_peek(s, bytes, pos) >> 63);
            ++pos;
            ok = elias_gamma(s, bytes, pos, level);
        }
        if (!ok) return {1, j, 0};
        if (gap > n || prev + gap > n) return {2, j, 0};
        if (level > levels) return {3, j, level};
        prev += gap;
        index[j] = prev - 1;
        code[j] = static_cast<std::uint32_t>(level << 1 | sign);
    }
    const std::uint64_t left = total - pos;
    if (left >= 8 || (left > 0 && (elias_peek(s, bytes, pos) >> (64 - left)) != 0)) return {4, 0, 0};
    return {};
}

// ---- the Elias stream in parallel ---------------------------------------------------------------------------------
// Entries are found only in sequence, but decoding is deterministic: two walks that meet at one entry start go on
// together. So the stream is cut into chunks, each walked from a guessed start (its first bit) with its entry starts
// marked in a bitmap; then, in rounds until nothing changes, each chunk whose predecessor's exit (the first entry
// start past it) differs from where its own walk began walks again from there until it meets a start of its previous
// walk, and takes the rest (and the count of what is left) from that walk. After round r, chunks 0 .. r are certain,
// and walks usually meet within a few entries, so a few rounds do. The entry starts are then listed in order, and
// every entry is decoded and checked in parallel, reporting the first failure in the host decoder's order.

/// Bits per chunk of the parallel parse (the kernels' choice; the tests also run small ones).
inline constexpr std::uint64_t elias_chunk_bits = 4096;
/// No entry start: a walk met an entry that does not decode (or began at none).
inline constexpr std::uint64_t elias_none = ~std::uint64_t{0};

/// The bits of the entry at bit `pos`, 0 when it does not decode (elias_parse's kind 1).
[[nodiscard]] HITCH_HD_INLINE std::uint64_t elias_entry_length(const unsigned char* s, std::size_t bytes,
                                                               std::uint64_t pos) noexcept {
    const std::uint64_t total = 8 * static_cast<std::uint64_t>(bytes);
    if (pos >= total) return 0;
    std::uint64_t p = pos, x = 0;
    if (!elias_gamma(s, bytes, p, x) || p >= total) return 0;
    ++p;
    if (!elias_gamma(s, bytes, p, x)) return 0;
    return p - pos;
}

[[nodiscard]] HITCH_HD_INLINE unsigned popcount32(std::uint32_t x) noexcept {
#if defined(__CUDA_ARCH__)
    return static_cast<unsigned>(__popc(x));
#else
    return static_cast<unsigned>(std::popcount(x));
#endif
}

/// A chunk's walk: where it leaves the chunk (the first entry start at or past its end; elias_none after an entry
/// that does not decode) and how many entries start within it.
struct elias_walk {
    std::uint64_t exit = elias_none;
    std::uint64_t entries = 0;
};

/// The chunk [begin, end) of a stream, its entry starts marked in `marks` (bit q - begin, 32 per word).
struct elias_chunk {
    const unsigned char* s;
    std::size_t bytes;
    std::uint64_t begin;
    std::uint64_t end;
    std::uint32_t* marks;

    [[nodiscard]] HITCH_HD_INLINE bool marked(std::uint64_t q) const noexcept {
        return (marks[(q - begin) / 32] >> ((q - begin) % 32)) & 1u;
    }
    HITCH_HD_INLINE void set_marks(std::uint64_t q, bool on) const noexcept {
        const std::uint32_t bit = 1u << ((q - begin) % 32);
        marks[(q - begin) / 32] = on ? marks[(q - begin) / 32] | bit : marks[(q - begin) / 32] & ~bit;
    }
    /// Marked starts in [begin, q).
    [[nodiscard]] HITCH_HD_INLINE std::uint64_t rank(std::uint64_t q) const noexcept {
        std::uint64_t r = 0;
        const std::uint64_t bits = q - begin;
        for (std::uint64_t w = 0; w < bits / 32; ++w) r += popcount32(marks[w]);
        if (bits % 32 != 0) r += popcount32(marks[bits / 32] & ((1u << (bits % 32)) - 1u));
        return r;
    }
    /// Unmarks [begin, q).
    HITCH_HD_INLINE void clear_below(std::uint64_t q) const noexcept {
        const std::uint64_t bits = q - begin;
        for (std::uint64_t w = 0; w < bits / 32; ++w) marks[w] = 0;
        if (bits % 32 != 0) marks[bits / 32] &= ~((1u << (bits % 32)) - 1u);
    }

    /// Walks from `from` (a start at or past begin, or elias_none) to the chunk's exit, marking the starts, after
    /// clearing every mark.
    HITCH_HD_INLINE elias_walk first_walk(std::uint64_t from) const noexcept {
        clear_below(end);
        elias_walk w;
        if (from == elias_none) return w;
        std::uint64_t p = from;
        while (p < end) {
            const std::uint64_t len = elias_entry_length(s, bytes, p);
            if (len == 0) return {elias_none, w.entries};
            set_marks(p, true);
            ++w.entries;
            p += len;
        }
        w.exit = p;
        return w;
    }

    /// Walks again from `from`, the previous walk being `old` (its starts marked): up to the first start the two
    /// share, whose rest it takes from `old`; the marks then hold the new walk's starts.
    HITCH_HD_INLINE elias_walk rewalk(std::uint64_t from, const elias_walk& old) const noexcept {
        if (from == elias_none) return first_walk(from);
        std::uint64_t p = from, k = 0;
        bool failed = false;
        while (p < end && !marked(p)) {
            const std::uint64_t len = elias_entry_length(s, bytes, p);
            if (len == 0) {
                failed = true;
                break;
            }
            ++k;
            p += len;
        }
        if (failed || p >= end) return first_walk(from);  // no meeting within the chunk: the new walk is all
        const elias_walk w{old.exit, k + old.entries - rank(p)};
        clear_below(p);
        for (std::uint64_t q = from; q < p; q += elias_entry_length(s, bytes, q)) set_marks(q, true);
        return w;
    }
};

/// Chunk c of a stream of `bytes` bytes cut into chunks of `chunk_bits` (a multiple of 32), its marks at
/// marks + c * chunk_bits / 32.
[[nodiscard]] HITCH_HD_INLINE elias_chunk elias_chunk_of(const unsigned char* s, std::size_t bytes, std::uint64_t c,
                                                         std::uint64_t chunk_bits, std::uint32_t* marks) noexcept {
    const std::uint64_t total = 8 * static_cast<std::uint64_t>(bytes);
    const std::uint64_t begin = c * chunk_bits, end = begin + chunk_bits < total ? begin + chunk_bits : total;
    return {s, bytes, begin, end, marks + c * (chunk_bits / 32)};
}

/// Chunks of a stream.
[[nodiscard]] HITCH_HD_INLINE constexpr std::uint64_t elias_chunks(std::size_t bytes,
                                                                   std::uint64_t chunk_bits) noexcept {
    return (8 * static_cast<std::uint64_t>(bytes) + chunk_bits - 1) / chunk_bits;
}

/// One round for chunk c >= 1: when its predecessor's exit `want` is not where its walk began (`in`), walk again
/// from there. Returns whether it did.
HITCH_HD_INLINE bool elias_round(const elias_chunk& ch, std::uint64_t want, std::uint64_t& in, const elias_walk& old,
                                 elias_walk& now) noexcept {
    if (want == in) {
        now = old;
        return false;
    }
    now = ch.rewalk(want, old);
    in = want;
    return true;
}

/// Lists the entry starts of a settled chunk (walked from `from`): starts[offset + i] for its entries i while
/// offset + i < limit.
HITCH_HD_INLINE void elias_list_starts(const elias_chunk& ch, std::uint64_t from, std::uint64_t offset,
                                       std::uint64_t limit, std::uint64_t* starts) noexcept {
    if (from == elias_none) return;
    for (std::uint64_t p = from, j = offset; p < ch.end && j < limit; ++j) {
        const std::uint64_t len = elias_entry_length(ch.s, ch.bytes, p);
        if (len == 0) return;
        starts[j] = p;
        p += len;
    }
}

/// The saturating sum of the gaps, the entries' indices + 1 up to the first that passes the bucket (cap = n + 1):
/// associative, so a scan computes it.
struct elias_index_sum {
    std::uint64_t cap;
    [[nodiscard]] HITCH_HD_INLINE std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const noexcept {
        return a + b < cap ? a + b : cap;
    }
};

/// Entry j's fields, at a start known to decode.
struct elias_entry_fields {
    std::uint64_t gap = 0;
    std::uint64_t level = 0;
    unsigned sign = 0;
    std::uint64_t end = 0;  // the bit after it
};
[[nodiscard]] HITCH_HD_INLINE elias_entry_fields elias_entry_at(const unsigned char* s, std::size_t bytes,
                                                                std::uint64_t pos) noexcept {
    elias_entry_fields f;
    std::uint64_t p = pos;
    (void)elias_gamma(s, bytes, p, f.gap);
    f.sign = static_cast<unsigned>(elias_peek(s, bytes, p) >> 63);
    ++p;
    (void)elias_gamma(s, bytes, p, f.level);
    f.end = p;
    return f;
}

/// What follows the last entry read at bit `pos` is padding (fewer than 8 zero bits): elias_parse's last check.
[[nodiscard]] HITCH_HD_INLINE bool elias_only_padding(const unsigned char* s, std::size_t bytes,
                                                      std::uint64_t pos) noexcept {
    const std::uint64_t left = 8 * static_cast<std::uint64_t>(bytes) - pos;
    return left < 8 && (left == 0 || (elias_peek(s, bytes, pos) >> (64 - left)) == 0);
}

/// The first failure of the parallel parse, as a key that orders entries first and, within an entry, the host's
/// checks in their order: j * 4 + (0 decode, 1 index, 2 level).
[[nodiscard]] HITCH_HD_INLINE constexpr std::uint64_t elias_failure_key(std::uint64_t j, unsigned check) noexcept {
    return 4 * j + check;
}

/// What the host's decoder reports for a failed parse (the text after "<who>: corrupt message: "). Host code.
[[nodiscard]] inline std::string elias_failure(const elias_status& st, std::uint64_t nnz, std::uint64_t n,
                                               std::uint32_t s) {
    switch (st.kind) {
        case 1:
            return hitch::detail::concat("Elias stream ends or overflows in entry ", st.entry, " of ", nnz);
        case 2:
            return hitch::detail::concat("index of entry ", st.entry, " is outside the bucket of ", n, " elements");
        case 3:
            return hitch::detail::concat("level ", st.level, " of entry ", st.entry, " exceeds ", s);
        default:
            return "unexpected bits after the Elias stream";
    }
}

}  // namespace hitch::cuda::compress::detail
