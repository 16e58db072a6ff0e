#pragma once
// Arithmetic that gives the same bits on the host and on a GPU: the per-element math of hitch's CUDA kernels is
// written once, with these, in headers that both nvcc and a host compiler read (include/hitch/cuda/**/*.hpp other
// than device.hpp and nccl.hpp need no CUDA header). The kernels (*.cuh) call it on the GPU; the host tests call the
// same functions and compare them bit for bit with the CPU kernels, so a machine without a GPU still checks the math.
//
// Every operation is rounded on its own, to nearest even, as the CPU reference kernels are (optim/detail/
// strict_fp.hpp): on the GPU through the explicitly rounded intrinsics, which nvcc never contracts into fused
// multiply-adds whatever -fmad says; on the host through plain operators, which hitch compiles with
// -ffp-contract=off. Square roots and divisions are correctly rounded on both sides (__fsqrt_rn, __fdiv_rn).

#include <cstdint>

#if defined(__CUDACC__)
#define HITCH_HD __host__ __device__
#define HITCH_HD_INLINE __host__ __device__ __forceinline__
#else
#define HITCH_HD
#define HITCH_HD_INLINE inline
#endif

#if !defined(__CUDA_ARCH__)
#include <bit>
#include <cmath>
#endif

namespace hitch::cuda::hd {

[[nodiscard]] HITCH_HD_INLINE float add(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
[[nodiscard]] HITCH_HD_INLINE float sub(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
[[nodiscard]] HITCH_HD_INLINE float mul(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
[[nodiscard]] HITCH_HD_INLINE float div(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}
[[nodiscard]] HITCH_HD_INLINE float sqrt(float a) noexcept {
#if defined(__CUDA_ARCH__)
    return __fsqrt_rn(a);
#else
    return std::sqrt(a);
#endif
}
[[nodiscard]] HITCH_HD_INLINE double add(double a, double b) noexcept {
#if defined(__CUDA_ARCH__)
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
[[nodiscard]] HITCH_HD_INLINE double mul(double a, double b) noexcept {
#if defined(__CUDA_ARCH__)
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
[[nodiscard]] HITCH_HD_INLINE double div(double a, double b) noexcept {
#if defined(__CUDA_ARCH__)
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
}
[[nodiscard]] HITCH_HD_INLINE double sqrt(double a) noexcept {
#if defined(__CUDA_ARCH__)
    return __dsqrt_rn(a);
#else
    return std::sqrt(a);
#endif
}

/// The bits of a float, and back (std::bit_cast is not available in device code).
[[nodiscard]] HITCH_HD_INLINE std::uint32_t bits(float x) noexcept {
#if defined(__CUDA_ARCH__)
    return static_cast<std::uint32_t>(__float_as_uint(x));
#else
    return std::bit_cast<std::uint32_t>(x);
#endif
}
[[nodiscard]] HITCH_HD_INLINE float from_bits(std::uint32_t b) noexcept {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(b);
#else
    return std::bit_cast<float>(b);
#endif
}

/// True for NaN and the infinities, by the bits (immune to fast-math flags on either side).
[[nodiscard]] HITCH_HD_INLINE bool non_finite(float x) noexcept { return (bits(x) & 0x7f800000u) == 0x7f800000u; }

}  // namespace hitch::cuda::hd
