#pragma once
// pack_codes (detail/bitstream.hpp) with the AVX2 kernels of detail/x86/pack_avx2.hpp for 2-bit and 4-bit byte
// codes where the encode's tier allows them: the same bytes on every tier.

#include <cstddef>
#include <cstdint>

#include "hitch/compress/detail/bitstream.hpp"
#include "hitch/compress/detail/simd.hpp"
#include "hitch/compress/detail/x86/pack_avx2.hpp"

namespace hitch::compress::detail {

/// pack_codes(codes, n, b, out), with the AVX2 kernels for byte codes of b = 2 or 4 bits when `tier` is AVX2 or
/// wider.
template <class Code>
HITCH_COMPRESS_ALWAYS_INLINE void pack_codes(const Code* codes, std::size_t n, unsigned b, std::byte* out,
                                             [[maybe_unused]] isa tier) {
#if HITCH_COMPRESS_X86
    if (sizeof(Code) == 1 && tier != isa::baseline && (b == 2 || b == 4)) {
        const auto* bytes = reinterpret_cast<const std::uint8_t*>(codes);
        const unsigned per_byte = 8 / b;
        const std::size_t whole = n / per_byte;
        if (b == 2)
            pack_pairs_of_bits_avx2(bytes, out, whole);
        else
            pack_nibbles_avx2(bytes, out, whole);
        if (n % per_byte != 0) pack_codes(bytes + whole * per_byte, n % per_byte, b, out + whole);
        return;
    }
#endif
    pack_codes(codes, n, b, out);
}

}  // namespace hitch::compress::detail
