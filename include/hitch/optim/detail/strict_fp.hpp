#pragma once
// The optimizer kernels are the reference that other devices must reproduce bit for bit, so every float
// operation in them is rounded on its own, in the order the comments give: no fused multiply-add contraction,
// whatever the user's flags. GCC contracts across statements when FMA is available (-march=haswell and later,
// GNU mode), so the kernels sit between HITCH_OPTIM_STRICT_FP_BEGIN/END, which turn contraction off for the
// functions defined there; clang contracts only inside one expression, which the kernels avoid, and
// HITCH_OPTIM_STRICT_FP_SCOPE turns it off inside a function body as well. Vectorisation is unaffected.
// Square roots go through hitch/optim/detail/sqrt.hpp, which vectorises them without -fno-math-errno.

#if defined(__clang__)
#define HITCH_OPTIM_STRICT_FP_BEGIN
#define HITCH_OPTIM_STRICT_FP_END
#define HITCH_OPTIM_STRICT_FP_SCOPE _Pragma("clang fp contract(off)")
#elif defined(__GNUC__)
#define HITCH_OPTIM_STRICT_FP_BEGIN _Pragma("GCC push_options") _Pragma("GCC optimize(\"fp-contract=off\")")
#define HITCH_OPTIM_STRICT_FP_END _Pragma("GCC pop_options")
#define HITCH_OPTIM_STRICT_FP_SCOPE
#else
#define HITCH_OPTIM_STRICT_FP_BEGIN
#define HITCH_OPTIM_STRICT_FP_END
#define HITCH_OPTIM_STRICT_FP_SCOPE
#endif
