#pragma once
// The optimizer kernels are the reference that other devices must reproduce bit for bit, so every float
// operation in them is rounded on its own, in the order the comments give: no fused multiply-add contraction,
// whatever the user's flags. hitch::hitch carries -ffp-contract=off for GCC and Clang (CMakeLists.txt), which is
// what keeps GCC from contracting across statements when FMA is available (-march=haswell and later, GNU mode);
// code that includes hitch without its CMake target should pass the flag itself. GCC's optimize pragma would scope
// the setting to the kernels, but GCC documents it as unfit for production and GCC 12 miscompiles code compiled
// after such a region, so it is not used. Inside function bodies clang also honours
// HITCH_OPTIM_STRICT_FP_SCOPE. Vectorisation is unaffected. Square roots go through hitch/optim/detail/sqrt.hpp,
// which vectorises them without -fno-math-errno.

#if defined(__clang__)
#define HITCH_OPTIM_STRICT_FP_SCOPE _Pragma("clang fp contract(off)")
#else
#define HITCH_OPTIM_STRICT_FP_SCOPE
#endif
#define HITCH_OPTIM_STRICT_FP_BEGIN
#define HITCH_OPTIM_STRICT_FP_END
