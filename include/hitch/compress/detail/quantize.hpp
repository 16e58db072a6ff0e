#pragma once
// The entry points of the stochastic quantiser of qsgd and terngrad: each walks a range of the bucket one
// random-number block at a time and runs, per block, the kernel of the instruction-set tier the encode chose
// (AVX-512, AVX2 or the portable one). Every tier computes the same bits.

#include <cstddef>
#include <cstdint>

#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/simd.hpp"
#include "hitch/compress/detail/stochastic_round.hpp"
#include "hitch/compress/detail/thinning.hpp"
#include "hitch/compress/detail/x86/stochastic_round_avx2.hpp"
#include "hitch/compress/detail/x86/stochastic_round_avx512.hpp"
#include "hitch/compress/detail/x86/thinning_avx2.hpp"
#include "hitch/compress/detail/x86/thinning_avx512.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN
/// Quantises [begin, begin + n) of a bucket (indices global, for the random numbers) into codes[0, n); with EF
/// also writes r_out = v - decoded. `tier` (decided once per encode) picks the AVX-512 or AVX2 intrinsics kernel
/// for byte codes; otherwise the generic kernel runs, vectorised by whichever build the caller runs in. `ahead`,
/// if given, is n floats the caller reads next: the intrinsics kernels prefetch them as they go, so the memory
/// works while they compute.
template <bool EF, bool Clip, class Code>
HITCH_COMPRESS_ALWAYS_INLINE void quantize(const float* g, const float* r_in, float* r_out, std::size_t n,
                                           std::size_t begin, const counter_rng& base, const quantizer& q, Code* codes,
                                           [[maybe_unused]] isa tier, [[maybe_unused]] const float* ahead = nullptr) {
    for_rng_blocks(begin, n, base,
                   [&](std::size_t done, std::size_t len, std::uint32_t first, const counter_rng& rng)
                       HITCH_COMPRESS_INLINE_LAMBDA {
                           const float* gp = g + done;
                           const float* rp = EF ? r_in + done : r_in;
                           float* op = EF ? r_out + done : r_out;
                           Code* cp = codes + done;
                           [[maybe_unused]] const float* ap = ahead != nullptr ? ahead + done : nullptr;
#if HITCH_COMPRESS_X86
                           if constexpr (sizeof(Code) == 1) {
                               if (tier == isa::avx512) {
                                   if (q.levels == 1)
                                       quantize_avx512<EF, Clip, true>(gp, rp, op, len, first, rng, q, cp, ap);
                                   else
                                       quantize_avx512<EF, Clip, false>(gp, rp, op, len, first, rng, q, cp, ap);
                                   return;
                               }
                               if (tier == isa::avx2) {
                                   if (q.levels == 1)
                                       quantize_avx2<EF, Clip, true>(gp, rp, op, len, first, rng, q, cp, ap);
                                   else
                                       quantize_avx2<EF, Clip, false>(gp, rp, op, len, first, rng, q, cp, ap);
                                   return;
                               }
                           }
#endif
                           quantize_kernel<EF, Clip>(gp, rp, op, len, first, rng, q, cp);
                       });
}

/// Thins the 2-bit codes of elements [begin, begin + n) of a bucket (begin a multiple of 4, codes at its byte).
HITCH_COMPRESS_ALWAYS_INLINE void thin(std::byte* codes, std::size_t n, std::size_t begin, const counter_rng& base,
                                       std::uint32_t threshold, [[maybe_unused]] isa tier) {
    for_rng_blocks(begin, n, base,
                   [&](std::size_t done, std::size_t len, std::uint32_t first, const counter_rng& rng)
                       HITCH_COMPRESS_INLINE_LAMBDA {
#if HITCH_COMPRESS_X86
                           if (tier == isa::avx512) {
                               thin_avx512(codes + done / 4, len, first, rng, threshold);
                               return;
                           }
                           if (tier == isa::avx2) {
                               thin_avx2(codes + done / 4, len, first, rng, threshold);
                               return;
                           }
#endif
                           thin_kernel(codes + done / 4, len, first, rng, threshold);
                       });
}
HITCH_COMPRESS_STRICT_FP_END

}  // namespace hitch::compress::detail
