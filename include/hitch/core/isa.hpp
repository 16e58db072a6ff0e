#pragma once
// The instruction-set tiers that hitch's hot loops are built for, and a limit on the widest one that may run.
// hitch is header-only and compiled with the user's flags (usually plain x86-64, i.e. SSE2), so the loops that
// decide a codec's or an optimizer's speed are compiled again for AVX2 and AVX-512 and picked at run time, when the
// processor has them. Every tier computes the portable kernel's bits; the limit only changes the speed, so a
// benchmark can measure the AVX2 kernels on a processor that also has AVX-512 (most users' processors have no
// AVX-512), or the portable ones on any.
//
//   hitch::set_isa_limit(hitch::parse_isa("avx2"));   // config_error when the processor has no AVX2
//   hitch::active_isa();                               // hitch::isa::avx2 from now on (process-wide)
//
// The tiers: portable (the baseline build, any processor), avx2 (AVX2, F16C, BMI1/2 and POPCNT: Intel Haswell and
// AMD Zen onwards), avx512 (AVX-512 F, BW, VL and DQ on top: Intel Skylake-SP, Ice Lake, AMD Zen 4). Processors
// other than x86-64 (or a compiler other than GCC and Clang) have the portable tier only.

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "hitch/core/error.hpp"

// Functions compiled for a tier: kernels built from intrinsics carry HITCH_TARGET_AVX2 or HITCH_TARGET_AVX512 and
// are called only when active_isa() allows; generic code is compiled for a tier by detail::run_avx2 and
// detail::run_avx512, into which it is inlined (GCC and Clang inline a baseline function into a wider one). The
// targets enable no FMA contraction (hitch::hitch builds with -ffp-contract=off), so the bits do not change.
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define HITCH_ISA_X86 1
#include <cpuid.h>
#define HITCH_TARGET_AVX2 __attribute__((target("avx2,f16c,bmi,bmi2,popcnt")))
#define HITCH_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c,bmi,bmi2,popcnt")))
/// Pieces of an intrinsics kernel, inlined into the kernel that calls them (which has the same target).
#define HITCH_TARGET_AVX2_INLINE __attribute__((target("avx2,f16c,bmi,bmi2,popcnt"), always_inline)) inline
#define HITCH_TARGET_AVX512_INLINE \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c,bmi,bmi2,popcnt"), always_inline)) inline
#else
#define HITCH_ISA_X86 0
#define HITCH_TARGET_AVX2
#define HITCH_TARGET_AVX512
#endif

namespace hitch {

/// An instruction-set tier of hitch's kernels, narrowest first.
enum class isa : std::uint8_t { portable = 0, avx2 = 1, avx512 = 2 };

/// "portable", "avx2" or "avx512": the names parse_isa reads and the benchmarks print.
[[nodiscard]] constexpr std::string_view isa_name(isa tier) noexcept {
    switch (tier) {
        case isa::avx512:
            return "avx512";
        case isa::avx2:
            return "avx2";
        case isa::portable:
            break;
    }
    return "portable";
}

/// The tier named `name` (as isa_name writes it); config_error naming the accepted names otherwise.
[[nodiscard]] inline isa parse_isa(std::string_view name);

/// The widest tier this processor can run.
[[nodiscard]] inline isa cpu_isa() noexcept;

/// Lets no kernel wider than `tier` run from now on, in every thread (a process-wide setting, read at the start of
/// each encode, decode or optimizer step). config_error when the processor lacks `tier`, so a pinned measurement
/// cannot silently run another tier. The default is the widest tier.
inline void set_isa_limit(isa tier);

/// The limit set by set_isa_limit (isa::avx512 unless it was lowered).
[[nodiscard]] inline isa isa_limit() noexcept;

/// The tier the kernels run in now: the narrower of cpu_isa() and isa_limit().
[[nodiscard]] inline isa active_isa() noexcept;

// ================================================ implementation ================================================

namespace detail {

inline std::atomic<isa> isa_limit_value{isa::avx512};

#if HITCH_ISA_X86
/// AVX2 with F16C, BMI2 and POPCNT (the set the AVX2 kernels are compiled for).
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
/// The AVX2 set plus AVX-512 F, BW, VL and DQ.
[[nodiscard]] inline bool cpu_has_avx512_set() noexcept {
    static const bool has = [] {
        __builtin_cpu_init();
        return cpu_has_avx2_set() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    }();
    return has;
}

/// f() compiled for AVX2 or AVX-512 (with f's body inlined); call only when active_isa() allows the tier.
template <class F>
HITCH_TARGET_AVX2 decltype(auto) run_avx2(F&& f) {
    return f();
}
template <class F>
HITCH_TARGET_AVX512 decltype(auto) run_avx512(F&& f) {
    return f();
}
#endif

}  // namespace detail

inline isa parse_isa(std::string_view name) {
    for (const isa tier : {isa::portable, isa::avx2, isa::avx512})
        if (name == isa_name(tier)) return tier;
    throw config_error(detail::concat("hitch::parse_isa: '", name, "' is not one of portable, avx2, avx512"));
}

inline isa cpu_isa() noexcept {
#if HITCH_ISA_X86
    if (detail::cpu_has_avx512_set()) return isa::avx512;
    if (detail::cpu_has_avx2_set()) return isa::avx2;
#endif
    return isa::portable;
}

inline void set_isa_limit(isa tier) {
    if (tier > cpu_isa())
        throw config_error(detail::concat("hitch::set_isa_limit: this processor cannot run the ", isa_name(tier),
                                          " kernels (its widest tier is ", isa_name(cpu_isa()), ")"));
    detail::isa_limit_value.store(tier, std::memory_order_relaxed);
}

inline isa isa_limit() noexcept { return detail::isa_limit_value.load(std::memory_order_relaxed); }

inline isa active_isa() noexcept {
    const isa cpu = cpu_isa(), limit = isa_limit();
    return cpu < limit ? cpu : limit;
}

}  // namespace hitch
