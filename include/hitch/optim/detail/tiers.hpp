#pragma once
// The optimizer kernels compiled for each instruction-set tier (hitch/core/isa.hpp) and picked at run time, so a
// build with the default flags (SSE2 on x86-64) still updates with the processor's widest vectors. A kernel is an
// always-inline template on its tier, called from a run_tiered lambda:
//
//   detail::run_tiered([&](auto tier) HITCH_OPTIM_INLINE_LAMBDA {
//       detail::sgd_kernel<decltype(tier)::value, true>(w, g, n, lr, wd, s);
//   });
//
// The tier changes only the width of the vectors: every operation is rounded on its own in the documented order
// (no contraction, strict_fp.hpp) and the sums of squares keep their 16 lanes (norm.hpp), so every tier gives the
// portable kernel's bits (tests/optim/tiers.cpp).

#include <type_traits>

#include "hitch/core/isa.hpp"

#if defined(__GNUC__) || defined(__clang__)
#define HITCH_OPTIM_KERNEL [[gnu::always_inline]] inline
#define HITCH_OPTIM_INLINE_LAMBDA __attribute__((always_inline))
#else
#define HITCH_OPTIM_KERNEL inline
#define HITCH_OPTIM_INLINE_LAMBDA
#endif

namespace hitch::optim::detail {

/// The tier a kernel instance is compiled for, as a type.
template <hitch::isa T>
using tier_constant = std::integral_constant<hitch::isa, T>;

/// Calls f(tier_constant<T>{}) compiled for T, the tier hitch::active_isa() allows now.
template <class F>
void run_tiered(F&& f) {
#if HITCH_ISA_X86
    switch (hitch::active_isa()) {
        case hitch::isa::avx512:
            hitch::detail::run_avx512([&]() HITCH_OPTIM_INLINE_LAMBDA { f(tier_constant<hitch::isa::avx512>{}); });
            return;
        case hitch::isa::avx2:
            hitch::detail::run_avx2([&]() HITCH_OPTIM_INLINE_LAMBDA { f(tier_constant<hitch::isa::avx2>{}); });
            return;
        case hitch::isa::portable:
            break;
    }
#endif
    f(tier_constant<hitch::isa::portable>{});
}

}  // namespace hitch::optim::detail
