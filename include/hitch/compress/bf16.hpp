#pragma once
// compress::bf16: each gradient rounded to bfloat16 (the upper 16 bits of a binary32, round to nearest even).
// Halves the bytes and keeps float's exponent range, so unlike fp16 it needs no loss scaling; additive.
//
// Error bound: |x - bf16(x)| <= 2^-8 |x| for normal floats. Buckets holding NaN or an infinity (or a value that
// rounds up to infinity, beyond 3.3895e38) are refused with non_finite_error.
//
// Bytes on the wire: 32 + 2n.

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

struct bf16_format {
    using storage = bfloat16;
    static constexpr std::uint8_t codec_id = codec_ids::bf16;
    static constexpr std::string_view name = "bf16";
    static constexpr std::string_view who = "hitch::compress::bf16";
    static constexpr std::string_view what = "bfloat16";
    template <bool EF>
    static bool to(const float* in, const float* r_in, float* r_out, std::byte* out, std::size_t n) {
        return to_bf16<EF>(in, r_in, r_out, out, n);
    }
    template <bool Add>
    static void from(const std::byte* in, float* out, std::size_t n) {
        from_bf16<Add>(in, out, n);
    }
};

}  // namespace detail

using bf16_options = cast16_options;

/// Cast to bfloat16: 2 bytes per element, additive.
class bf16 : public detail::cast16<detail::bf16_format> {
public:
    using cast16::cast16;
};

static_assert(compressor<bf16>, "compress::bf16 must model hitch::compressor");
static_assert(summable_compressor<bf16>, "compress::bf16 must model hitch::summable_compressor");
static_assert(residual_compressor<bf16>, "compress::bf16 must model hitch::residual_compressor");

}  // namespace hitch::compress
