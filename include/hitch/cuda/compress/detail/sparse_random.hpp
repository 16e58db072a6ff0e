#pragma once
// The sparse codecs' keyed random draws on the host and on the GPU with the same bits (compress/detail/random.hpp is
// the reference): splitmix64's mixer, the per-encode key, xoshiro256** and its unbiased bounded draw, and random-k's
// draw of k distinct indices.
//
// Random-k's draw is sequential by nature: xoshiro256** outputs are masked to the power of two covering n, those
// below n are accepted, and the first `pick` distinct accepted values are the chosen set (or its complement when
// k > n / 2). The GPU reproduces it in parallel, batch by batch:
//   1. the generator's state at any position of the stream is reached by jumping: the state transition is linear
//      over GF(2), so jumping by d applies the 256 x 256 bit matrices A^(2^i) of d's set bits (jump_tables);
//   2. each thread generates a run of consecutive outputs from its jumped state;
//   3. an accepted output is new if its value is in none of the earlier batches (a bitmap) and no earlier position
//      of this batch has it (a stable sort by value puts the first occurrence first);
//   4. a scan over the new flags in stream order finds where the count reaches `pick`, and only new values up to
//      there are taken; if the batch falls short the next one continues the stream.
// The result is the host's set by construction; draw_indices (sequential, both sides) is the reference the tests
// compare the batched draw with.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hitch/cuda/compress/random.hpp"
#include "hitch/cuda/detail/hd.hpp"

#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

