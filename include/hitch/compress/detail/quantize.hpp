#pragma once
// Stochastic quantisation shared by qsgd and terngrad: reductions over a group (sum of squares, largest magnitude,
// sum), unbiased stochastic rounding to s levels, and packing of the per-element codes into a bit stream.
//
// An element v with unit u = scale / s (scale: the group's norm for QSGD, its largest magnitude for TernGrad) is
// sent as level l in [0, s] with sign:  y = |v| / u,  l = floor(y) + [U < y - floor(y)],  U ~ uniform[0, 1),
// so E[l u] = |v| (Alistarh et al. 2017, Lemma 3.1; Wen et al. 2017, eq. 3). U comes from the counter-based
// generator, indexed by the element's position, so the result does not depend on the code path.
//
// Code of an element: (level << 1) | sign, in b = 1 + bit_width(s) bits, element i at bits [i b, (i + 1) b) of
// the stream, least significant bit first. A zero level carries sign 0 (a "negative zero" code is corrupt).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/simd.hpp"

namespace hitch::compress::detail {

/// Reductions of a group, in eight double lanes (element i into lane i % 8), combined in lane order: the same
/// bits from every code path.
struct group_moments {
    double sum = 0.0;
    double sum_squares = 0.0;
    float max_abs = 0.0f;
};

template <bool EF>
HITCH_COMPRESS_ALWAYS_INLINE group_moments moments_kernel(const float* g, const float* r, std::size_t n) {
    double s[8] = {}, q[8] = {};
    float m[8] = {};
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (std::size_t j = 0; j < 8; ++j) {
            float v = g[i + j];
            if constexpr (EF) v += r[i + j];
            s[j] += static_cast<double>(v);
            q[j] += static_cast<double>(v) * static_cast<double>(v);
            // NaN-propagating max (a NaN must not vanish into the comparison).
            const float a = std::fabs(v);
            m[j] = (a > m[j] || a != a) ? a : m[j];
        }
    for (std::size_t j = 0; i < n; ++i, ++j) {
        float v = g[i];
        if constexpr (EF) v += r[i];
        s[j] += static_cast<double>(v);
        q[j] += static_cast<double>(v) * static_cast<double>(v);
        const float a = std::fabs(v);
        m[j] = (a > m[j] || a != a) ? a : m[j];
    }
    group_moments out;
    for (std::size_t j = 0; j < 8; ++j) {
        out.sum += s[j];
        out.sum_squares += q[j];
        out.max_abs = (m[j] > out.max_abs || m[j] != m[j]) ? m[j] : out.max_abs;
    }
    return out;
}

template <bool EF>
inline group_moments moments(const float* g, const float* r, std::size_t n) {
    return run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA { return moments_kernel<EF>(g, r, n); });
}

/// Elements per random-number block: element i uses counter_rng(key).at_block(i / 65536).bits(i % 65536).
inline constexpr std::size_t rng_block = 65536;

/// Quantises n elements starting at global index `first` (the caller keeps [first, first + n) inside one rng block)
/// to codes; with EF also writes r_out = v - decoded. `clip` (TernGrad's clipping) bounds |v| first.
template <bool EF, class Code>
HITCH_COMPRESS_ALWAYS_INLINE void quantize_kernel(const float* g, const float* r_in, float* r_out, std::size_t n,
                                                  std::uint32_t first_in_block, counter_rng rng, float to_levels,
                                                  float unit, float s, float clip, Code* codes) {
    for (std::size_t i = 0; i < n; ++i) {
        float v = g[i];
        if constexpr (EF) v += r_in[i];
        const float a = std::min(std::fabs(v), clip);
        const float y = std::min(a * to_levels, s);
        const float floor_y = static_cast<float>(static_cast<std::int32_t>(y));
        const float u = rng.uniform(first_in_block + static_cast<std::uint32_t>(i));
        const float level = floor_y + (u < y - floor_y ? 1.0f : 0.0f);
        const std::uint32_t negative = (std::bit_cast<std::uint32_t>(v) >> 31) & (level > 0.0f ? 1u : 0u);
        codes[i] = static_cast<Code>(static_cast<std::uint32_t>(level) << 1 | negative);
        if constexpr (EF) {
            const float sent = level * unit;
            r_out[i] = v - (negative ? -sent : sent);
        }
    }
}

/// Quantises [begin, begin + n) of a bucket (indices global, for the random numbers) into codes[0, n).
template <bool EF, class Code>
inline void quantize(const float* g, const float* r_in, float* r_out, std::size_t n, std::size_t begin,
                     std::uint64_t key, float to_levels, float unit, float s, float clip, Code* codes) {
    const counter_rng base(key);
    std::size_t done = 0;
    while (done < n) {
        const std::size_t index = begin + done;
        const std::size_t block = index / rng_block, offset = index % rng_block;
        const std::size_t len = std::min(n - done, rng_block - offset);
        const counter_rng rng = base.at_block(block);
        const float* gp = g + done;
        const float* rp = EF ? r_in + done : r_in;
        float* op = EF ? r_out + done : r_out;
        Code* cp = codes + done;
        run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA {
            quantize_kernel<EF>(gp, rp, op, len, static_cast<std::uint32_t>(offset), rng, to_levels, unit, s, clip, cp);
        });
        done += len;
    }
}

// ---- bit streams of b-bit codes (b in [2, 16]) ----------------------------------------------------------------

/// Bytes of n codes of b bits.
[[nodiscard]] constexpr std::size_t code_bytes(std::size_t n, unsigned b) noexcept { return (n * b + 7) / 8; }

