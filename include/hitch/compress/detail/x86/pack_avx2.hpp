#pragma once
// Packing of byte codes into 2-bit and 4-bit fields (detail/bitstream.hpp) with AVX2: the same bytes as the portable
// loops, which also finish the tail. Multiplies with small weights put each group of codes together in one lane
// (a code < 4 times 1, 4, 16, 64 sums to the packed byte), then packs narrow the lanes to bytes.

#include <cstddef>
#include <cstdint>

#include "hitch/compress/detail/bitstream.hpp"
#include "hitch/compress/detail/simd.hpp"

namespace hitch::compress::detail {

#if HITCH_COMPRESS_X86
/// The packed bytes of 32 codes below 4, one per 32-bit lane in element order: c0 + 4 c1 per 16-bit lane, then
/// (c0 + 4 c1) + 16 (c2 + 4 c3) per 32-bit lane.
HITCH_TARGET_AVX2_INLINE __m256i quads32_avx2(const std::uint8_t* codes) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
    const __m256i pairs = _mm256_maddubs_epi16(x, _mm256_set1_epi16(0x0401));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x00100001));
}

/// out[j] = codes[4j] | codes[4j + 1] << 2 | codes[4j + 2] << 4 | codes[4j + 3] << 6 for j < quads (every code
/// below 4): 128 codes per step.
HITCH_TARGET_AVX2 inline void pack_pairs_of_bits_avx2(const std::uint8_t* codes, std::byte* out, std::size_t quads) {
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    std::size_t j = 0;
    for (; j + 32 <= quads; j += 32) {
        const std::uint8_t* c = codes + 4 * j;
        // Each pack works within a 128-bit lane: lane 0 ends up with dwords 0-3 of the four inputs' bytes, lane 1
        // with dwords 4-7; the permutation puts them back in element order.
        const __m256i low = _mm256_packus_epi32(quads32_avx2(c), quads32_avx2(c + 32));
        const __m256i high = _mm256_packus_epi32(quads32_avx2(c + 64), quads32_avx2(c + 96));
        const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(low, high), order);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), bytes);
    }
    pack_pairs_of_bits(codes + 4 * j, out + j, quads - j);
}

/// out[j] = codes[2j] | codes[2j + 1] << 4 for j < pairs (every code below 16): 64 codes per step.
HITCH_TARGET_AVX2 inline void pack_nibbles_avx2(const std::uint8_t* codes, std::byte* out, std::size_t pairs) {
    const __m256i weights = _mm256_set1_epi16(0x1001);
    std::size_t j = 0;
    for (; j + 32 <= pairs; j += 32) {
        const std::uint8_t* c = codes + 2 * j;
        const __m256i a = _mm256_maddubs_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c)), weights);
        const __m256i b = _mm256_maddubs_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 32)), weights);
        // packus interleaves the 128-bit lanes (a0 b0 a1 b1): qword order 0, 2, 1, 3 restores a then b.
        const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b), 0xd8);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), bytes);
    }
    pack_nibbles(codes + 2 * j, out + j, pairs - j);
}
#endif

}  // namespace hitch::compress::detail
