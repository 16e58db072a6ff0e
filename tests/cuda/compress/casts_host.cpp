// The GPU element conversions (cuda/compress/cast.hpp) on the host against hitch's own (core/dtype.hpp) and the CPU
// codecs: float <-> half and bfloat16 with NaN payloads, bucket element conversions, and whole fp16 / bf16 / none
// messages and residuals computed element by element as the kernels compute them, bit for bit. No GPU needed.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "hitch/compress/bf16.hpp"
#include "hitch/compress/detail/half_kernels.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/cuda/compress/cast.hpp"

namespace gpu = hitch::cuda::compress::detail;
namespace hc = hitch::compress;
namespace wire = hitch::compress::wire;
using hitch::bfloat16;
using hitch::half;

namespace {

const std::vector<std::size_t> edge_sizes = {0, 1, 31, 32, 33, (std::size_t{1} << 20) + 3};

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }

/// Floats that exercise the conversions: every rounding boundary region of half and bfloat16, subnormals of both,
/// overflow thresholds, infinities and NaNs with payloads, plus a stride over all 2^32 patterns.
std::vector<float> interesting_floats() {
    std::vector<float> v;
    for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += 65521)
        v.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(b)));
    const std::uint32_t anchors[] = {0x00000000u, 0x00000001u, 0x007fffffu, 0x00800000u, 0x33000000u, 0x33000001u,
                                     0x337fffffu, 0x38800000u, 0x387fffffu, 0x38fff000u, 0x3f800000u, 0x477fe000u,
                                     0x477fefffu, 0x477ff000u, 0x477ff001u, 0x47800000u, 0x7f7f7fffu, 0x7f7f8000u,
                                     0x7f7fffffu, 0x7f800000u, 0x7f800001u, 0x7fa00000u, 0x7fc00000u, 0x7fffffffu};
    for (std::uint32_t a : anchors)
        for (std::uint32_t sign : {0u, 0x80000000u})
            for (int d = -40; d <= 40; ++d)
                v.push_back(std::bit_cast<float>((a + static_cast<std::uint32_t>(d)) | sign));
    // Every tie and near-tie of the subnormal half range.
    for (std::uint32_t e = 102; e <= 113; ++e)
        for (std::uint32_t m = 0; m < (1u << 23); m += 4093) v.push_back(std::bit_cast<float>(e << 23 | m));
    return v;
}

std::vector<float> gradients(std::size_t n, std::uint32_t seed, float scale = 1e-2f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

template <class T>
std::vector<T> as(const std::vector<float>& v) {
    std::vector<T> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = T(v[i]);
    return out;
}

template <class T>
gpu::storage_t<T> storage(T x) {
    if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>)
        return x.bits();
    else
        return x;
}
template <class T>
T from_storage(gpu::storage_t<T> s) {
    if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>)
        return T::from_bits(s);
    else
        return s;
}
template <class T>
bool same_bits(T a, T b) {
    if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>)
        return a.bits() == b.bits();
    else if constexpr (std::is_same_v<T, float>)
        return bits(a) == bits(b);
    else
        return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

}  // namespace

TEST_CASE("half and bfloat16 conversions are hitch's, NaN payloads included", "[cuda][compress][host]") {
    for (float x : interesting_floats()) {
        INFO("bits 0x" << std::hex << bits(x));
        REQUIRE(gpu::half_bits(x) == hitch::detail::float_to_half_bits(x));
        REQUIRE(gpu::bf16_bits(x) == hitch::detail::float_to_bfloat16_bits(x));
        REQUIRE(gpu::bf16_bits(x) == hc::detail::bf16_bits(x));
    }
    for (std::uint32_t h = 0; h < 65536; ++h) {
        const auto w = static_cast<std::uint16_t>(h);
        REQUIRE(bits(gpu::half_value(w)) == bits(hitch::detail::half_bits_to_float(w)));
        REQUIRE(bits(gpu::bf16_value(w)) == bits(hitch::detail::bfloat16_bits_to_float(w)));
    }
}

