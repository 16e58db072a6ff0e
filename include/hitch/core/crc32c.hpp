#pragma once
// CRC32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78; init and final xor 0xFFFFFFFF), the checksum of
// every byte format hitch writes (core/binary.hpp). It detects every burst error up to 32 bits and every odd number of
// flipped bits, and x86-64 computes it in hardware (SSE4.2 crc32), so checking a message costs far less than reading
// it.
//
// The hardware path runs three independent streams over consecutive thirds of each block and joins them with
// the CRC's linearity: crc(s, A||B) = crc(0, B) ^ shift_|B|(crc(s, A)), where shift_n applies n zero bytes, a
// linear map on the 32-bit state done with four table lookups. The result equals the plain CRC32C bit for bit
// (the tests check the standard check value and the software path).

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "hitch/core/parallel.hpp"

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define HITCH_CRC32C_X86 1
#include <nmmintrin.h>
#else
#define HITCH_CRC32C_X86 0
#endif

namespace hitch {
namespace detail {

/// Tests switch the SSE4.2 path off to compare it with the portable one; nothing else should touch it.
inline std::atomic<bool> crc32c_hardware_enabled{true};

inline constexpr std::uint32_t crc32c_polynomial = 0x82F63B78u;

/// Slicing-by-8 tables: table[k][b] is the state after byte b followed by k zero bytes.
struct crc32c_tables {
    std::array<std::array<std::uint32_t, 256>, 8> t{};
    constexpr crc32c_tables() {
        for (std::uint32_t b = 0; b < 256; ++b) {
            std::uint32_t c = b;
            for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? crc32c_polynomial : 0u);
            t[0][b] = c;
        }
        for (std::size_t k = 1; k < 8; ++k)
            for (std::uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xffu];
    }
};
inline constexpr crc32c_tables crc32c_table{};

/// The raw state update (no init/final xor) in portable code, eight bytes per step.
[[nodiscard]] inline std::uint32_t crc32c_update_portable(std::uint32_t s, const std::byte* p, std::size_t n) noexcept {
    const auto& t = crc32c_table.t;
    while (n >= 8) {
        // Little-endian words whatever the host order (compilers turn this into one load on little-endian hosts).
        const auto word = [p](int at) {
            return static_cast<std::uint32_t>(p[at]) | static_cast<std::uint32_t>(p[at + 1]) << 8 |
                   static_cast<std::uint32_t>(p[at + 2]) << 16 | static_cast<std::uint32_t>(p[at + 3]) << 24;
        };
        const std::uint32_t lo = word(0) ^ s, hi = word(4);
        s = t[7][lo & 0xffu] ^ t[6][(lo >> 8) & 0xffu] ^ t[5][(lo >> 16) & 0xffu] ^ t[4][lo >> 24] ^ t[3][hi & 0xffu] ^
            t[2][(hi >> 8) & 0xffu] ^ t[1][(hi >> 16) & 0xffu] ^ t[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) s = (s >> 8) ^ t[0][(s ^ static_cast<std::uint32_t>(*p++)) & 0xffu];
    return s;
}

/// Bytes per stream in the three-stream hardware loop.
inline constexpr std::size_t crc32c_stream_bytes = 1024;

/// shift(s) = state after crc32c_stream_bytes zero bytes, as four 256-entry tables (one per byte of s).
struct crc32c_shift_tables {
    std::array<std::array<std::uint32_t, 256>, 4> t{};
    crc32c_shift_tables() {
        // Column k of the linear map is the image of the unit vector 1 << k.
        std::array<std::uint32_t, 32> column{};
        const std::array<std::byte, crc32c_stream_bytes> zeros{};
        for (int k = 0; k < 32; ++k)
            column[static_cast<std::size_t>(k)] = crc32c_update_portable(1u << k, zeros.data(), zeros.size());
        for (std::size_t byte = 0; byte < 4; ++byte)
            for (std::uint32_t b = 0; b < 256; ++b) {
                std::uint32_t image = 0;
                for (int bit = 0; bit < 8; ++bit)
                    if ((b >> bit) & 1u) image ^= column[byte * 8 + static_cast<std::size_t>(bit)];
                t[byte][b] = image;
            }
    }
    [[nodiscard]] std::uint32_t operator()(std::uint32_t s) const noexcept {
        return t[0][s & 0xffu] ^ t[1][(s >> 8) & 0xffu] ^ t[2][(s >> 16) & 0xffu] ^ t[3][s >> 24];
    }
};

[[nodiscard]] inline const crc32c_shift_tables& crc32c_shift() {
    static const crc32c_shift_tables tables;
    return tables;
}

#if HITCH_CRC32C_X86
[[nodiscard]] inline bool cpu_has_sse42() noexcept {
    static const bool has = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("sse4.2");
    }();
    return has && crc32c_hardware_enabled.load(std::memory_order_relaxed);
}

__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_update_sse42(std::uint32_t s, const std::byte* p,
                                                                           std::size_t n) {
    constexpr std::size_t L = crc32c_stream_bytes;
    if (n >= 3 * L) {
        const crc32c_shift_tables& shift = crc32c_shift();
        while (n >= 3 * L) {
            std::uint64_t a = s, b = 0, c = 0;
            for (std::size_t i = 0; i < L; i += 8) {
                std::uint64_t wa, wb, wc;
                std::memcpy(&wa, p + i, 8);
                std::memcpy(&wb, p + L + i, 8);
                std::memcpy(&wc, p + 2 * L + i, 8);
                a = _mm_crc32_u64(a, wa);
                b = _mm_crc32_u64(b, wb);
                c = _mm_crc32_u64(c, wc);
            }
            s = static_cast<std::uint32_t>(c) ^
                shift(static_cast<std::uint32_t>(b) ^ shift(static_cast<std::uint32_t>(a)));
            p += 3 * L;
            n -= 3 * L;
        }
    }
    std::uint64_t s64 = s;
    for (; n >= 8; n -= 8, p += 8) {
        std::uint64_t w;
        std::memcpy(&w, p, 8);
        s64 = _mm_crc32_u64(s64, w);
    }
    s = static_cast<std::uint32_t>(s64);
    for (; n > 0; --n, ++p) s = _mm_crc32_u8(s, static_cast<unsigned char>(*p));
    return s;
}
#endif

}  // namespace detail

