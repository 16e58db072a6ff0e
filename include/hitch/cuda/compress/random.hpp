#pragma once
// The codecs' keyed counter-based generator (compress/detail/random.hpp) and TernGrad's thinning draw
// (compress/detail/thinning.hpp), for host and device (no CUDA header): element i of a bucket draws the same 32 bits
// on the GPU as on the CPU for the same key, so a stochastic rounding gives the same message on either. The host
// tests compare every function with the host's.

#include <cstddef>
#include <cstdint>

#include "hitch/cuda/detail/hd.hpp"

namespace hitch::cuda::compress::detail {

/// splitmix64's finaliser (compress::detail::mix64).
[[nodiscard]] HITCH_HD_INLINE constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/// The key of one encode (compress::detail::draw_key).
[[nodiscard]] HITCH_HD_INLINE constexpr std::uint64_t draw_key(std::uint64_t seed, std::uint64_t stream,
                                                               std::uint64_t step) noexcept {
    return mix64(mix64(mix64(seed) ^ stream) ^ step);
}

/// Wellons' lowbias32 (compress::detail::mix32).
[[nodiscard]] HITCH_HD_INLINE constexpr std::uint32_t mix32(std::uint32_t x) noexcept {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/// Elements per random-number block (compress::detail::rng_block).
inline constexpr std::size_t rng_block = 65536;

/// compress::detail::counter_rng: bits(i) hashes (key, i); at_block(b) keys the elements of block b.
class counter_rng {
public:
    HITCH_HD_INLINE constexpr explicit counter_rng(std::uint64_t key) noexcept
        : k0_(static_cast<std::uint32_t>(key)), k1_(static_cast<std::uint32_t>(key >> 32)) {}

    [[nodiscard]] HITCH_HD_INLINE constexpr counter_rng at_block(std::uint64_t block) const noexcept {
        counter_rng r = *this;
        const std::uint64_t k = mix64((static_cast<std::uint64_t>(k1_) << 32 | k0_) ^ block);
        if (block != 0) {
            r.k0_ = static_cast<std::uint32_t>(k);
            r.k1_ = static_cast<std::uint32_t>(k >> 32);
        }
        return r;
    }
    /// The generator of the random-number block holding bucket element `index`.
    [[nodiscard]] HITCH_HD_INLINE constexpr counter_rng for_element(std::uint64_t index) const noexcept {
        return at_block(index / rng_block);
    }
    [[nodiscard]] HITCH_HD_INLINE constexpr std::uint32_t bits(std::uint32_t i) const noexcept {
        return mix32(i ^ k0_);
    }
    [[nodiscard]] HITCH_HD_INLINE constexpr std::uint32_t key0() const noexcept { return k0_; }

private:
    std::uint32_t k0_;
    std::uint32_t k1_;
};

/// compress::detail::thin_tie_counter.
inline constexpr std::uint32_t thin_tie_counter = 32768;

/// compress::detail::thin_keeps: whether a non-zero code of element i (its index within its random-number block)
/// survives thinning at threshold T (probability T / 2^23).
[[nodiscard]] HITCH_HD_INLINE bool thin_keeps(const counter_rng& rng, std::uint32_t i,
                                              std::uint32_t threshold) noexcept {
    if (threshold >= (1u << 23)) return true;
    const unsigned shift = 16 * (i & 1u);
    const std::uint32_t h = (rng.bits(i >> 1) >> shift) & 0xffffu, high = threshold >> 7;
    if (h != high) return h < high;
    return ((rng.bits(thin_tie_counter + (i >> 1)) >> shift) & 127u) < (threshold & 127u);
}

}  // namespace hitch::cuda::compress::detail