namespace hitch::cuda::compress::detail::sparse {

// splitmix64's mixer and the per-encode key are the GPU codecs' shared ones (cuda/compress/random.hpp).
using cuda::compress::detail::draw_key;
using cuda::compress::detail::mix64;

[[nodiscard]] HITCH_HD_INLINE std::uint64_t rotl64(std::uint64_t x, unsigned k) noexcept {
    return (x << k) | (x >> (64u - k));
}
[[nodiscard]] HITCH_HD_INLINE unsigned countl_zero64(std::uint64_t x) noexcept {
#if defined(__CUDA_ARCH__)
    return static_cast<unsigned>(__clzll(static_cast<long long>(x)));
#else
    return static_cast<unsigned>(std::countl_zero(x));
#endif
}
/// The high 64 bits of a 64 x 64-bit product.
[[nodiscard]] HITCH_HD_INLINE std::uint64_t mul_high64(std::uint64_t a, std::uint64_t b) noexcept {
#if defined(__CUDA_ARCH__)
    return __umul64hi(a, b);
#else
    __extension__ using u128 = unsigned __int128;
    return static_cast<std::uint64_t>((static_cast<u128>(a) * b) >> 64);
#endif
}

/// The mask xoshiro's bounded draw applies: all ones up to the highest bit of bound - 1.
[[nodiscard]] HITCH_HD_INLINE std::uint64_t below_mask(std::uint64_t bound) noexcept {
    return bound <= 1 ? 0 : ~std::uint64_t{0} >> countl_zero64(bound - 1);
}

/// xoshiro256** (compress::detail::xoshiro256ss): the same outputs from the same seed.
struct xoshiro_state {
    std::uint64_t s[4];
};

[[nodiscard]] HITCH_HD_INLINE xoshiro_state xoshiro_seed(std::uint64_t seed) noexcept {
    xoshiro_state x{};
    for (unsigned i = 0; i < 4; ++i) {
        seed += 0x9E3779B97F4A7C15ull;
        x.s[i] = mix64(seed);
    }
    return x;
}
/// The state transition alone (linear over GF(2)).
HITCH_HD_INLINE void xoshiro_advance(xoshiro_state& x) noexcept {
    const std::uint64_t t = x.s[1] << 17;
    x.s[2] ^= x.s[0];
    x.s[3] ^= x.s[1];
    x.s[1] ^= x.s[2];
    x.s[0] ^= x.s[3];
    x.s[2] ^= t;
    x.s[3] = rotl64(x.s[3], 45);
}
/// The next output, and the transition.
HITCH_HD_INLINE std::uint64_t xoshiro_next(xoshiro_state& x) noexcept {
    const std::uint64_t result = rotl64(x.s[1] * 5, 7) * 9;
    xoshiro_advance(x);
    return result;
}
/// Uniform in [0, bound) without modulo bias (xoshiro256ss::below).
HITCH_HD_INLINE std::uint64_t xoshiro_below(xoshiro_state& x, std::uint64_t bound) noexcept {
    const std::uint64_t mask = below_mask(bound);
    for (;;) {
        const std::uint64_t r = xoshiro_next(x) & mask;
        if (r < bound) return r;
    }
}

// ---- jumping ahead -----------------------------------------------------------------------------------------------

/// A 256 x 256 matrix over GF(2) acting on a state: column j is the image of state bit j (word j / 64, bit j % 64).
struct jump_matrix {
    std::uint64_t column[256][4];
};

/// M x: the XOR of the columns of the set bits of x.
[[nodiscard]] HITCH_HD_INLINE xoshiro_state jump_apply(const jump_matrix& m, const xoshiro_state& x) noexcept {
    std::uint64_t out[4] = {0, 0, 0, 0};
    for (unsigned j = 0; j < 256; ++j) {
        const std::uint64_t take = 0 - ((x.s[j / 64] >> (j % 64)) & 1u);
        for (unsigned w = 0; w < 4; ++w) out[w] ^= m.column[j][w] & take;
    }
    return {{out[0], out[1], out[2], out[3]}};
}

/// The state `steps` outputs later, with tables[i] = A^(2^i) for i < table_count (steps < 2^table_count).
[[nodiscard]] HITCH_HD_INLINE xoshiro_state jump_by(const jump_matrix* tables, unsigned table_count, xoshiro_state x,
                                                    std::uint64_t steps) noexcept {
    for (unsigned i = 0; i < table_count && steps != 0; ++i, steps >>= 1)
        if ((steps & 1u) != 0) x = jump_apply(tables[i], x);
    return x;
}

/// tables[i] = A^(2^i), i < count (host code; the GPU receives a copy). A^1 is read off the transition applied to
/// each unit state; each next table is the previous one squared.
inline std::vector<jump_matrix> make_jump_tables(unsigned count) {
    std::vector<jump_matrix> tables(count);
    if (count == 0) return tables;
    for (unsigned j = 0; j < 256; ++j) {
        xoshiro_state e{};
        e.s[j / 64] = std::uint64_t{1} << (j % 64);
        xoshiro_advance(e);
        for (unsigned w = 0; w < 4; ++w) tables[0].column[j][w] = e.s[w];
    }
    for (unsigned i = 1; i < count; ++i)
        for (unsigned j = 0; j < 256; ++j) {
            xoshiro_state c{};
            for (unsigned w = 0; w < 4; ++w) c.s[w] = tables[i - 1].column[j][w];
            const xoshiro_state sq = jump_apply(tables[i - 1], c);
            for (unsigned w = 0; w < 4; ++w) tables[i].column[j][w] = sq.s[w];
        }
    return tables;
}

// ---- random-k's draw -----------------------------------------------------------------------------------------------

/// How many values random-k draws into its bitmap: the smaller of the chosen set and its complement.
struct draw_plan {
    std::uint64_t n = 0;
    std::uint64_t k = 0;
    std::uint64_t pick = 0;   // distinct values to draw
    bool complement = false;  // the drawn values are the ones left out
    std::uint64_t mask = 0;   // below_mask(n)
};
[[nodiscard]] HITCH_HD_INLINE draw_plan plan_draw(std::uint64_t n, std::uint64_t k) noexcept {
    draw_plan p;
    p.n = n;
    p.k = k < n ? k : n;
    p.complement = p.k > n / 2;
    p.pick = p.k >= n ? 0 : (p.complement ? n - p.k : p.k);
    p.mask = below_mask(n);
    return p;
}

/// Bitmap word w's chosen bits: the drawn ones, or the others below n when the draw is of the complement.
[[nodiscard]] HITCH_HD_INLINE std::uint64_t chosen_bits(const draw_plan& p, std::uint64_t word,
                                                        std::uint64_t w) noexcept {
    if (p.k >= p.n)
        word = ~std::uint64_t{0};
    else if (p.complement)
        word = ~word;
    const std::uint64_t words = (p.n + 63) / 64;
    if (w + 1 == words && p.n % 64 != 0) word &= (std::uint64_t{1} << (p.n % 64)) - 1;
    return word;
}

/// Draws into `bitmap` ((n + 63) / 64 words, zero) the pick distinct values of the plan, one after another, exactly
/// as compress::detail::random_indices does.
HITCH_HD_INLINE void draw_bitmap(std::uint64_t key, const draw_plan& p, std::uint64_t* bitmap) noexcept {
    xoshiro_state x = xoshiro_seed(key);
    for (std::uint64_t picked = 0; picked < p.pick;) {
        const std::uint64_t i = xoshiro_below(x, p.n);
        const std::uint64_t bit = std::uint64_t{1} << (i % 64);
        std::uint64_t& word = bitmap[i / 64];
        if ((word & bit) == 0) {
            word |= bit;
            ++picked;
        }
    }
}

/// The k indices of a drawn bitmap, ascending, into out; returns how many.
HITCH_HD_INLINE std::uint64_t read_bitmap(const draw_plan& p, const std::uint64_t* bitmap,
                                          std::uint64_t* out) noexcept {
    std::uint64_t count = 0;
    const std::uint64_t words = (p.n + 63) / 64;
    for (std::uint64_t w = 0; w < words; ++w) {
        std::uint64_t bits = chosen_bits(p, bitmap[w], w);
        while (bits != 0) {
            out[count++] = w * 64 + (63u - countl_zero64(bits & (0 - bits)));
            bits &= bits - 1;
        }
    }
    return count;
}

/// Stream outputs a batch generates so that it most likely completes the draw of `pick` more values: accepted draws
/// needed for pick distinct values of n (at most n ln 2 / (n / 2) ~ 1.39 per value for pick <= n / 2), divided by
/// the chance that an output is accepted (n / (mask + 1) >= 1/2), with a quarter and a constant to spare.
[[nodiscard]] inline std::uint64_t draw_batch_outputs(const draw_plan& p, std::uint64_t still_to_pick) noexcept {
    const double accept = static_cast<double>(p.n) / (static_cast<double>(p.mask) + 1.0);
    const double per_value = 1.39 / accept;
    return static_cast<std::uint64_t>(1.25 * per_value * static_cast<double>(still_to_pick)) + 1024;
}

/// One stream output's value for the batched draw: the masked output if accepted, else n (a key that sorts after
/// every accepted value).
[[nodiscard]] HITCH_HD_INLINE std::uint64_t accepted_value(const draw_plan& p, std::uint64_t output) noexcept {
    const std::uint64_t r = output & p.mask;
    return r < p.n ? r : p.n;
}

// ---- sampling (top-k's threshold estimate) ------------------------------------------------------------------------

/// The element sample j of a bucket of n looks at: a keyed hash scaled to [0, n). (The GPU's sample differs from the
/// host's sequential one; the selection does not depend on the sample, only how quickly it is found.)
[[nodiscard]] HITCH_HD_INLINE std::uint64_t sample_index(std::uint64_t key, std::uint64_t j, std::uint64_t n) noexcept {
    return mul_high64(mix64(key ^ mix64(j)), n);
}

}  // namespace hitch::cuda::compress::detail::sparse