/// The raw CRC32C state update (no initial or final xor), hardware-accelerated where the processor has it.
[[nodiscard]] inline std::uint32_t crc32c_update(std::uint32_t s, std::span<const std::byte> bytes) {
#if HITCH_CRC32C_X86
    if (detail::cpu_has_sse42()) return detail::crc32c_update_sse42(s, bytes.data(), bytes.size());
#endif
    return detail::crc32c_update_portable(s, bytes.data(), bytes.size());
}

namespace detail {

/// a * b mod P for polynomials in the CRC's reflected representation (bit 31 is x^0, bit 0 is x^31).
[[nodiscard]] constexpr std::uint32_t crc32c_multiply(std::uint32_t a, std::uint32_t b) noexcept {
    std::uint32_t product = 0;
    for (std::uint32_t m = 1u << 31; m != 0; m >>= 1) {
        if (a & m) product ^= b;
        b = (b & 1u) ? (b >> 1) ^ crc32c_polynomial : b >> 1;  // b * x
    }
    return product;
}

/// x^(2^k) mod P for k = 0 .. 63.
struct crc32c_powers {
    std::array<std::uint32_t, 64> x2k{};
    constexpr crc32c_powers() {
        x2k[0] = 1u << 30;  // x^1
        for (std::size_t k = 1; k < 64; ++k) x2k[k] = crc32c_multiply(x2k[k - 1], x2k[k - 1]);
    }
};
inline constexpr crc32c_powers crc32c_power_table{};

}  // namespace detail

/// The raw state after `bytes` zero bytes follow `state`: state * x^(8 bytes) mod P (the CRC is linear, so
/// raw(s, A || B) = shift(raw(s, A), |B|) ^ raw(0, B): chunks checksummed apart combine into the whole).
[[nodiscard]] constexpr std::uint32_t crc32c_shift_bytes(std::uint32_t state, std::uint64_t bytes) noexcept {
    const std::uint64_t bits = bytes * 8;
    for (std::size_t k = 0; k < 64; ++k)
        if ((bits >> k) & 1u) state = detail::crc32c_multiply(detail::crc32c_power_table.x2k[k], state);
    return state;
}

/// Streaming CRC32C: update() with consecutive pieces, then value().
class crc32c {
public:
    crc32c& update(std::span<const std::byte> bytes) {
        state_ = crc32c_update(state_, bytes);
        return *this;
    }
    [[nodiscard]] std::uint32_t value() const noexcept { return ~state_; }

private:
    std::uint32_t state_ = 0xFFFFFFFFu;
};

/// The raw state from zero over `bytes`, computed in chunks on the shared thread pool when the buffer is large
/// (the chunks' states are combined in order, so the value is the same however it was split).
[[nodiscard]] inline std::uint32_t crc32c_raw_parallel(std::span<const std::byte> bytes) {
    constexpr std::size_t chunk_min = std::size_t{1} << 22;  // 4 MiB: below, one thread is quicker
    if (bytes.size() < 2 * chunk_min) return crc32c_update(0, bytes);
    parallel_options o;
    o.align = 4096;
    o.min_chunk = chunk_min;
    const std::size_t chunks = chunk_count(bytes.size(), o);
    std::vector<std::uint32_t> raw(chunks);
    parallel_chunks(
        chunks,
        [&](std::size_t c) {
            const auto [b, e] = static_chunk(bytes.size(), chunks, c, o.align);
            raw[c] = crc32c_update(0, bytes.subspan(b, e - b));
        },
        o);
    std::uint32_t total = raw[0];
    for (std::size_t c = 1; c < chunks; ++c) {
        const auto [b, e] = static_chunk(bytes.size(), chunks, c, o.align);
        total = crc32c_shift_bytes(total, e - b) ^ raw[c];
    }
    return total;
}

/// CRC32C of one buffer.
[[nodiscard]] inline std::uint32_t crc32c_of(std::span<const std::byte> bytes) {
    return crc32c().update(bytes).value();
}

}  // namespace hitch
