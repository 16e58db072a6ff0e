#pragma once
// compress::fp16: each gradient rounded to IEEE binary16 (round to nearest even). Halves the bytes; additive,
// since half values can be summed in transit (an all-reduce over hitch::half, as Horovod's fp16 compression does).
//
// Error bound: |x - fp16(x)| <= 2^-11 |x| for |x| >= 2^-14 (half's normal range), and <= 2^-25 below it.
// A value at or beyond 65520 would round to infinity: such a bucket is refused with non_finite_error (scale the
// gradients down, e.g. with the loss scaler, or use bf16), as is a bucket holding NaN or an infinity.
//
// Bytes on the wire: 32 + 2n. For Strom 2015's 14.6 million parameters: 29.2 MB.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hitch/compress/detail/cast16.hpp"
#include "hitch/compress/detail/half_kernels.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/dtype.hpp"

namespace hitch::compress {

namespace detail {

struct fp16_format {
    using storage = half;
    static constexpr std::uint8_t codec_id = codec_ids::fp16;
    static constexpr std::string_view name = "fp16";
    static constexpr std::string_view who = "hitch::compress::fp16";
    static constexpr std::string_view what = "half";
    template <bool EF>
    static bool to(const float* in, const float* r_in, float* r_out, std::byte* out, std::size_t n) {
        return to_half<EF>(in, r_in, r_out, out, n);
    }
    template <bool Add>
    static void from(const std::byte* in, float* out, std::size_t n) {
        from_half<Add>(in, out, n);
    }
};

}  // namespace detail

using fp16_options = cast16_options;

/// Cast to IEEE half precision: 2 bytes per element, additive.
class fp16 : public detail::cast16<detail::fp16_format> {
public:
    using cast16::cast16;
};

static_assert(compressor<fp16>, "compress::fp16 must model hitch::compressor");
static_assert(summable_compressor<fp16>, "compress::fp16 must model hitch::summable_compressor");
static_assert(residual_compressor<fp16>, "compress::fp16 must model hitch::residual_compressor");

}  // namespace hitch::compress