TEST_CASE("bucket element conversions are hitch::half's, bfloat16's, float's and double's", "[cuda][compress][host]") {
    std::mt19937_64 rng(11);
    for (int k = 0; k < 20000; ++k) {
        const double d = std::bit_cast<double>(rng());
        const float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
        REQUIRE(gpu::element<half>::from_double(d) == half(d).bits());
        REQUIRE(gpu::element<bfloat16>::from_double(d) == bfloat16(d).bits());
        REQUIRE(bits(gpu::element<float>::from_double(d)) == bits(static_cast<float>(d)));
        REQUIRE(gpu::element<half>::from_float(f) == half(f).bits());
        REQUIRE(std::bit_cast<std::uint64_t>(gpu::element<half>::to_double(half(f).bits())) ==
                std::bit_cast<std::uint64_t>(static_cast<double>(static_cast<float>(half(f)))));
    }
    // float <-> double as x86 converts them, NaN payloads included (the GPU mirrors it in integer arithmetic).
    std::vector<double> doubles = {std::numeric_limits<double>::quiet_NaN(),
                                   -std::numeric_limits<double>::quiet_NaN(),
                                   std::bit_cast<double>(0x7ff0000000000001ull),
                                   std::bit_cast<double>(0xfff4000000abcdefull),
                                   std::numeric_limits<double>::infinity(),
                                   1e300,
                                   -1e-300,
                                   3.4028235677973366e38};
    for (int k = 0; k < 20000; ++k) doubles.push_back(std::bit_cast<double>(rng()));
    for (double d : doubles) {
        REQUIRE(bits(gpu::narrow(d)) == bits(static_cast<float>(d)));
        REQUIRE(gpu::element<bfloat16>::from_double(d) == bfloat16(d).bits());
    }
    for (float f : interesting_floats())
        REQUIRE(std::bit_cast<std::uint64_t>(gpu::widen(f)) == std::bit_cast<std::uint64_t>(static_cast<double>(f)));
    CHECK(gpu::finite(1.0));
    CHECK_FALSE(gpu::finite(std::numeric_limits<double>::infinity()));
    CHECK_FALSE(gpu::finite(std::numeric_limits<double>::quiet_NaN()));
    CHECK(gpu::sign_bit(-0.0f));
    CHECK_FALSE(gpu::sign_bit(0.0f));
    CHECK(bits(gpu::abs_value(-std::numeric_limits<float>::quiet_NaN())) ==
          bits(std::fabs(-std::numeric_limits<float>::quiet_NaN())));
    CHECK(gpu::countl_zero32(1u) == 31);
}

namespace {

/// The payload and residual the cast kernel writes for a bucket of T (cast16_encode per element), and whether it
/// raised the non-finite flag.
template <class Format, bool EF, class T>
bool emulate_cast16(const std::vector<T>& in, const std::vector<float>& r_in, std::vector<std::byte>& payload,
                    std::vector<float>& r_out) {
    bool bad = false;
    payload.assign(2 * in.size(), std::byte{0});
    r_out.assign(in.size(), 0.0f);
    for (std::size_t i = 0; i < in.size(); ++i) {
        const std::uint16_t w = gpu::cast16_encode<Format, EF>(gpu::element<T>::to_float(storage(in[i])),
                                                               EF ? r_in[i] : 0.0f, r_out[i], bad);
        wire::store_le(payload.data() + 2 * i, w);
    }
    return bad;
}

template <class Codec, class Format, class T>
void check_cast16(const std::vector<float>& values, std::uint32_t seed) {
    const Codec codec;
    const std::vector<T> in = as<T>(values);
    const std::vector<float> r_in = gradients(values.size(), seed, 1e-3f);
    // encode
    std::vector<std::byte> payload;
    std::vector<float> rest;
    const bool bad = emulate_cast16<Format, false>(in, {}, payload, rest);
    auto s = codec.make_state(in.size());
    std::vector<std::byte> message;
    bool threw = false;
    try {
        codec.encode(hitch::tensor_view<const T>(in.data(), in.size()), s, message);
    } catch (const hc::non_finite_error&) {
        threw = true;
    }
    REQUIRE(bad == threw);
    if (!threw) REQUIRE(std::vector<std::byte>(message.begin() + 32, message.end()) == payload);
    // encode_ef
    const bool bad_ef = emulate_cast16<Format, true>(in, r_in, payload, rest);
    std::vector<float> host_rest(in.size());
    threw = false;
    try {
        codec.encode_ef(hitch::tensor_view<const T>(in.data(), in.size()), std::span<const float>(r_in),
                        std::span<float>(host_rest), s, message);
    } catch (const hc::non_finite_error&) {
        threw = true;
    }
    REQUIRE(bad_ef == threw);
    if (!threw) {
        REQUIRE(std::vector<std::byte>(message.begin() + 32, message.end()) == payload);
        std::size_t residual_mismatches = 0, decode_mismatches = 0;
        for (std::size_t i = 0; i < in.size(); ++i) residual_mismatches += bits(rest[i]) != bits(host_rest[i]);
        // decode and decode_add into a bucket of T, element by element as the decode kernel does
        std::vector<T> out(in.size()), acc = as<T>(gradients(in.size(), seed + 1));
        std::vector<T> expect_out = out, expect_acc = acc;
        codec.decode(message, hitch::tensor_view<T>(expect_out.data(), out.size()));
        codec.decode_add(message, hitch::tensor_view<T>(expect_acc.data(), acc.size()));
        for (std::size_t i = 0; i < in.size(); ++i) {
            const float v = Format::value(wire::load_le<std::uint16_t>(message.data() + 32 + 2 * i));
            decode_mismatches +=
                !same_bits(from_storage<T>(gpu::store_float<false, T>(storage(out[i]), v)), expect_out[i]);
            decode_mismatches +=
                !same_bits(from_storage<T>(gpu::store_float<true, T>(storage(acc[i]), v)), expect_acc[i]);
        }
        REQUIRE(residual_mismatches == 0);
        REQUIRE(decode_mismatches == 0);
    }
}

template <class Codec, class Format>
void check_cast16_types(const std::vector<float>& values, std::uint32_t seed) {
    check_cast16<Codec, Format, float>(values, seed);
    check_cast16<Codec, Format, double>(values, seed);
    check_cast16<Codec, Format, half>(values, seed);
    check_cast16<Codec, Format, bfloat16>(values, seed);
}

}  // namespace

