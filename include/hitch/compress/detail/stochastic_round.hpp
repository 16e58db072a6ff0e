#pragma once
// Unbiased stochastic rounding to s levels, the portable kernel shared by qsgd and terngrad; the x86 kernels
// (detail/x86/) compute the same bits.
//
// An element v with unit u = scale / s (scale: the group's norm for QSGD, its largest magnitude for TernGrad) is
// sent as level l in [0, s] with sign:  y = |v| / u,  l = floor(y + U),  U ~ uniform[0, 1), which is floor(y) + 1
// with probability y - floor(y), so E[l u] = |v| (Alistarh et al. 2017, Lemma 3.1; Wen et al. 2017, eq. 3). U comes
// from the counter-based generator, indexed by the element's position, so the result does not depend on the code
// path. The code of an element is (level << 1) | sign (detail/bitstream.hpp); a zero level carries sign 0.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/simd.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
/// What the quantiser needs for one group: y = min(|v| (clipped) * to_levels, s), level = floor(y + U) with U
/// uniform in [0, 1) from the element's random bits, at most s; decoded magnitude level * unit.
struct quantizer {
    float to_levels;
    float unit;
    float s;
    std::int32_t levels;
    float clip;
};

/// Stochastic rounding by floor(y + U): P(level = floor(y) + 1) = y - floor(y). U = 1.m - 1 with 23 random mantissa
/// bits, so the rounding is unbiased up to 2^-23 of a level (and the rounding of y + U, far below that).
template <bool EF, bool Clip, class Code>
HITCH_COMPRESS_ALWAYS_INLINE void quantize_kernel(const float* g, const float* r_in, float* r_out, std::size_t n,
                                                  std::uint32_t first, counter_rng rng, quantizer q, Code* codes) {
    for (std::size_t i = 0; i < n; ++i) {
        float v = g[i];
        if constexpr (EF) v += r_in[i];
        float a = std::fabs(v);
        if constexpr (Clip) a = std::min(a, q.clip);
        const float y = std::min(a * q.to_levels, q.s);
        const float f = std::bit_cast<float>((rng.bits(first + static_cast<std::uint32_t>(i)) >> 9) | 0x3f800000u);
        const std::int32_t level = std::min(static_cast<std::int32_t>(y + f) - 1, q.levels);
        const std::uint32_t negative = (std::bit_cast<std::uint32_t>(v) >> 31) & (level > 0 ? 1u : 0u);
        codes[i] = static_cast<Code>(static_cast<std::uint32_t>(level) << 1 | negative);
        if constexpr (EF) {
            const float sent = static_cast<float>(level) * q.unit;
            r_out[i] = v - (negative ? -sent : sent);
        }
    }
}
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
