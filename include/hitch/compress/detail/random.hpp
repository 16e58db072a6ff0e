#pragma once
// Reproducible randomness for the codecs.
//
// - counter_rng: a counter-based generator, u(key, i) = hash(i xor key). Element i of a bucket gets its own
//   uniform number whatever order (or thread, or instruction set) computes it, so stochastic rounding is
//   reproducible and vectorises. The hash is a 32-bit multiply-xorshift mixer (Wellons' "lowbias32", a full
//   avalanche), keyed per block of 2^16 elements by splitmix64 of (seed, stream, step, block).
// - xoshiro256ss: Blackman and Vigna's xoshiro256** for sequential draws (random-k indices, samples, initial Q).
//
// Neither is cryptographic; both are statistically strong enough that the unbiasedness tests cannot tell them
// from ideal randomness at the sample sizes they use.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "hitch/compress/detail/simd.hpp"

namespace hitch::compress::detail {

/// splitmix64's finaliser: a bijective 64-bit mixer (Steele, Lea and Flood 2014).
[[nodiscard]] constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/// The key of one encode: distinct (seed, stream, step) give unrelated keys.
[[nodiscard]] constexpr std::uint64_t draw_key(std::uint64_t seed, std::uint64_t stream, std::uint64_t step) noexcept {
    return mix64(mix64(mix64(seed) ^ stream) ^ step);
}

HITCH_COMPRESS_ALWAYS_INLINE std::uint32_t mix32(std::uint32_t x) noexcept {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/// Uniform numbers indexed by element: bits(i) is a 32-bit hash of (key, i).
class counter_rng {
public:
    constexpr explicit counter_rng(std::uint64_t key) noexcept
        : k0_(static_cast<std::uint32_t>(key)), k1_(static_cast<std::uint32_t>(key >> 32)) {}

    /// A generator for elements [base, base + 2^32): callers split longer buckets at multiples of 2^32.
    [[nodiscard]] constexpr counter_rng at_block(std::uint64_t block) const noexcept {
        counter_rng r = *this;
        const std::uint64_t k = mix64((static_cast<std::uint64_t>(k1_) << 32 | k0_) ^ block);
        if (block != 0) {
            r.k0_ = static_cast<std::uint32_t>(k);
            r.k1_ = static_cast<std::uint32_t>(k >> 32);
        }
        return r;
    }

    HITCH_COMPRESS_ALWAYS_INLINE std::uint32_t bits(std::uint32_t i) const noexcept { return mix32(i ^ k0_); }
    /// The 32-bit key the hash of this block uses (for vectorised copies of bits()).
    [[nodiscard]] constexpr std::uint32_t key0() const noexcept { return k0_; }
    /// Uniform in [0, 1) with 24 random bits (exactly representable as float).
    HITCH_COMPRESS_ALWAYS_INLINE float uniform(std::uint32_t i) const noexcept {
        return static_cast<float>(bits(i) >> 8) * 0x1p-24f;
    }

private:
    std::uint32_t k0_;
    std::uint32_t k1_;
};

/// Elements per random-number block: element i uses counter_rng(key).at_block(i / 65536).bits(i % 65536).
inline constexpr std::size_t rng_block = 65536;

/// Calls f(done, len, first, rng) for the pieces of elements [begin, begin + n) that lie in one random-number block
/// each: elements [begin + done, begin + done + len) are that block's elements first, first + 1, ... and draw from
/// `rng`.
template <class F>
HITCH_COMPRESS_ALWAYS_INLINE void for_rng_blocks(std::size_t begin, std::size_t n, const counter_rng& base, F&& f) {
    for (std::size_t done = 0; done < n;) {
        const std::size_t index = begin + done, offset = index % rng_block;
        const std::size_t len = std::min(n - done, rng_block - offset);
        f(done, len, static_cast<std::uint32_t>(offset), base.at_block(index / rng_block));
        done += len;
    }
}

/// xoshiro256** (Blackman and Vigna 2018), seeded through splitmix64.
class xoshiro256ss {
public:
    using result_type = std::uint64_t;
    explicit xoshiro256ss(std::uint64_t seed) noexcept {
        for (auto& w : s_) {
            seed += 0x9E3779B97F4A7C15ull;
            w = mix64(seed);
        }
    }
    static constexpr result_type min() noexcept { return 0; }
    static constexpr result_type max() noexcept { return ~result_type{0}; }
    result_type operator()() noexcept {
        const std::uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
        const std::uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = std::rotl(s_[3], 45);
        return result;
    }
    /// Uniform integer in [0, bound), bound > 0, without modulo bias: draws under the covering power of two are
    /// rejected until one falls below bound (fewer than two draws on average).
    std::uint64_t below(std::uint64_t bound) noexcept {
        const std::uint64_t mask = bound <= 1 ? 0 : ~std::uint64_t{0} >> std::countl_zero(bound - 1);
        for (;;) {
            const std::uint64_t r = (*this)() & mask;
            if (r < bound) return r;
        }
    }
    /// Uniform in [0, 1) with 53 bits.
    double uniform() noexcept { return static_cast<double>((*this)() >> 11) * 0x1p-53; }
    /// Standard normal (Box-Muller; one of the pair is discarded, reproducibility matters more than speed here).
    double normal() noexcept {
        double u1 = uniform();
        while (u1 <= 0.0) u1 = uniform();
        const double u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }

private:
    std::uint64_t s_[4];
};

}  // namespace hitch::compress::detail
