#pragma once
// The sum of squares of moments.hpp with AVX-512 intrinsics (qsgd's per-group norms): the same lanes and fold,
// so the same bits as the portable kernel.

#include <algorithm>
#include <cstddef>

#include "hitch/compress/detail/moments.hpp"
#include "hitch/compress/detail/simd.hpp"
#include "hitch/compress/tuning.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
#if HITCH_COMPRESS_X86
HITCH_COMPRESS_AVX512_WARNINGS_BEGIN
/// moments_kernel<EF, true, false, false>'s sum of squares with AVX-512: the 32 lanes in two vectors (the tail's
/// missing lanes add +0, which leaves a sum of squares unchanged) and the same fixed tree, so the same bits.
template <bool EF>
HITCH_TARGET_AVX512 inline double sum_squares_avx512(const float* g, const float* r, std::size_t n) {
    double total = 0.0;
    for (std::size_t start = 0; start < n; start += tuning::moment_block) {
        const std::size_t end = std::min(n, start + tuning::moment_block);
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        std::size_t i = start;
        for (; i + 32 <= end; i += 32) {
            __m512 v0 = _mm512_loadu_ps(g + i), v1 = _mm512_loadu_ps(g + i + 16);
            if constexpr (EF) {
                v0 = _mm512_add_ps(v0, _mm512_loadu_ps(r + i));
                v1 = _mm512_add_ps(v1, _mm512_loadu_ps(r + i + 16));
            }
            a0 = _mm512_add_ps(a0, _mm512_mul_ps(v0, v0));
            a1 = _mm512_add_ps(a1, _mm512_mul_ps(v1, v1));
        }
        if (i < end) {
            const std::size_t rest = end - i;
            const auto m0 = static_cast<__mmask16>(rest >= 16 ? 0xffffu : (1u << rest) - 1u);
            const auto m1 = static_cast<__mmask16>(rest <= 16 ? 0u : (1u << (rest - 16)) - 1u);
            __m512 v0 = _mm512_maskz_loadu_ps(m0, g + i), v1 = _mm512_maskz_loadu_ps(m1, g + i + 16);
            if constexpr (EF) {
                v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, r + i));
                v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, r + i + 16));
            }
            a0 = _mm512_add_ps(a0, _mm512_mul_ps(v0, v0));
            a1 = _mm512_add_ps(a1, _mm512_mul_ps(v1, v1));
        }
        // Lanes j and j + 16, then j and j + 8, j + 4, j + 2, j + 1: moments_kernel's tree.
        const __m512d e0 =
            _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(a0)), _mm512_cvtps_pd(_mm512_castps512_ps256(a1)));
        const __m512d e1 =
            _mm512_add_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a0), 1))),
                          _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a1), 1))));
        const __m512d f = _mm512_add_pd(e0, e1);
        const __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(f), _mm512_extractf64x4_pd(f, 1));
        const __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
        total += _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));
    }
    return total;
}
HITCH_COMPRESS_AVX512_WARNINGS_END
#endif
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
