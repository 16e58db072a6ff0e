// half and bfloat16 conversions against known IEEE 754 bit patterns, and an exhaustive check of
// round-to-nearest-even against an independent reference computed in double.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "hitch/core/dtype.hpp"

using hitch::bfloat16;
using hitch::half;

namespace {
std::uint16_t h(float f) { return half(f).bits(); }
std::uint16_t b(float f) { return bfloat16(f).bits(); }
float from_h(std::uint16_t bits) { return static_cast<float>(half::from_bits(bits)); }
float bits_f(std::uint32_t bits) { return std::bit_cast<float>(bits); }

// Reference: the value of a binary16 pattern computed with ldexp in double (independent of the code under test).
double half_value(std::uint16_t bits) {
    const int sign = (bits & 0x8000) ? -1 : 1;
    const int e = (bits >> 10) & 0x1f;
    const int m = bits & 0x3ff;
    if (e == 0) return sign * std::ldexp(m, -24);
    if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
    return sign * std::ldexp(1024 + m, e - 25);
}

// Reference rounding of a float to binary16 by search: nearest representable value, ties to the even pattern.
std::uint16_t half_reference(float f) {
    if (std::isnan(f)) return 0x7e00;
    const double x = f;
    const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double a = std::fabs(x);
    if (a >= 65520.0) return sign | 0x7c00;
    // Find the largest magnitude pattern <= a by binary search over the monotone positive patterns 0..0x7bff.
    std::uint16_t lo = 0, hi = 0x7bff;
    while (lo < hi) {
        const std::uint16_t mid = static_cast<std::uint16_t>((lo + hi + 1) / 2);
        if (half_value(mid) <= a)
            lo = mid;
        else
            hi = static_cast<std::uint16_t>(mid - 1);
    }
    std::uint16_t best = lo;
    if (lo < 0x7bff || a > 65504.0) {
        const std::uint16_t up = static_cast<std::uint16_t>(lo + 1);
        const double dl = a - half_value(lo), du = half_value(up) - a;
        if (du < dl || (du == dl && (up & 1) == 0)) best = up;
    }
    return static_cast<std::uint16_t>(sign | best);
}
}  // namespace

TEST_CASE("half: known bit patterns", "[dtype]") {
    CHECK(h(0.0f) == 0x0000);
    CHECK(h(-0.0f) == 0x8000);
    CHECK(h(1.0f) == 0x3c00);
    CHECK(h(-2.0f) == 0xc000);
    CHECK(h(0.5f) == 0x3800);
    CHECK(h(65504.0f) == 0x7bff);                 // largest finite
    CHECK(h(6.103515625e-05f) == 0x0400);         // smallest normal 2^-14
    CHECK(h(5.9604644775390625e-08f) == 0x0001);  // smallest subnormal 2^-24
    CHECK(h(6.097555160522461e-05f) == 0x03ff);   // largest subnormal
    CHECK(h(std::numeric_limits<float>::infinity()) == 0x7c00);
    CHECK(h(-std::numeric_limits<float>::infinity()) == 0xfc00);
    CHECK(h(1e10f) == 0x7c00);   // overflow
    CHECK(h(1e-10f) == 0x0000);  // underflow to zero
    CHECK(h(-1e-10f) == 0x8000);
    CHECK(h(0.333333343f) == 0x3555);
    // NaN stays NaN (quiet), sign kept
    const std::uint16_t nan = h(std::numeric_limits<float>::quiet_NaN());
    CHECK((nan & 0x7c00) == 0x7c00);
    CHECK((nan & 0x03ff) != 0);
    CHECK((h(-std::numeric_limits<float>::quiet_NaN()) & 0x8000) == 0x8000);
    const std::uint16_t snan = h(bits_f(0x7f800001u));  // signalling NaN with only a low payload bit
    CHECK((snan & 0x7c00) == 0x7c00);
    CHECK((snan & 0x03ff) != 0);
}

