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
// Intrinsics that need F16C/AVX2 live in functions marked HITCH_TARGET_AVX2 and are called only after the check.

#include <atomic>
#include <cstdint>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define HITCH_COMPRESS_X86 1
#include <cpuid.h>
#include <immintrin.h>
#define HITCH_TARGET_AVX2 __attribute__((target("avx2,f16c,bmi,bmi2,popcnt")))
#define HITCH_TARGET_SSE42 __attribute__((target("sse4.2")))
#else
#define HITCH_COMPRESS_X86 0
#define HITCH_TARGET_AVX2
#define HITCH_TARGET_SSE42
#endif

#if defined(__GNUC__) || defined(__clang__)
#define HITCH_COMPRESS_ALWAYS_INLINE [[gnu::always_inline]] inline
#define HITCH_COMPRESS_INLINE_LAMBDA __attribute__((always_inline))
#else
#define HITCH_COMPRESS_ALWAYS_INLINE inline
#define HITCH_COMPRESS_INLINE_LAMBDA
#endif

namespace hitch::compress::detail {

/// Tests switch the wide paths off to compare them with the baseline ones; nothing else should touch it.
inline std::atomic<bool> wide_paths_enabled{true};

#if HITCH_COMPRESS_X86
[[nodiscard]] inline bool cpu_has_avx2_set() noexcept {
    static const bool has = [] {
        __builtin_cpu_init();
        // F16C is CPUID leaf 1, ECX bit 29 (not every compiler's __builtin_cpu_supports knows its name).
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && ((ecx >> 29) & 1u) != 0;
        return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2") &&
               __builtin_cpu_supports("popcnt");
    }();
    return has;
}
[[nodiscard]] inline bool cpu_has_sse42() noexcept {
    static const bool has = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("sse4.2");
    }();
    return has && wide_paths_enabled.load(std::memory_order_relaxed);
}
#endif

/// True when the AVX2 versions of the kernels may run.
[[nodiscard]] inline bool use_wide() noexcept {
#if HITCH_COMPRESS_X86
    return cpu_has_avx2_set() && wide_paths_enabled.load(std::memory_order_relaxed);
#else
    return false;
#endif
}

#if HITCH_COMPRESS_X86
template <class F>
HITCH_TARGET_AVX2 decltype(auto) run_avx2(F&& f) {
    return f();
}
#endif

/// Runs f() compiled for AVX2 when the processor has it, else the baseline build of f.
template <class F>
decltype(auto) run_wide(F&& f) {
#if HITCH_COMPRESS_X86
    if (use_wide()) return run_avx2(f);
#endif
    return f();
}

}  // namespace hitch::compress::detail
