#pragma once
// Streams of b-bit codes (b in [2, 16]), the fixed-width coding of qsgd and terngrad: packing, unpacking, and
// decoding a byte at a time through tables that also validate the codes.
//
// Code of an element: (level << 1) | sign, in b = 1 + bit_width(s) bits, element i at bits [i b, (i + 1) b) of
// the stream, least significant bit first. A zero level carries sign 0 (a "negative zero" code is corrupt).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hitch/compress/detail/simd.hpp"

namespace hitch::compress::detail {

/// Bytes of n codes of b bits.
[[nodiscard]] constexpr std::size_t code_bytes(std::size_t n, unsigned b) noexcept { return (n * b + 7) / 8; }

HITCH_COMPRESS_ALWAYS_INLINE void pack_nibbles(const std::uint8_t* codes, std::byte* out, std::size_t pairs) {
    for (std::size_t j = 0; j < pairs; ++j) out[j] = static_cast<std::byte>(codes[2 * j] | codes[2 * j + 1] << 4);
}
HITCH_COMPRESS_ALWAYS_INLINE void pack_pairs_of_bits(const std::uint8_t* codes, std::byte* out, std::size_t quads) {
    for (std::size_t j = 0; j < quads; ++j)
        out[j] = static_cast<std::byte>(codes[4 * j] | codes[4 * j + 1] << 2 | codes[4 * j + 2] << 4 |
                                        codes[4 * j + 3] << 6);
}

/// Writes n codes of b bits at `out`, which starts on a byte boundary of the stream; the last byte is zero-padded.
template <class Code>
HITCH_COMPRESS_ALWAYS_INLINE void pack_codes(const Code* codes, std::size_t n, unsigned b, std::byte* out) {
    if constexpr (sizeof(Code) == 1) {
        if (b == 8) {
            std::memcpy(out, codes, n);
            return;
        }
        if (b == 4) {
            const std::size_t pairs = n / 2;
            pack_nibbles(codes, out, pairs);
            if (n % 2) out[pairs] = static_cast<std::byte>(codes[n - 1]);
            return;
        }
        if (b == 2) {
            const std::size_t quads = n / 4;
            pack_pairs_of_bits(codes, out, quads);
            if (n % 4) {
                unsigned last = 0;
                for (std::size_t i = quads * 4; i < n; ++i)
                    last |= static_cast<unsigned>(codes[i]) << (2 * (i - quads * 4));
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

/// Reads n codes of b bits from a stream starting on a byte boundary into codes[0, n).
template <class Code>
HITCH_COMPRESS_ALWAYS_INLINE void unpack_codes(const std::byte* in, std::size_t n, unsigned b, Code* codes) {
    if constexpr (sizeof(Code) == 1) {
        const auto* p = reinterpret_cast<const std::uint8_t*>(in);
        if (b == 8) {
            std::memcpy(codes, in, n);
            return;
        }
        if (b == 4) {
            for (std::size_t j = 0; j < n / 2; ++j) {
                codes[2 * j] = static_cast<Code>(p[j] & 15u);
                codes[2 * j + 1] = static_cast<Code>(p[j] >> 4);
            }
            if (n % 2) codes[n - 1] = static_cast<Code>(p[n / 2] & 15u);
            return;
        }
        if (b == 2) {
            for (std::size_t j = 0; j < n / 4; ++j)
                for (std::size_t k = 0; k < 4; ++k) codes[4 * j + k] = static_cast<Code>((p[j] >> (2 * k)) & 3u);
            for (std::size_t i = n / 4 * 4; i < n; ++i) codes[i] = static_cast<Code>((p[i / 4] >> (2 * (i % 4))) & 3u);
            return;
        }
    }
    for (std::size_t i = 0; i < n; ++i) {
        const std::size_t bit = i * b, first = bit / 8, last = (bit + b - 1) / 8;
        std::uint32_t word = 0;
        for (std::size_t k = first; k <= last; ++k) word |= static_cast<std::uint32_t>(in[k]) << (8 * (k - first));
        codes[i] = static_cast<Code>((word >> (bit % 8)) & ((1u << b) - 1u));
    }
}

/// Byte-at-a-time decoding of streams of b-bit codes, b in {2, 4, 8}: for each byte value, the signed levels of the
/// 8 / b codes it holds (in stream order) and whether all of them are valid (level <= s, no negative zero).
struct byte_tables {
    unsigned per_byte = 1;
    float level[256][4] = {};
    bool valid[256] = {};

    byte_tables(unsigned b, std::uint32_t s) : per_byte(8 / b) {
        const unsigned mask = (1u << b) - 1u;
        for (unsigned v = 0; v < 256; ++v) {
            bool ok = true;
            for (unsigned k = 0; k < per_byte; ++k) {
                const unsigned c = (v >> (b * k)) & mask;
                const auto magnitude = static_cast<float>(c >> 1);
                level[v][k] = (c & 1u) ? -magnitude : magnitude;
                ok = ok && (c >> 1) <= s && c != 1u;
            }
            valid[v] = ok;
        }
    }
    /// The first invalid code in byte value v (which must be invalid).
    [[nodiscard]] unsigned first_invalid(unsigned v, unsigned b, std::uint32_t s) const noexcept {
        const unsigned mask = (1u << b) - 1u;
        for (unsigned k = 0; k < per_byte; ++k) {
            const unsigned c = (v >> (b * k)) & mask;
            if ((c >> 1) > s || c == 1u) return k;
        }
        return 0;
    }
};

/// Index of the first invalid code among n codes in `bytes` (n when all are valid).
[[nodiscard]] inline std::size_t first_invalid_code(const byte_tables& t, const std::byte* bytes, std::size_t n,
                                                    unsigned b, std::uint32_t s) {
    const std::size_t count = code_bytes(n, b);
    for (std::size_t j = 0; j < count; ++j) {
        const auto v = static_cast<unsigned>(bytes[j]);
        if (!t.valid[v]) return std::min(n, j * t.per_byte + t.first_invalid(v, b, s));
    }
    return n;
}

/// out[i] (+)= scale * level of code i, for n codes starting at `bytes` (n a multiple of per_byte but for the last
/// piece of a stream).
template <bool Add>
HITCH_COMPRESS_ALWAYS_INLINE void decode_bytes(const byte_tables& t, const std::byte* bytes, std::size_t n, float scale,
                                               float* out) {
    const unsigned per = t.per_byte;
    const std::size_t whole = n / per;
    for (std::size_t j = 0; j < whole; ++j) {
        const float* lv = t.level[static_cast<unsigned>(bytes[j])];
        for (unsigned k = 0; k < per; ++k) {
            const float v = lv[k] * scale;
            if constexpr (Add)
                out[j * per + k] += v;
            else
                out[j * per + k] = v;
        }
    }
    for (std::size_t i = whole * per; i < n; ++i) {
        const float v = t.level[static_cast<unsigned>(bytes[i / per])][i % per] * scale;
        if constexpr (Add)
            out[i] += v;
        else
            out[i] = v;
    }
}

/// Code i of a stream of b-bit codes (the stream holds at least code_bytes(i + 1, b) bytes).
[[nodiscard]] inline std::uint32_t code_at(const std::byte* stream, std::size_t i, unsigned b) noexcept {
    const std::size_t bit = i * b;
    const std::size_t first = bit / 8, last = (bit + b - 1) / 8;
    std::uint32_t word = 0;
    for (std::size_t k = first; k <= last; ++k) word |= static_cast<std::uint32_t>(stream[k]) << (8 * (k - first));
    return (word >> (bit % 8)) & ((1u << b) - 1u);
}

}  // namespace hitch::compress::detail