TEST_CASE("half: ties round to even", "[dtype]") {
    // 1 + 2^-11 lies halfway between 1 (0x3c00, even) and 1 + 2^-10 (0x3c01): rounds down to even.
    CHECK(h(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
    // 1 + 3 * 2^-11 lies halfway between 0x3c01 (odd) and 0x3c02 (even): rounds up.
    CHECK(h(1.0f + 3.0f * std::ldexp(1.0f, -11)) == 0x3c02);
    // Just above the halfway point rounds up.
    CHECK(h(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)) == 0x3c01);
    // 65520 is halfway between 65504 (odd mantissa) and 65536 (inf): ties to even gives inf.
    CHECK(h(65520.0f) == 0x7c00);
    CHECK(h(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
    // Subnormal ties: 2^-25 is halfway between 0 and the smallest subnormal -> 0; 3 * 2^-25 -> 2 * 2^-24.
    CHECK(h(std::ldexp(1.0f, -25)) == 0x0000);
    CHECK(h(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(h(3.0f * std::ldexp(1.0f, -25)) == 0x0002);
    // Rounding up out of the subnormal range gives the smallest normal.
    CHECK(h(std::nextafter(std::ldexp(1.0f, -14), 0.0f)) == 0x0400);
}

TEST_CASE("half: every pattern converts to float exactly and back", "[dtype]") {
    for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
        const auto pattern = static_cast<std::uint16_t>(bits);
        const float f = from_h(pattern);
        const double ref = half_value(pattern);
        if (std::isnan(ref)) {
            REQUIRE(std::isnan(f));
            REQUIRE(h(f) == (pattern | 0x0200));  // quietened, payload kept
        } else {
            REQUIRE(static_cast<double>(f) == ref);
            REQUIRE(std::signbit(f) == ((pattern & 0x8000) != 0));
            REQUIRE(h(f) == pattern);
        }
    }
}

TEST_CASE("half: float to half matches a reference rounding on a sweep of floats", "[dtype]") {
    // Every 97th float bit pattern in the half range, both signs, plus the neighbours of every half midpoint.
    for (std::uint32_t bits = 0x33000000u; bits < 0x47800000u; bits += 97) {
        const float f = bits_f(bits);
        REQUIRE(h(f) == half_reference(f));
        REQUIRE(h(-f) == half_reference(-f));
    }
    for (std::uint16_t p = 0; p < 0x7bff; ++p) {
        const float mid = static_cast<float>((half_value(p) + half_value(static_cast<std::uint16_t>(p + 1))) / 2);
        for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e6f)}) REQUIRE(h(f) == half_reference(f));
    }
}

TEST_CASE("bfloat16: known bit patterns and rounding", "[dtype]") {
    CHECK(b(0.0f) == 0x0000);
    CHECK(b(-0.0f) == 0x8000);
    CHECK(b(1.0f) == 0x3f80);
    CHECK(b(-1.0f) == 0xbf80);
    CHECK(b(3.140625f) == 0x4049);
    CHECK(b(std::numeric_limits<float>::infinity()) == 0x7f80);
    CHECK(b(-std::numeric_limits<float>::infinity()) == 0xff80);
    CHECK(b(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up to inf
    CHECK(b(bits_f(0x7f7f7fffu)) == 0x7f7f);                // just below the tie: largest finite
    CHECK(b(bits_f(0x7f7f8000u)) == 0x7f80);                // tie, odd mantissa -> up to inf
    CHECK(b(bits_f(0x3f808000u)) == 0x3f80);                // tie, even -> down
    CHECK(b(bits_f(0x3f818000u)) == 0x3f82);                // tie, odd -> up
    CHECK(b(bits_f(0x3f808001u)) == 0x3f81);                // above tie -> up
    CHECK(b(bits_f(0x00000001u)) == 0x0000);                // smallest float subnormal -> 0
    CHECK(b(bits_f(0x00008000u)) == 0x0000);                // tie at subnormal, even -> 0
    CHECK(b(bits_f(0x00018000u)) == 0x0002);                // tie, odd -> up
    CHECK(b(bits_f(0x00010000u)) == 0x0001);                // smallest bf16 subnormal, exact
    CHECK(b(bits_f(0x007f0000u)) == 0x007f);                // largest bf16 subnormal
    const std::uint16_t nan = b(std::numeric_limits<float>::quiet_NaN());
    CHECK((nan & 0x7f80) == 0x7f80);
    CHECK((nan & 0x007f) != 0);
    CHECK((b(bits_f(0x7f800001u)) & 0x007f) != 0);  // NaN whose payload is only in the low bits stays NaN
    for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
        const auto pattern = static_cast<std::uint16_t>(bits);
        const float f = static_cast<float>(bfloat16::from_bits(pattern));
        REQUIRE(std::bit_cast<std::uint32_t>(f) == (bits << 16));
        if (!std::isnan(f)) REQUIRE(b(f) == pattern);
    }
}

TEST_CASE("dtype tags, sizes, names and finiteness", "[dtype]") {
    STATIC_REQUIRE(hitch::dtype_of<float>() == hitch::dtype::f32);
    STATIC_REQUIRE(hitch::dtype_of<double>() == hitch::dtype::f64);
    STATIC_REQUIRE(hitch::dtype_of<half>() == hitch::dtype::f16);
    STATIC_REQUIRE(hitch::dtype_of<bfloat16>() == hitch::dtype::bf16);
    STATIC_REQUIRE(hitch::dtype_of<std::byte>() == hitch::dtype::u8);
    STATIC_REQUIRE(hitch::size_of(hitch::dtype::f16) == 2);
    STATIC_REQUIRE(hitch::size_of(hitch::dtype::f64) == 8);
    STATIC_REQUIRE(hitch::size_of(static_cast<hitch::dtype>(200)) == 0);
    CHECK(hitch::name(hitch::dtype::bf16) == "bfloat16");
    CHECK(hitch::name(hitch::dtype::f32) == "float");
    CHECK_FALSE(hitch::is_valid(static_cast<hitch::dtype>(0)));
    CHECK(hitch::is_finite(half(1.0f)));
    CHECK_FALSE(hitch::is_finite(half(1e6f)));
    CHECK_FALSE(hitch::is_finite(std::numeric_limits<bfloat16>::quiet_NaN()));
    CHECK_FALSE(hitch::is_finite(std::numeric_limits<double>::infinity()));
    CHECK(static_cast<float>(std::numeric_limits<half>::max()) == 65504.0f);
    CHECK(static_cast<float>(std::numeric_limits<half>::epsilon()) == std::ldexp(1.0f, -10));
    CHECK(static_cast<float>(std::numeric_limits<bfloat16>::epsilon()) == std::ldexp(1.0f, -7));
    STATIC_REQUIRE(static_cast<float>(half(2.5f)) == 2.5f);  // conversions are constexpr
}
