#pragma once
// counter_rng::bits (detail/random.hpp) for 16 counters at once with AVX-512, shared by the stochastic rounding
// and the thinning kernels.

#include "hitch/compress/detail/simd.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
#if HITCH_COMPRESS_X86
/// counter_rng::bits of 16 counters up to its last xor-shift: the first two steps folded into one three-way xor,
/// ((c ^ k) ^ ((c ^ k) >> 16) = c ^ (c >> 16) ^ (k ^ (k >> 16)), key = k ^ (k >> 16)). The last step,
/// x ^= x >> 16, is left to the caller, who shifts the result anyway: (x ^ (x >> 16)) >> 9 = (x >> 9) ^ (x >> 25).
HITCH_TARGET_AVX512_INLINE __m512i mix16_avx512(__m512i counter, __m512i key, __m512i m1, __m512i m2) {
    __m512i x = _mm512_ternarylogic_epi32(counter, _mm512_srli_epi32(counter, 16), key, 0x96);  // a ^ b ^ c
    x = _mm512_mullo_epi32(x, m1);
    return _mm512_mullo_epi32(_mm512_xor_si512(x, _mm512_srli_epi32(x, 15)), m2);
}
#endif
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
