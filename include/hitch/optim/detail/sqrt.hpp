#pragma once
// In-place square roots of a short array, vectorised whatever the user's flags. With errno semantics (the
// default), GCC turns every sqrtf into a test and a possible library call, which keeps loops that contain it from
// vectorising, and neither the optimize pragma nor attribute can lift that for one function. So the Adam and LAMB
// kernels work in small tiles: a vectorised loop writes the radicands to a tile, this function takes their roots
// with the widest square-root instruction the tier has (correctly rounded, as IEEE 754 requires), and a second
// vectorised loop finishes the update while the tile is in L1. The results are the same bits as std::sqrt.

#include <cmath>
#include <cstddef>

#include "hitch/core/isa.hpp"

#if defined(__SSE2__) || defined(__AVX__) || defined(__AVX512F__) || HITCH_ISA_X86
#include <immintrin.h>
#endif

namespace hitch::optim::detail {

/// Elements per tile in the kernels that take square roots (a multiple of every vector width and of 16).
inline constexpr std::size_t sqrt_tile = 256;

// GCC 12 warns, wrongly, that the AVX-512 intrinsic's pass-through operand may be uninitialised.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/// With the build's own instruction set (the portable tier).
inline void sqrt_in_place(float* x, std::size_t n) noexcept {
    std::size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_sqrt_ps(_mm512_loadu_ps(x + i)));
#elif defined(__AVX__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#elif defined(__SSE2__)
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(x + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
#endif
    for (; i < n; ++i) x[i] = std::sqrt(x[i]);
}

#if HITCH_ISA_X86
/// The AVX2 tier's (called only when hitch::active_isa() allows it).
HITCH_TARGET_AVX2 inline void sqrt_in_place_avx2(float* x, std::size_t n) noexcept {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
    for (; i < n; ++i) x[i] = std::sqrt(x[i]);
}
/// The AVX-512 tier's.
HITCH_TARGET_AVX512 inline void sqrt_in_place_avx512(float* x, std::size_t n) noexcept {
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_sqrt_ps(_mm512_loadu_ps(x + i)));
    for (; i < n; ++i) x[i] = std::sqrt(x[i]);
}
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/// sqrt_in_place with the instructions of tier T (the tier the calling kernel was compiled for).
template <hitch::isa T>
inline void sqrt_in_place(float* x, std::size_t n) noexcept {
#if HITCH_ISA_X86
    if constexpr (T == hitch::isa::avx512)
        sqrt_in_place_avx512(x, n);
    else if constexpr (T == hitch::isa::avx2)
        sqrt_in_place_avx2(x, n);
    else
#endif
        sqrt_in_place(x, n);
}

}  // namespace hitch::optim::detail
