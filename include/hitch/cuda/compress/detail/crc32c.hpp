#pragma once
// CRC32C of message payloads in device memory: the math of core/crc32c.hpp written once for the host and the GPU
// (this header needs no CUDA header; detail/crc32c.cuh holds the kernels), and the tile geometry the kernels use.
//
// The payload is cut into tiles of crc_tile_bytes (16 KiB): thread t of a tile's block checksums its slice of
// crc_slice_bytes (64) from the raw state 0, and the slices and tiles are joined by the CRC's linearity,
//
//   raw(0, A_1 || ... || A_m) = XOR_j  shift(raw(0, A_j), |A_{j+1}| + ... + |A_m|),   shift(s, n) = s x^(8n) mod P,
//
// so each piece's contribution is independent of the others and the XOR needs no order: the GPU sums the tiles'
// contributions with a CUB device reduction (combined on the GPU; the host only joins the header's 28 bytes, see
// detail/wire.hpp). crc32c_tiles() below computes exactly what the kernels compute, on the host, so the tests check
// the geometry and the combination without a GPU.

#include <cstddef>
#include <cstdint>

#include "hitch/cuda/detail/hd.hpp"

namespace hitch::cuda::compress::detail {

/// The reflected CRC32C polynomial (core/crc32c.hpp's crc32c_polynomial).
inline constexpr std::uint32_t crc32c_polynomial = 0x82F63B78u;
/// x^0 in the reflected representation (bit 31 is the coefficient of x^0): the identity of crc32c_multiply.
inline constexpr std::uint32_t crc32c_one = 0x80000000u;

/// Slicing-by-8 tables, the same as core/crc32c.hpp's: t[k][b] is the state after byte b followed by k zero bytes.
struct crc32c_table_set {
    std::uint32_t t[8][256];
    constexpr crc32c_table_set() : t{} {
        for (std::uint32_t b = 0; b < 256; ++b) {
            std::uint32_t c = b;
            for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? crc32c_polynomial : 0u);
            t[0][b] = c;
        }
        for (int k = 1; k < 8; ++k)
            for (std::uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xffu];
    }
};

/// a b mod P, polynomials in the reflected representation (core/crc32c.hpp's crc32c_multiply).
[[nodiscard]] HITCH_HD_INLINE constexpr std::uint32_t crc32c_multiply(std::uint32_t a, std::uint32_t b) noexcept {
    std::uint32_t product = 0;
    for (std::uint32_t m = 1u << 31; m != 0; m >>= 1) {
        if (a & m) product ^= b;
        b = (b & 1u) ? (b >> 1) ^ crc32c_polynomial : b >> 1;
    }
    return product;
}

/// x^(2^k) mod P for k = 0 .. 63.
struct crc32c_power_set {
    std::uint32_t x2k[64];
    constexpr crc32c_power_set() : x2k{} {
        x2k[0] = 1u << 30;  // x^1
        for (int k = 1; k < 64; ++k) x2k[k] = crc32c_multiply(x2k[k - 1], x2k[k - 1]);
    }
};

/// x^(8 bytes) mod P from the powers table: the factor that shifts a raw state past `bytes` zero bytes.
[[nodiscard]] HITCH_HD_INLINE constexpr std::uint32_t crc32c_xpow8(std::uint64_t bytes,
                                                                   const std::uint32_t* x2k) noexcept {
    const std::uint64_t bits = bytes * 8;
    std::uint32_t p = crc32c_one;
    for (int k = 0; k < 64; ++k)
        if ((bits >> k) & 1u) p = crc32c_multiply(x2k[k], p);
    return p;
}

/// The raw state after `bytes` zero bytes follow `state` (core/crc32c.hpp's crc32c_shift_bytes).
[[nodiscard]] HITCH_HD_INLINE constexpr std::uint32_t crc32c_shift(std::uint32_t state, std::uint64_t bytes,
                                                                   const std::uint32_t* x2k) noexcept {
    return crc32c_multiply(crc32c_xpow8(bytes, x2k), state);
}

/// Eight bytes, given as two little-endian words, into the raw state (one step of the slicing-by-8 loop).
[[nodiscard]] HITCH_HD_INLINE std::uint32_t crc32c_update8(std::uint32_t s, std::uint32_t lo, std::uint32_t hi,
                                                           const std::uint32_t (*t)[256]) noexcept {
    lo ^= s;
    return t[7][lo & 0xffu] ^ t[6][(lo >> 8) & 0xffu] ^ t[5][(lo >> 16) & 0xffu] ^ t[4][lo >> 24] ^ t[3][hi & 0xffu] ^
           t[2][(hi >> 8) & 0xffu] ^ t[1][(hi >> 16) & 0xffu] ^ t[0][hi >> 24];
}

/// One byte into the raw state.
[[nodiscard]] HITCH_HD_INLINE std::uint32_t crc32c_update1(std::uint32_t s, std::uint32_t byte,
                                                           const std::uint32_t (*t)[256]) noexcept {
    return (s >> 8) ^ t[0][(s ^ byte) & 0xffu];
}