TEST_CASE("fp16 and bf16 messages and residuals computed per element equal the CPU codecs'", "[cuda][compress][host]") {
    for (std::size_t n : edge_sizes) {
        INFO("n = " << n);
        const auto g = gradients(n, static_cast<std::uint32_t>(n) + 3);
        check_cast16_types<hc::fp16, gpu::half_format>(g, 5);
        check_cast16_types<hc::bf16, gpu::bf16_format>(g, 6);
    }
    // Denormals of float, values that round to half's subnormals, and a value that overflows half only.
    std::vector<float> small = {1e-40f, -1e-42f, 6e-8f, -3e-8f, 2.98e-8f, 6.1e-5f, 1e-45f, 65504.0f, -65519.0f};
    check_cast16_types<hc::fp16, gpu::half_format>(small, 7);
    check_cast16_types<hc::bf16, gpu::bf16_format>(small, 7);
    for (float special : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(), 65520.0f,
                          3.4e38f, std::bit_cast<float>(0x7fa00001u)}) {
        std::vector<float> v = gradients(33, 9);
        v[17] = special;
        INFO("special 0x" << std::hex << bits(special));
        check_cast16_types<hc::fp16, gpu::half_format>(v, 8);
        check_cast16_types<hc::bf16, gpu::bf16_format>(v, 8);
    }
}

TEST_CASE("summable values and their decode are the CPU codecs'", "[cuda][compress][host]") {
    const auto g = gradients(1000, 12);
    hc::fp16 codec;
    auto s = codec.make_state(g.size());
    std::vector<half> sum(g.size());
    codec.encode_summable(hitch::tensor_view<const float>(g.data(), g.size()), s, std::span<half>(sum));
    std::vector<double> out(g.size());
    codec.decode_summed(std::span<const half>(sum), s, hitch::tensor_view<double>(out.data(), out.size()));
    for (std::size_t i = 0; i < g.size(); ++i) {
        REQUIRE(gpu::half_bits(g[i]) == sum[i].bits());
        REQUIRE(same_bits(gpu::element<double>::from_float(gpu::half_format::value(sum[i].bits())), out[i]));
    }
}

namespace {

template <class D, class T>
void check_none_pair(std::size_t n, std::uint32_t seed) {
    const hc::none codec;
    auto values = gradients(n, seed);
    if (n > 3) {
        values[1] = std::numeric_limits<float>::quiet_NaN();
        values[2] = -std::numeric_limits<float>::infinity();
        values[3] = 1e-41f;
    }
    std::vector<D> in = as<D>(values);
    if (n > 5) {
        if constexpr (std::is_same_v<D, half>) in[5] = half::from_bits(0x7d01);  // a signalling NaN travels as is
        if constexpr (std::is_same_v<D, bfloat16>) in[5] = bfloat16::from_bits(0x7f81);
    }
    auto s = codec.make_state(n);
    std::vector<std::byte> message;
    codec.encode(hitch::tensor_view<const D>(in.data(), n), s, message);
    REQUIRE(message.size() == 32 + n * sizeof(D));
    std::vector<T> out(n), acc = as<T>(gradients(n, seed + 1));
    std::vector<T> expect_out = out, expect_acc = acc;
    codec.decode(message, hitch::tensor_view<T>(expect_out.data(), n));
    codec.decode_add(message, hitch::tensor_view<T>(expect_acc.data(), n));
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < n; ++i) {
        gpu::storage_t<D> e;
        std::memcpy(&e, message.data() + 32 + sizeof(D) * i, sizeof(D));
        mismatches += !same_bits(from_storage<D>(e), in[i]);
        mismatches += !same_bits(from_storage<T>(gpu::none_store<false, D, T>(storage(out[i]), e)), expect_out[i]);
        mismatches += !same_bits(from_storage<T>(gpu::none_store<true, D, T>(storage(acc[i]), e)), expect_acc[i]);
    }
    REQUIRE(mismatches == 0);
}

template <class D>
void check_none_into_all(std::size_t n, std::uint32_t seed) {
    check_none_pair<D, float>(n, seed);
    check_none_pair<D, double>(n, seed);
    check_none_pair<D, half>(n, seed);
    check_none_pair<D, bfloat16>(n, seed);
}

}  // namespace

TEST_CASE("none's element conversions decode as the CPU codec for every pair of types", "[cuda][compress][host]") {
    for (std::size_t n : {0u, 1u, 33u, 4097u}) {
        check_none_into_all<float>(n, 21);
        check_none_into_all<double>(n, 22);
        check_none_into_all<half>(n, 23);
        check_none_into_all<bfloat16>(n, 24);
    }
}