HITCH_COMPRESS_ALWAYS_INLINE void pack_nibbles(const std::uint8_t* codes, std::byte* out, std::size_t pairs) {
    for (std::size_t j = 0; j < pairs; ++j)
        out[j] = static_cast<std::byte>(codes[2 * j] | codes[2 * j + 1] << 4);
}
HITCH_COMPRESS_ALWAYS_INLINE void pack_pairs_of_bits(const std::uint8_t* codes, std::byte* out, std::size_t quads) {
    for (std::size_t j = 0; j < quads; ++j)
        out[j] = static_cast<std::byte>(codes[4 * j] | codes[4 * j + 1] << 2 | codes[4 * j + 2] << 4 | codes[4 * j + 3] << 6);
}

/// Writes n codes of b bits at `out`, which starts on a byte boundary of the stream; the last byte is zero-padded.
template <class Code>
inline void pack_codes(const Code* codes, std::size_t n, unsigned b, std::byte* out) {
    if constexpr (sizeof(Code) == 1) {
        if (b == 8) {
            std::memcpy(out, codes, n);
            return;
        }
        if (b == 4) {
            const std::size_t pairs = n / 2;
            run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA { pack_nibbles(codes, out, pairs); });
            if (n % 2) out[pairs] = static_cast<std::byte>(codes[n - 1]);
            return;
        }
        if (b == 2) {
            const std::size_t quads = n / 4;
            run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA { pack_pairs_of_bits(codes, out, quads); });
            if (n % 4) {
                unsigned last = 0;
                for (std::size_t i = quads * 4; i < n; ++i) last |= static_cast<unsigned>(codes[i]) << (2 * (i - quads * 4));
                out[quads] = static_cast<std::byte>(last);
            }
            return;
        }
    }
    std::uint64_t acc = 0;
    unsigned bits = 0;
    std::byte* p = out;
    for (std::size_t i = 0; i < n; ++i) {
        acc |= static_cast<std::uint64_t>(codes[i]) << bits;
        bits += b;
        while (bits >= 8) {
            *p++ = static_cast<std::byte>(acc);
            acc >>= 8;
            bits -= 8;
        }
    }
    if (bits > 0) *p = static_cast<std::byte>(acc);
}

/// Code i of a stream of b-bit codes (the stream holds at least code_bytes(i + 1, b) bytes).
[[nodiscard]] inline std::uint32_t code_at(const std::byte* stream, std::size_t i, unsigned b) noexcept {
    const std::size_t bit = i * b;
    const std::size_t first = bit / 8, last = (bit + b - 1) / 8;
    std::uint32_t word = 0;
    for (std::size_t k = first; k <= last; ++k) word |= static_cast<std::uint32_t>(stream[k]) << (8 * (k - first));
    return (word >> (bit % 8)) & ((1u << b) - 1u);
}

// ---- Elias-gamma codes (Elias 1975), most significant bit first --------------------------------------------------

class bit_writer {
public:
    explicit bit_writer(std::byte* out) : out_(out) {}
    void put(std::uint64_t value, unsigned count) {  // the low `count` bits of value, highest first
        for (unsigned k = count; k-- > 0;) {
            cur_ = static_cast<std::uint8_t>(cur_ << 1 | ((value >> k) & 1u));
            if (++filled_ == 8) flush();
        }
    }
    /// gamma(x), x >= 1: bit_width(x) - 1 zeros, then x in bit_width(x) bits.
    void gamma(std::uint64_t x) {
        const unsigned w = static_cast<unsigned>(std::bit_width(x));
        put(0, w - 1);
        put(x, w);
    }
    /// Bytes written, after padding the last byte with zeros.
    std::size_t finish() {
        if (filled_ != 0) {
            cur_ = static_cast<std::uint8_t>(cur_ << (8 - filled_));
            flush();
        }
        return written_;
    }
    [[nodiscard]] static std::size_t gamma_bits(std::uint64_t x) noexcept {
        return 2 * static_cast<std::size_t>(std::bit_width(x)) - 1;
    }

private:
    void flush() {
        out_[written_++] = static_cast<std::byte>(cur_);
        cur_ = 0;
        filled_ = 0;
    }
    std::byte* out_;
    std::size_t written_ = 0;
    std::uint8_t cur_ = 0;
    unsigned filled_ = 0;
};

/// Reads what bit_writer wrote; reading past the end is reported, never performed.
class bit_reader {
public:
    bit_reader(const std::byte* data, std::size_t bytes) : data_(data), bits_(bytes * 8) {}
    [[nodiscard]] bool get(unsigned& bit) {
        if (pos_ >= bits_) return false;
        bit = (static_cast<unsigned>(data_[pos_ / 8]) >> (7 - pos_ % 8)) & 1u;
        ++pos_;
        return true;
    }
    /// gamma-coded value; false if the stream ends first or the value would exceed 63 bits.
    [[nodiscard]] bool gamma(std::uint64_t& x) {
        unsigned zeros = 0, bit = 0;
        for (;;) {
            if (!get(bit)) return false;
            if (bit) break;
            if (++zeros > 62) return false;
        }
        x = 1;
        for (unsigned k = 0; k < zeros; ++k) {
            if (!get(bit)) return false;
            x = x << 1 | bit;
        }
        return true;
    }
    /// The unread bits: fewer than 8, all zero, for a well-formed stream.
    [[nodiscard]] bool only_padding_left() const noexcept {
        if (bits_ - pos_ >= 8) return false;
        for (std::size_t p = pos_; p < bits_; ++p)
            if ((static_cast<unsigned>(data_[p / 8]) >> (7 - p % 8)) & 1u) return false;
        return true;
    }

private:
    const std::byte* data_;
    std::size_t bits_;
    std::size_t pos_ = 0;
};

}  // namespace hitch::compress::detail
