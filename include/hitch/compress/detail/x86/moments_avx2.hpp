#pragma once
// The sum of squares of moments.hpp with AVX2 intrinsics (qsgd's per-group norms): the same lanes and fold, so the
// same bits as the portable kernel.

#include <algorithm>
#include <cstddef>

#include "hitch/compress/detail/moments.hpp"
#include "hitch/compress/detail/simd.hpp"
#include "hitch/compress/tuning.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
#if HITCH_COMPRESS_X86
/// Adds the squares of v = g (+ r) over 32 elements to the lanes a[0..3] (element j to lane j).
template <bool EF>
HITCH_TARGET_AVX2_INLINE void add_squares32_avx2(const float* g, const float* r, __m256 (&a)[4]) {
    for (std::size_t j = 0; j < 4; ++j) {
        __m256 v = _mm256_loadu_ps(g + 8 * j);
        if constexpr (EF) v = _mm256_add_ps(v, _mm256_loadu_ps(r + 8 * j));
        a[j] = _mm256_add_ps(a[j], _mm256_mul_ps(v, v));
    }
}

HITCH_TARGET_AVX2_INLINE __m256d low_pd_avx2(__m256 x) { return _mm256_cvtps_pd(_mm256_castps256_ps128(x)); }
HITCH_TARGET_AVX2_INLINE __m256d high_pd_avx2(__m256 x) { return _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)); }

/// moments_kernel<EF, true, false, false>'s sum of squares with AVX2: the 32 lanes in four vectors (a tail is
/// copied into zeros, and lanes that add +0 keep their sum of squares) and the same fixed tree, so the same bits.
template <bool EF>
HITCH_TARGET_AVX2 inline double sum_squares_avx2(const float* g, const float* r, std::size_t n) {
    double total = 0.0;
    for (std::size_t start = 0; start < n; start += tuning::moment_block) {
        const std::size_t end = std::min(n, start + tuning::moment_block);
        __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        std::size_t i = start;
        for (; i + 32 <= end; i += 32) add_squares32_avx2<EF>(g + i, EF ? r + i : r, a);
        if (i < end) {
            alignas(32) float gt[32] = {}, rt[32] = {};
            std::copy(g + i, g + end, gt);
            if constexpr (EF) std::copy(r + i, r + end, rt);
            add_squares32_avx2<EF>(gt, rt, a);
        }
        // moments_kernel's tree: lanes j and j + 16, then j and j + 8, j + 4, j + 2, j + 1, in double.
        const __m256d e0 = _mm256_add_pd(low_pd_avx2(a[0]), low_pd_avx2(a[2]));                // lanes 0-3
        const __m256d e1 = _mm256_add_pd(high_pd_avx2(a[0]), high_pd_avx2(a[2]));              // 4-7
        const __m256d e2 = _mm256_add_pd(low_pd_avx2(a[1]), low_pd_avx2(a[3]));                // 8-11
        const __m256d e3 = _mm256_add_pd(high_pd_avx2(a[1]), high_pd_avx2(a[3]));              // 12-15
        const __m256d h = _mm256_add_pd(_mm256_add_pd(e0, e2), _mm256_add_pd(e1, e3));         // 0-3
        const __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));  // 0-1
        total += _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));
    }
    return total;
}
#endif
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
