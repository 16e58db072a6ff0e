#pragma once
// counter_rng::bits (detail/random.hpp) for 8 counters at once with AVX2, shared by the stochastic rounding and
// the thinning kernels of that tier.

#include "hitch/compress/detail/simd.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
#if HITCH_COMPRESS_X86
/// counter_rng::bits of 8 counters below 2^16 (a random-number block's, as for_rng_blocks hands them out) up to
/// its last xor-shift. With c < 2^16 the first two steps, (c ^ k) ^ ((c ^ k) >> 16), are c ^ key with
/// key = k ^ (k >> 16). The last step, x ^= x >> 16, is left to mantissa_bits8_avx2.
HITCH_TARGET_AVX2_INLINE __m256i mix8_avx2(__m256i counter, __m256i key, __m256i m1, __m256i m2) {
    const __m256i x = _mm256_mullo_epi32(_mm256_xor_si256(counter, key), m1);
    return _mm256_mullo_epi32(_mm256_xor_si256(x, _mm256_srli_epi32(x, 15)), m2);
}

/// counter_rng::bits(i) >> 9, the 23 random mantissa bits, from mix8_avx2's result:
/// (x ^ (x >> 16)) >> 9 = (x >> 9) ^ (x >> 25).
HITCH_TARGET_AVX2_INLINE __m256i mantissa_bits8_avx2(__m256i x) {
    return _mm256_xor_si256(_mm256_srli_epi32(x, 9), _mm256_srli_epi32(x, 25));
}
#endif
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
