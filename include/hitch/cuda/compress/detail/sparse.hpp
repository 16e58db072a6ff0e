#pragma once
// The per-element math of the sparse codecs on the GPU (threshold, topk, dgc), written once for nvcc and the host
// compiler: magnitudes as bits, the radix-select passes that find the k-th largest magnitude, the tie rule, and the
// sparse payload's varints (sizes, writer, and the checks of a parallel reader). The kernels (detail/sparse.cuh)
// call these; the host tests compare them with the CPU codecs (compress/detail/sparse.hpp, compress/wire.hpp).
//
// Magnitudes are compared as the bits of |v| (the sign bit cleared): for finite values and zeros this is the order
// of std::fabs, and NaN and the infinities sort above every finite value, so a scan that selects by bits also meets
// every non-finite element and can report it.

#include <cstddef>
#include <cstdint>

#include "hitch/cuda/detail/hd.hpp"

namespace hitch::cuda::compress::detail::sparse {

// ---- magnitudes ------------------------------------------------------------------------------------------------

/// The bits of |x|: ordered as |x| for every finite x (+0 and -0 both give 0).
[[nodiscard]] HITCH_HD_INLINE std::uint32_t magnitude_bits(float x) noexcept { return hd::bits(x) & 0x7fffffffu; }
/// Bits of the largest finite magnitude; anything above is an infinity or NaN.
inline constexpr std::uint32_t max_finite_bits = 0x7f7fffffu;
/// The bits of +infinity (NaN magnitudes are above it).
inline constexpr std::uint32_t infinity_bits = 0x7f800000u;
[[nodiscard]] HITCH_HD_INLINE bool non_finite_bits(std::uint32_t m) noexcept { return m > max_finite_bits; }
/// The sign of x as 0 or 1 (std::signbit).
[[nodiscard]] HITCH_HD_INLINE std::uint64_t sign_bit(float x) noexcept { return hd::bits(x) >> 31; }

// ---- radix select --------------------------------------------------------------------------------------------------
// The k-th largest of 31-bit magnitudes in three passes of 11, 10 and 10 bits, most significant first. Each pass
// counts, among the elements whose higher bits equal the prefix found so far, how many fall in each bin of the
// pass's digit; the bin holding the k-th largest extends the prefix. After the last pass the prefix is the k-th
// largest magnitude t exactly, `above` counts the elements with magnitude > t, `ties` those equal to t, and
// `remaining` (1 <= remaining <= ties) how many of the ties the top k take: the lowest-indexed ones, as the host's
// keep_top does.

struct radix_pass {
    unsigned shift;
    unsigned bits;
};
inline constexpr unsigned radix_pass_count = 3;
/// Pass i's digit: bits [20, 31), [10, 20), [0, 10) of the magnitude.
[[nodiscard]] HITCH_HD_INLINE radix_pass radix_pass_at(unsigned i) noexcept {
    return i == 0 ? radix_pass{20, 11} : (i == 1 ? radix_pass{10, 10} : radix_pass{0, 10});
}
/// Bins of the widest pass (histogram storage).
inline constexpr unsigned radix_max_bins = 1u << 11;
/// First bin of the first pass that holds only non-finite magnitudes (0x7f800000 >> 20).
inline constexpr unsigned radix_first_non_finite_bin = infinity_bits >> 20;

/// Where a selection stands between passes.
struct radix_state {
    std::uint32_t prefix = 0;       // bits of t decided so far
    std::uint32_t prefix_mask = 0;  // which bits of t are decided
    std::uint64_t remaining = 0;    // rank of t among the elements matching the prefix, from the top (1-based)
    std::uint64_t above = 0;        // elements certainly above t (in higher bins of earlier passes)
    std::uint64_t ties = 0;         // after the last pass: elements whose magnitude equals t
    std::uint64_t last_tie = 0;     // the highest index (or position) of a tie the top k take
    std::uint32_t non_finite = 0;   // 1 when the first pass met NaN or an infinity
};

/// Whether magnitude m counts in the pass that follows the prefix in `s`, and its bin there.
[[nodiscard]] HITCH_HD_INLINE bool radix_matches(const radix_state& s, std::uint32_t m) noexcept {
    return (m & s.prefix_mask) == s.prefix;
}
[[nodiscard]] HITCH_HD_INLINE unsigned radix_bin(std::uint32_t m, radix_pass p) noexcept {
    return (m >> p.shift) & ((1u << p.bits) - 1u);
}

/// Extends the prefix of `s` with bin b of pass p, which holds `count` elements and has `higher` elements in the
/// bins above it.
HITCH_HD_INLINE void radix_take_bin(radix_state& s, radix_pass p, unsigned b, std::uint64_t higher, std::uint64_t count,
                                    bool last) noexcept {
    s.above += higher;
    s.remaining -= higher;
    s.prefix |= static_cast<std::uint32_t>(b) << p.shift;
    s.prefix_mask |= ((1u << p.bits) - 1u) << p.shift;
    if (last) s.ties = count;
}

/// Chooses the bin of pass p that holds the remaining-th largest, given the counts of the pass's bins (sequentially,
/// from the top bin down; the kernels find the same bin with a block-wide suffix sum) and extends the prefix.
/// Returns the chosen bin.
HITCH_HD_INLINE unsigned radix_choose(const std::uint32_t* hist, radix_pass p, bool last, radix_state& s) noexcept {
    const unsigned bins = 1u << p.bits;
    std::uint64_t higher = 0;
    unsigned b = bins - 1;
    for (;; --b) {
        if (higher + hist[b] >= s.remaining || b == 0) break;
        higher += hist[b];
    }
    radix_take_bin(s, p, b, higher, hist[b], last);
    return b;
}

/// The rule of top-k with ties to the lowest indices: selected iff |v| > t, or |v| == t and the index is at most
/// the last tie taken.
[[nodiscard]] HITCH_HD_INLINE bool topk_selected(std::uint32_t m, std::uint64_t i, std::uint32_t t,
                                                 std::uint64_t last_tie) noexcept {
    return m > t || (m == t && i <= last_tie);
}

// ---- varints (unsigned LEB128, as compress/wire.hpp) -------------------------------------------------------------

/// Bytes of v as a varint (1 to 10).
[[nodiscard]] HITCH_HD_INLINE unsigned varint_size(std::uint64_t v) noexcept {
    unsigned size = 1;
    while (v >= 0x80u) {
        v >>= 7;
        ++size;
    }
    return size;
}

/// Writes v at `at` and returns the position after it.
HITCH_HD_INLINE unsigned char* put_varint(unsigned char* at, std::uint64_t v) noexcept {
    while (v >= 0x80u) {
        *at++ = static_cast<unsigned char>((v & 0x7fu) | 0x80u);
        v >>= 7;
    }
    *at++ = static_cast<unsigned char>(v);
    return at;
}

/// A byte that ends a varint (its continuation bit is clear).
[[nodiscard]] HITCH_HD_INLINE bool ends_varint(unsigned char b) noexcept { return (b & 0x80u) == 0; }

/// Decodes the varint in [at, at + len), whose last byte is its only terminator (the parallel reader finds the
/// terminators first). Returns false where the host's wire::varint_reader throws: more than 10 bytes, or a tenth
/// byte above 1 (the value overflows 64 bits).
[[nodiscard]] HITCH_HD_INLINE bool read_varint(const unsigned char* at, std::uint64_t len,
                                               std::uint64_t& value) noexcept {
    if (len == 0 || len > 10) return false;
    if (len == 10 && at[9] > 1u) return false;
    std::uint64_t v = 0;
    for (unsigned i = 0; i < len; ++i) v |= static_cast<std::uint64_t>(at[i] & 0x7fu) << (7u * i);
    value = v;
    return true;
}

/// u + v, or the largest u64 when that overflows: an associative sum, so the index scan of a corrupt message cannot
/// wrap around to a valid index.
[[nodiscard]] HITCH_HD_INLINE std::uint64_t saturating_add(std::uint64_t u, std::uint64_t v) noexcept {
    const std::uint64_t s = u + v;
    return s < u ? ~std::uint64_t{0} : s;
}

// ---- payload layouts ------------------------------------------------------------------------------------------------

/// topk and dgc: u64 k | k x f32 values | k varints of index gaps (the first index, then index - previous - 1).
struct sparse_layout {
    static constexpr std::size_t count_bytes = 8;
    [[nodiscard]] static HITCH_HD_INLINE std::size_t values_at() noexcept { return count_bytes; }
    [[nodiscard]] static HITCH_HD_INLINE std::size_t varints_at(std::size_t k) noexcept { return count_bytes + 4 * k; }
};
/// threshold: u64 count | f32 tau | count varints of (gap << 1 | sign).
struct threshold_layout {
    static constexpr std::size_t fixed_bytes = 12;
};

/// The gap coded for entry j, whose index is i, after an entry with index `prev` (j > 0).
[[nodiscard]] HITCH_HD_INLINE std::uint64_t index_gap(std::uint64_t j, std::uint64_t i, std::uint64_t prev) noexcept {
    return j == 0 ? i : i - prev - 1;
}
/// threshold's code of a sent element: its gap, and its sign in the lowest bit.
[[nodiscard]] HITCH_HD_INLINE std::uint64_t threshold_code(std::uint64_t gap, float value) noexcept {
    return gap << 1 | sign_bit(value);
}

/// The code of entry j of a topk / dgc payload: its index gap.
[[nodiscard]] HITCH_HD_INLINE std::uint64_t sparse_code(const std::uint64_t* index, std::uint64_t j) noexcept {
    return index_gap(j, index[j], j == 0 ? 0 : index[j - 1]);
}
/// The code of entry j of a threshold payload, whose elements are v[index[j]].
[[nodiscard]] HITCH_HD_INLINE std::uint64_t threshold_entry_code(const std::uint64_t* index, const float* v,
                                                                 std::uint64_t j) noexcept {
    return threshold_code(sparse_code(index, j), v[index[j]]);
}

/// Stores a little-endian u64 or f32 at a byte address (no alignment needed).
HITCH_HD_INLINE void store_u64(unsigned char* at, std::uint64_t v) noexcept {
    for (unsigned i = 0; i < 8; ++i) at[i] = static_cast<unsigned char>(v >> (8u * i));
}
HITCH_HD_INLINE void store_f32(unsigned char* at, float x) noexcept {
    const std::uint32_t b = hd::bits(x);
    for (unsigned i = 0; i < 4; ++i) at[i] = static_cast<unsigned char>(b >> (8u * i));
}
[[nodiscard]] HITCH_HD_INLINE std::uint64_t load_u64(const unsigned char* at) noexcept {
    std::uint64_t v = 0;
    for (unsigned i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(at[i]) << (8u * i);
    return v;
}
[[nodiscard]] HITCH_HD_INLINE float load_f32(const unsigned char* at) noexcept {
    std::uint32_t b = 0;
    for (unsigned i = 0; i < 4; ++i) b |= static_cast<std::uint32_t>(at[i]) << (8u * i);
    return hd::from_bits(b);
}

// ---- element-wise steps of the codecs ---------------------------------------------------------------------------

/// threshold with error feedback: what stays of a sent element r (|r| >= tau): r - sign(r) tau.
[[nodiscard]] HITCH_HD_INLINE float threshold_residual(float r, float tau) noexcept {
    return hd::sub(r, sign_bit(r) != 0 ? -tau : tau);
}

/// DGC's momentum correction of one element (Lin et al. 2018), as compress::dgc computes it: with gi = scale g,
///   plain      u = m u0 + gi;        v = v0 + u
///   Nesterov   u = m (u0 + gi);      v = v0 + (u + gi)
HITCH_HD_INLINE void dgc_momentum(float g, float scale, float m, bool nesterov, float u0, float v0, float& u,
                                  float& v) noexcept {
    if (nesterov) {
        const float gi = hd::mul(scale, g);
        u = hd::mul(m, hd::add(u0, gi));
        v = hd::add(v0, hd::add(u, gi));
    } else {
        u = hd::add(hd::mul(m, u0), hd::mul(scale, g));
        v = hd::add(v0, u);
    }
}

/// DGC's squared norm (compress::detail::dgc_squared_norm), one lane of one block: the sum, in order, of g_i^2 over
/// the elements i of [b0, min(n, b0 + block)) with (i - b0) % 8 == lane.
[[nodiscard]] HITCH_HD_INLINE double dgc_lane_sum(const float* g, std::uint64_t n, std::uint64_t b0,
                                                  std::uint64_t block, unsigned lane) noexcept {
    double sum = 0.0;
    const std::uint64_t end = b0 + block < n ? b0 + block : n;
    for (std::uint64_t i = b0 + lane; i < end; i += 8) {
        const double x = static_cast<double>(g[i]);
        sum = hd::add(sum, hd::mul(x, x));
    }
    return sum;
}
/// A block's eight lanes folded ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)).
[[nodiscard]] HITCH_HD_INLINE double dgc_fold_lanes(const double* l) noexcept {
    return hd::add(hd::add(hd::add(l[0], l[1]), hd::add(l[2], l[3])),
                   hd::add(hd::add(l[4], l[5]), hd::add(l[6], l[7])));
}
/// DGC's clipping factor: min(1, limit / ||g||) with limit = c / sqrt(N), as compress::dgc rounds it (1 when
/// clipping is off).
[[nodiscard]] HITCH_HD_INLINE float dgc_scale(double norm2, double limit, bool clip) noexcept {
    if (!clip) return 1.0f;
    const double norm = hd::sqrt(norm2);
    return norm > limit ? static_cast<float>(hd::div(limit, norm)) : 1.0f;
}

}  // namespace hitch::cuda::compress::detail::sparse
