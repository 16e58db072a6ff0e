#pragma once
// FNV-1a, 64 bit (Fowler, Noll and Vo): a cheap, stable hash for fingerprints that ranks compare and checksums in
// files. Not for security, nor for data that an adversary chooses.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace hitch {

/// The offset basis (the hash of nothing) and the prime of 64-bit FNV-1a.
inline constexpr std::uint64_t fnv1a_basis = 0xcbf29ce484222325ull;
inline constexpr std::uint64_t fnv1a_prime = 0x100000001b3ull;

/// Hashes `bytes`, continuing from `h`: chain calls to hash a sequence of pieces.
[[nodiscard]] constexpr std::uint64_t fnv1a(std::span<const std::byte> bytes, std::uint64_t h = fnv1a_basis) noexcept {
    for (std::byte b : bytes) {
        h ^= static_cast<std::uint8_t>(b);
        h *= fnv1a_prime;
    }
    return h;
}

[[nodiscard]] constexpr std::uint64_t fnv1a(std::string_view s, std::uint64_t h = fnv1a_basis) noexcept {
    for (char c : s) {
        h ^= static_cast<unsigned char>(c);
        h *= fnv1a_prime;
    }
    return h;
}

/// FNV-1a fed piece by piece, for checksums written as a stream is produced.
class fnv1a_hasher {
public:
    void update(std::span<const std::byte> bytes) noexcept { h_ = fnv1a(bytes, h_); }
    [[nodiscard]] std::uint64_t value() const noexcept { return h_; }

private:
    std::uint64_t h_ = fnv1a_basis;
};

}  // namespace hitch
