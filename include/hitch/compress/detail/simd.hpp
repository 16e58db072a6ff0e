#pragma once
// Run-time choice of the instruction set for the codecs' hot loops. hitch is header-only and built with whatever
// flags the user picks (usually plain x86-64, i.e. SSE2), so the loops that decide a codec's speed are compiled a
// second time for AVX2 (+F16C, BMI2; no FMA, so no contraction changes a result) and picked when the processor
// has it. Both versions produce the same bits; the tests run each codec with the wide path switched off and
// compare.
//
//   detail::run_wide([&] HITCH_COMPRESS_INLINE_LAMBDA { kernel(...); });   // AVX2 when available, else baseline
//
// A kernel that should be vectorised twice is an always-inline function called from such a lambda: GCC and Clang
// inline a baseline function into an AVX2 one (its features are a subset) and vectorise it with 256-bit registers.
// Intrinsics that need F16C/AVX2 live in functions marked HITCH_TARGET_AVX2 (core/isa.hpp) and are called only
// after the check. hitch::set_isa_limit caps the tier for the whole process (a benchmark measuring one tier).

#include <atomic>
#include <cstdint>

#include "hitch/core/isa.hpp"

#if HITCH_ISA_X86
#define HITCH_COMPRESS_X86 1
#include <immintrin.h>
#else
#define HITCH_COMPRESS_X86 0
#endif

// GCC 12 warns, wrongly, that AVX-512 intrinsics' pass-through operands may be uninitialised: kernels using them
// sit between these.
#if defined(__GNUC__) && !defined(__clang__)
#define HITCH_COMPRESS_AVX512_WARNINGS_BEGIN \
    _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define HITCH_COMPRESS_AVX512_WARNINGS_END _Pragma("GCC diagnostic pop")
#else
#define HITCH_COMPRESS_AVX512_WARNINGS_BEGIN
#define HITCH_COMPRESS_AVX512_WARNINGS_END
#endif

// No fused multiply-add contraction in the kernels, whatever the target of a wide build, so every build computes
// the same bits: hitch::hitch carries -ffp-contract=off for GCC and Clang (CMakeLists.txt), which also holds inside
// functions with an AVX2 or AVX-512 target attribute. (GCC's optimize pragma would scope it to the kernels, but
// GCC 12 miscompiles code compiled after such a region; see hitch/optim/detail/strict_fp.hpp.) Clang contracts only
// inside one expression, which the kernels avoid (a product is always its own statement). The macros mark the
// kernels and expand to nothing.
#define HITCH_COMPRESS_STRICT_FP_BEGIN
#define HITCH_COMPRESS_STRICT_FP_END

#if defined(__GNUC__) || defined(__clang__)
#define HITCH_COMPRESS_ALWAYS_INLINE [[gnu::always_inline]] inline
#define HITCH_COMPRESS_INLINE_LAMBDA __attribute__((always_inline))
#else
#define HITCH_COMPRESS_ALWAYS_INLINE inline
#define HITCH_COMPRESS_INLINE_LAMBDA
#endif

namespace hitch::compress::detail {

/// Tests switch the wide paths off to compare them with the baseline ones; nothing else should touch them (a
/// program pins a tier with hitch::set_isa_limit, core/isa.hpp).
inline std::atomic<bool> wide_paths_enabled{true};
/// Likewise for the AVX-512 tier alone (the AVX2 kernels stay on).
inline std::atomic<bool> avx512_paths_enabled{true};

/// The instruction sets the kernels are built for (hitch::isa under the names the codecs have always used).
enum class isa : std::uint8_t { baseline = 0, avx2 = 1, avx512 = 2 };

#if HITCH_COMPRESS_X86
using hitch::detail::cpu_has_avx2_set;
using hitch::detail::cpu_has_avx512_set;
#endif

/// True when the AVX2 versions of the kernels may run.
[[nodiscard]] inline bool use_wide() noexcept {
    return hitch::active_isa() >= hitch::isa::avx2 && wide_paths_enabled.load(std::memory_order_relaxed);
}

/// True when the AVX-512 (F, BW, VL, DQ) builds of the generic kernels may run.
[[nodiscard]] inline bool use_avx512() noexcept {
    return use_wide() && hitch::active_isa() >= hitch::isa::avx512 &&
           avx512_paths_enabled.load(std::memory_order_relaxed);
}

/// The widest tier allowed now.
[[nodiscard]] inline isa best_isa() noexcept {
    if (use_avx512()) return isa::avx512;
    if (use_wide()) return isa::avx2;
    return isa::baseline;
}

/// Runs f() compiled for AVX-512 or AVX2 when the processor has them and the limit allows (core/isa.hpp), else the
/// baseline build of f. The generic kernels compute the same bits in every build (no FMA contraction is enabled by
/// the targets).
template <class F>
decltype(auto) run_wide(F&& f) {
#if HITCH_COMPRESS_X86
    if (use_avx512()) return hitch::detail::run_avx512(f);
    if (use_wide()) return hitch::detail::run_avx2(f);
#endif
    return f();
}

}  // namespace hitch::compress::detail