/// The raw state updated with n bytes at p (any alignment), eight at a time.
[[nodiscard]] HITCH_HD_INLINE std::uint32_t crc32c_update(std::uint32_t s, const unsigned char* p, std::size_t n,
                                                          const std::uint32_t (*t)[256]) noexcept {
    const auto word = [p](std::size_t at) {
        return static_cast<std::uint32_t>(p[at]) | static_cast<std::uint32_t>(p[at + 1]) << 8 |
               static_cast<std::uint32_t>(p[at + 2]) << 16 | static_cast<std::uint32_t>(p[at + 3]) << 24;
    };
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) s = crc32c_update8(s, word(i), word(i + 4), t);
    for (; i < n; ++i) s = crc32c_update1(s, p[i], t);
    return s;
}

/// The raw state updated with `count` little-endian 32-bit words (bytes held in registers); count even.
[[nodiscard]] HITCH_HD_INLINE std::uint32_t crc32c_update_words(std::uint32_t s, const std::uint32_t* w, unsigned count,
                                                                const std::uint32_t (*t)[256]) noexcept {
    for (unsigned k = 0; k + 1 < count; k += 2) s = crc32c_update8(s, w[k], w[k + 1], t);
    return s;
}

// ---- tile geometry ------------------------------------------------------------------------------------------------

/// Threads per tile (one thread block), bytes each thread checksums, bytes per tile.
inline constexpr unsigned crc_tile_threads = 256;
inline constexpr std::size_t crc_slice_bytes = 64;
inline constexpr std::size_t crc_tile_bytes = crc_tile_threads * crc_slice_bytes;

/// x^(8 * crc_slice_bytes * (crc_tile_threads - 1 - t)): the shift of slice t of a full tile (one multiply per thread
/// instead of a walk over the powers).
struct crc32c_slice_shift_set {
    std::uint32_t x[crc_tile_threads];
    constexpr crc32c_slice_shift_set() : x{} {
        const crc32c_power_set powers;
        for (unsigned t = 0; t < crc_tile_threads; ++t)
            x[t] = crc32c_xpow8(crc_slice_bytes * (crc_tile_threads - 1 - t), powers.x2k);
    }
};

/// The tiles of an n-byte payload.
[[nodiscard]] HITCH_HD_INLINE constexpr std::size_t crc_tiles(std::size_t n) noexcept {
    return (n + crc_tile_bytes - 1) / crc_tile_bytes;
}

/// Bytes [begin, end) of slice t of tile k of an n-byte payload (empty past the end).
struct crc_slice {
    std::size_t begin;
    std::size_t end;
};
[[nodiscard]] HITCH_HD_INLINE constexpr crc_slice crc_slice_of(std::size_t n, std::size_t tile, unsigned t) noexcept {
    const std::size_t b = tile * crc_tile_bytes + t * crc_slice_bytes;
    const std::size_t lo = b < n ? b : n;
    const std::size_t hi = b + crc_slice_bytes < n ? b + crc_slice_bytes : n;
    return {lo, hi};
}

/// Slice t's contribution to its tile: its raw state (from 0) shifted past the payload bytes that follow it within
/// the tile. `raw` is the slice's state; full tiles use the slice-shift table, the last tile the powers.
[[nodiscard]] HITCH_HD_INLINE std::uint32_t crc_slice_contribution(std::uint32_t raw, std::size_t n, std::size_t tile,
                                                                   unsigned t, const std::uint32_t* slice_shifts,
                                                                   const std::uint32_t* x2k) noexcept {
    const std::size_t tile_end = (tile + 1) * crc_tile_bytes;
    if (tile_end <= n) return crc32c_multiply(slice_shifts[t], raw);
    const crc_slice s = crc_slice_of(n, tile, t);
    return crc32c_shift(raw, n - s.end, x2k);
}

/// The factor that moves tile k's joined slices past the payload bytes after the tile.
[[nodiscard]] HITCH_HD_INLINE std::uint64_t crc_bytes_after_tile(std::size_t n, std::size_t tile) noexcept {
    const std::size_t tile_end = (tile + 1) * crc_tile_bytes;
    return tile_end < n ? n - tile_end : 0;
}

/// The raw CRC32C state (from 0) of n bytes, computed in the kernels' geometry: every slice from 0, joined into its
/// tile, every tile shifted past the rest of the payload, all contributions XORed. Equals crc32c_update(0, ...) (the
/// tests check it); the host runs it to check what the GPU computes.
[[nodiscard]] inline std::uint32_t crc32c_tiles(const unsigned char* p, std::size_t n) {
    static constexpr crc32c_table_set tables{};
    static constexpr crc32c_power_set powers{};
    static constexpr crc32c_slice_shift_set shifts{};
    std::uint32_t total = 0;
    for (std::size_t tile = 0; tile < crc_tiles(n); ++tile) {
        std::uint32_t joined = 0;
        for (unsigned t = 0; t < crc_tile_threads; ++t) {
            const crc_slice s = crc_slice_of(n, tile, t);
            const std::uint32_t raw = crc32c_update(0, p + s.begin, s.end - s.begin, tables.t);
            joined ^= crc_slice_contribution(raw, n, tile, t, shifts.x, powers.x2k);
        }
        total ^= crc32c_shift(joined, crc_bytes_after_tile(n, tile), powers.x2k);
    }
    return total;
}

}  // namespace hitch::cuda::compress::detail
