// qsgd and terngrad: every decoded value is one of the two levels around the input (or zero), the error bound,
// exact message sizes for both codings, identical code paths, error feedback, clipping, and refused messages.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "helpers.hpp"
#include "hitch/compress/detail/pack.hpp"
#include "hitch/compress/detail/quantize.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/terngrad.hpp"

namespace hc = hitch::compress;
using hitch::tensor_view;

namespace {

std::vector<float> decode(const auto& codec, const std::vector<std::byte>& m, std::size_t n) {
    std::vector<float> out(n, 99.0f);
    codec.decode(m, tensor_view<float>(out));
    return out;
}

std::size_t gamma_bits(std::uint64_t x) {
    std::size_t w = 0;
    while (x >> w) ++w;
    return 2 * w - 1;
}

}  // namespace

TEST_CASE("qsgd rounds each element to one of its two neighbouring levels of the group norm", "[compress][qsgd]") {
    for (std::uint32_t s : {1u, 3u, 7u, 15u, 127u, 300u}) {
        for (std::size_t group : {std::size_t{0}, std::size_t{8}, std::size_t{512}}) {
            const std::size_t n = 4099;
            const hc::qsgd codec({.levels = s, .group_size = group});
            const auto v = hitch_test::gradients(n, s * 13 + group);
            auto st = codec.make_state(n);
            std::vector<std::byte> m;
            const std::size_t size = codec.encode(tensor_view<const float>(v), st, m);
            const unsigned b = 1 + static_cast<unsigned>(std::bit_width(s));
            const std::size_t gs = group == 0 ? n : group, groups = (n + gs - 1) / gs;
            INFO("s " << s << " group " << group);
            CHECK(size == 32 + 16 + 4 * groups + (n * b + 7) / 8);
            const auto d = decode(codec, m, n);
            for (std::size_t k = 0; k < groups; ++k) {
                const std::size_t begin = k * gs, end = std::min(n, begin + gs);
                double norm2 = 0;
                for (std::size_t i = begin; i < end; ++i) norm2 += static_cast<double>(v[i]) * v[i];
                const double unit = std::sqrt(norm2) / s;
                for (std::size_t i = begin; i < end; ++i) {
                    const double level = std::fabs(d[i]) / unit;
                    const double exact = std::fabs(v[i]) / unit;
                    CHECK(std::fabs(level - std::round(level)) < 1e-3);                 // on a level
                    CHECK(std::fabs(level - exact) < 1.0 + 1e-4);                       // a neighbouring one
                    CHECK((d[i] == 0.0f || std::signbit(d[i]) == std::signbit(v[i])));  // sign kept
                    CHECK(std::fabs(d[i] - v[i]) <= unit * (1 + 1e-5));                 // the error bound
                }
            }
        }
    }
}

TEST_CASE("qsgd: Elias coding decodes to the same values as fixed coding, with the stated size", "[compress][qsgd]") {
    const std::size_t n = 10007;
    for (std::uint32_t s : {1u, 7u, 127u}) {
        const hc::qsgd fixed({.levels = s, .group_size = 256});
        const hc::qsgd elias({.levels = s, .group_size = 256, .coding = hc::qsgd_coding::elias_gamma});
        auto v = hitch_test::gradients(n, 40 + s);
        for (std::size_t i = 0; i < n; i += 3) v[i] *= 1e-3f;  // many zero levels, as in the paper's regime
        auto a = fixed.make_state(n), b = elias.make_state(n);
        std::vector<std::byte> ma, mb;
        fixed.encode(tensor_view<const float>(v), a, ma);
        const std::size_t size = elias.encode(tensor_view<const float>(v), b, mb);
        const auto da = decode(fixed, ma, n), db = decode(elias, mb, n);
        CHECK(da == db);
        // Size from the decoded levels: gamma(gap) + sign + gamma(level) per non-zero.
        std::size_t bits = 0, prev = 0, groups = (n + 255) / 256;
        for (std::size_t i = 0; i < n; ++i) {
            if (db[i] == 0.0f) continue;
            double norm2 = 0;
            const std::size_t g0 = i / 256 * 256;
            for (std::size_t j = g0; j < std::min(n, g0 + 256); ++j) norm2 += static_cast<double>(v[j]) * v[j];
            const auto level = static_cast<std::uint64_t>(std::llround(std::fabs(db[i]) / (std::sqrt(norm2) / s)));
            bits += gamma_bits(i + 1 - prev) + 1 + gamma_bits(level);
            prev = i + 1;
        }
        INFO("s " << s);
        CHECK(size == 32 + 24 + 4 * groups + (bits + 7) / 8);
        if (s == 1) CHECK(size < ma.size());  // sparse levels: Elias pays off
    }
}

TEST_CASE("qsgd and terngrad: AVX-512, AVX2 and baseline builds give identical messages, residuals and decodes",
          "[compress][qsgd][terngrad]") {
    const std::size_t n = 70001;  // crosses a 65536-element random-number block
    const auto g = hitch_test::gradients(n, 8);
    const auto r = hitch_test::gradients(n, 9);
    auto same = [&](const auto& codec) {
        std::vector<std::vector<std::byte>> m(3), plain(3);
        std::vector<std::vector<float>> res(3, std::vector<float>(n)), dec(3, std::vector<float>(n, 1.0f));
        for (int tier : {2, 1, 0}) {
            auto s = codec.make_state(n), t = codec.make_state(n);
            hitch_test::set_isa(tier);
            codec.encode_ef(tensor_view<const float>(g), r, res[tier], s, m[tier]);
            codec.encode(tensor_view<const float>(g), t, plain[tier]);
            codec.decode_add(m[2], tensor_view<float>(dec[tier]));
        }
        hitch_test::set_isa(2);
        CHECK(m[2] == m[0]);
        CHECK(m[1] == m[0]);
        CHECK(plain[2] == plain[0]);
        CHECK(plain[1] == plain[0]);
        CHECK(res[2] == res[0]);
        CHECK(res[1] == res[0]);
        CHECK(dec[2] == dec[0]);
        CHECK(dec[1] == dec[0]);
        // The fused residual is v - D(m).
        const auto d = decode(codec, m[0], n);
        for (std::size_t i = 0; i < n; ++i) CHECK(res[0][i] == (g[i] + r[i]) - d[i]);
    };
    same(hc::qsgd{});
    same(hc::qsgd({.levels = 127, .group_size = 0}));
    same(hc::qsgd({.levels = 5, .group_size = 64}));
    same(hc::qsgd({.levels = 1, .group_size = 512}));  // the one-level kernel
    same(hc::terngrad{});
    same(hc::terngrad({.clip_sigmas = 2.5}));
}

TEST_CASE("terngrad's thinning: the AVX2 and AVX-512 kernels keep exactly the codes the portable kernel keeps",
          "[compress][terngrad]") {
    // Every length from 0 to 300 (whole steps of 64 codes, the portable tail, words of codes that are all zero),
    // several first counters and thresholds from nothing kept to everything kept; dense codes, and sparse ones (one
    // in 16 non-zero, as in a gradient with outliers) for steps with any number of draws, not only whole vectors.
    for (const bool sparse : {false, true}) {
        std::vector<std::byte> codes(300 / 4 + 1);
        std::uint64_t x = sparse ? 11 : 7;
        for (auto& c : codes) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            unsigned byte = static_cast<unsigned>(x >> 56);
            if (sparse) {
                byte = 0;
                for (unsigned j = 0; j < 4; ++j)
                    if (((x >> (40 + 4 * j)) & 15u) == 0)
                        byte |= (2u | static_cast<unsigned>((x >> (20 + j)) & 1u)) << (2 * j);
            }
            c = static_cast<std::byte>(byte);
        }
        for (std::size_t i = 20; i < 28; ++i) codes[i] = std::byte{0};  // 32 zero codes: a step with nothing to thin
        const hc::detail::counter_rng rng(hc::detail::draw_key(3, 1, 4));
        // The thresholds include ties: T >> 7 equal to the 16-bit half-draw of element 5 (odd: a high half) or
        // 70 (even, in the second step of 64) of first = 4096, so the 7 more bits of the tie's draw decide.
        std::vector<std::uint32_t> thresholds = {0u, 1u, 1u << 22, 8388607u, 8388608u};
        for (const std::uint32_t e : {4096u + 5u, 4096u + 70u})
            for (const std::uint32_t low : {0u, 64u, 127u})
                thresholds.push_back(((rng.bits(e / 2) >> (16 * (e % 2))) & 0xffffu) << 7 | low);
        for (const std::uint32_t threshold : thresholds)
            for (const std::uint32_t first : {0u, 16u, 4096u, 65536u - 304u})  // counters stay in one block
                for (std::size_t n = 0; n <= 300; n += (n < 140 ? 1 : 16)) {
                    std::vector<std::byte> portable(codes.begin(),
                                                    codes.begin() + static_cast<std::ptrdiff_t>((n + 3) / 4));
                    if (n % 4 != 0) portable.back() &= static_cast<std::byte>((1u << (2 * (n % 4))) - 1u);
                    auto wide = portable, widest = portable;
                    hc::detail::thin_kernel(portable.data(), n, first, rng, threshold);
#if HITCH_COMPRESS_X86
                    if (hc::detail::cpu_has_avx2_set())
                        hc::detail::thin_avx2(wide.data(), n, first, rng, threshold);
                    else
                        wide = portable;
                    if (hc::detail::cpu_has_avx512_set())
                        hc::detail::thin_avx512(widest.data(), n, first, rng, threshold);
                    else
                        widest = portable;
#else
                    wide = widest = portable;
#endif
                    INFO("n " << n << " first " << first << " threshold " << threshold);
                    CHECK(wide == portable);
                    CHECK(widest == portable);
                    if (!sparse && n == 300 &&
                        threshold == 1u << 22) {  // P(keep) = 1/2: about half the non-zero codes go
                        const auto nonzero = [](const std::vector<std::byte>& c) {
                            std::size_t k = 0;
                            for (const std::byte b : c)
                                for (unsigned j = 0; j < 8; j += 2) k += ((static_cast<unsigned>(b) >> j) & 3u) != 0;
                            return k;
                        };
                        const std::size_t before = nonzero({codes.begin(), codes.begin() + 75}),
                                          after = nonzero(portable);
                        CHECK(after > before * 3 / 10);
                        CHECK(after < before * 7 / 10);
                    }
                }
    }
}

TEST_CASE("packing 2-bit and 4-bit codes: the AVX2 kernels write the portable loops' bytes at every length",
          "[compress][qsgd][terngrad]") {
    std::vector<std::uint8_t> codes(1200);
    std::uint32_t x = 12345;
    for (auto& c : codes) {
        x = x * 1664525u + 1013904223u;
        c = static_cast<std::uint8_t>(x >> 24);
    }
    for (const unsigned b : {2u, 4u}) {
        std::vector<std::uint8_t> limited(codes.size());
        for (std::size_t i = 0; i < codes.size(); ++i)
            limited[i] = static_cast<std::uint8_t>(codes[i] & ((1u << b) - 1u));
        for (std::size_t n = 0; n <= codes.size(); n += n < 300 ? 1 : 97) {
            const std::size_t bytes = hc::detail::code_bytes(n, b);
            // A guard byte past the end must stay untouched.
            std::vector<std::byte> portable(bytes + 1, std::byte{0x5a}), wide(bytes + 1, std::byte{0x5a});
            hc::detail::pack_codes(limited.data(), n, b, portable.data());
            hc::detail::pack_codes(limited.data(), n, b, wide.data(), hc::detail::best_isa());
            INFO("b " << b << " n " << n << " tier " << static_cast<int>(hc::detail::best_isa()));
            CHECK(wide == portable);
            // And the portable loops pack what the format says: code i at bits [i b, (i + 1) b).
            std::vector<std::uint8_t> back(n);
            hc::detail::unpack_codes(portable.data(), n, b, back.data());
            CHECK(std::equal(back.begin(), back.end(), limited.begin()));
        }
    }
}

TEST_CASE("terngrad's thinning draw: a code survives iff its full 23-bit draw is below the threshold",
          "[compress][terngrad]") {
    // The reference computes both hashes of every draw, D = H << 7 | E; thin_keeps reads E only on a tie of H with
    // T >> 7. D is uniform on [0, 2^23) (the halves of a bijective 32-bit hash), so P(keep) = T / 2^23 exactly.
    const hc::detail::counter_rng rng(hc::detail::draw_key(9, 2, 6));
    std::uint64_t x = 5;
    std::size_t ties = 0;
    for (std::uint32_t i = 0; i < 65536; i += 1 + (i % 7)) {
        const unsigned shift = 16 * (i % 2);
        const std::uint32_t h = (rng.bits(i / 2) >> shift) & 0xffffu;
        const std::uint32_t draw = h << 7 | ((rng.bits(32768 + i / 2) >> shift) & 127u);
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        // Random thresholds, and ones that tie with the draw's high bits (below, at and above the draw).
        for (const std::uint32_t t :
             {static_cast<std::uint32_t>(x >> 41), draw, draw + 1, draw - std::min(draw, 1u), h << 7, h << 7 | 127u}) {
            ties += (t >> 7) == h;
            INFO("element " << i << " threshold " << t);
            CHECK(hc::detail::thin_keeps(rng, i, t) == (draw < t));
        }
        CHECK(hc::detail::thin_keeps(rng, i, 1u << 23));
    }
    CHECK(ties > 1000);
}

TEST_CASE("qsgd and terngrad with error feedback conserve everything; different streams round differently",
          "[compress][qsgd][terngrad][error_feedback]") {
    hitch_test::check_conservation(hc::qsgd{}, 3001, 30);
    hitch_test::check_conservation(hc::qsgd({.levels = 1, .coding = hc::qsgd_coding::elias_gamma}), 3001, 30);
    hitch_test::check_conservation(hc::terngrad{}, 3001, 30);
    hitch_test::check_conservation(hc::terngrad({.clip_sigmas = 2.5}), 3001, 30);
    const hc::qsgd codec;
    const auto v = hitch_test::gradients(1000, 5);
    auto a = codec.make_state(1000), b = codec.make_state(1000);
    b.stream = 1;
    std::vector<std::byte> ma, mb;
    codec.encode(tensor_view<const float>(v), a, ma);
    codec.encode(tensor_view<const float>(v), b, mb);
    CHECK(ma != mb);
    auto c = codec.make_state(1000);
    std::vector<std::byte> mc;
    codec.encode(tensor_view<const float>(v), c, mc);
    CHECK(mc == ma);  // same seed, stream and step: reproducible
}

TEST_CASE("terngrad sends 0 or +-max|v|, clips at c sigma, with the stated size", "[compress][terngrad]") {
    const std::size_t n = 9999;
    const auto v = hitch_test::gradients(n, 31);
    double sum = 0, sum2 = 0, max_abs = 0;
    for (float x : v)
        sum += x, sum2 += static_cast<double>(x) * x, max_abs = std::max(max_abs, std::fabs(static_cast<double>(x)));
    const double sigma = std::sqrt(sum2 / n - (sum / n) * (sum / n));
    for (double c : {0.0, 2.5}) {
        const hc::terngrad codec({.clip_sigmas = c});
        auto s = codec.make_state(n);
        std::vector<std::byte> m;
        CHECK(codec.encode(tensor_view<const float>(v), s, m) == 32 + 8 + (n + 3) / 4);
        const auto d = decode(codec, m, n);
        const double scale = c == 0 ? max_abs : std::min(max_abs, c * sigma);
        if (c > 0) CHECK(scale < max_abs);  // the outliers make clipping bite
        std::size_t nonzero = 0;
        for (std::size_t i = 0; i < n; ++i) {
            CHECK((d[i] == 0.0f || std::fabs(std::fabs(d[i]) - scale) <= 1e-6 * scale));
            CHECK((d[i] == 0.0f || std::signbit(d[i]) == std::signbit(v[i])));
            nonzero += d[i] != 0.0f;
        }
        CHECK(nonzero > 0);
    }
}

TEST_CASE("qsgd and terngrad refuse bad options, non-finite buckets and corrupt messages",
          "[compress][qsgd][terngrad]") {
    CHECK_THROWS_WITH(hc::qsgd({.levels = 0}), Catch::Contains("levels = 0"));
    CHECK_THROWS_WITH(hc::qsgd({.group_size = 100}), Catch::Contains("group_size = 100"));
    CHECK_THROWS_WITH(hc::terngrad({.clip_sigmas = -1}), Catch::Contains("clip_sigmas = -1"));
    const std::size_t n = 40;
    auto v = hitch_test::gradients(n, 2);
    std::vector<std::byte> m;
    std::vector<float> out(n);
    auto tweak = [&](auto&& f) {
        auto c = m;
        f(c);
        hc::wire::store_le<std::uint64_t>(c.data() + 16, c.size() - 32);
        hitch_test::reseal(c);
        return c;
    };
    {
        const hc::qsgd codec({.levels = 5, .group_size = 16});  // 4-bit codes, level <= 5
        auto s = codec.make_state(n);
        v[3] = std::nanf("");
        CHECK_THROWS_AS(codec.encode(tensor_view<const float>(v), s, m), hc::non_finite_error);
        v[3] = 0.25f;
        codec.encode(tensor_view<const float>(v), s, m);
        const std::size_t codes = 32 + 16 + 4 * 3;
        CHECK(hitch_test::throws_corrupt(
            [&] { codec.decode(tweak([&](auto& c) { c[codes] = std::byte{0x0e}; }), tensor_view<float>(out)); },
            "code 14 of element 0"));  // level 7 > 5
        CHECK(hitch_test::throws_corrupt(
            [&] { codec.decode(tweak([&](auto& c) { c[codes] = std::byte{0x01}; }), tensor_view<float>(out)); },
            "code 1 of element 0"));  // negative zero
        CHECK(hitch_test::throws_corrupt(
            [&] {
                codec.decode(tweak([](auto& c) { hc::wire::store_le<std::uint32_t>(c.data() + 32, 0); }),
                             tensor_view<float>(out));
            },
            "levels 0"));
        CHECK(hitch_test::throws_corrupt(
            [&] { codec.decode(tweak([](auto& c) { c[36] = std::byte{2}; }), tensor_view<float>(out)); }, "coding 2"));
        CHECK(hitch_test::throws_corrupt(
            [&] {
                codec.decode(tweak([](auto& c) { hc::wire::store_le(c.data() + 48, -1.0f); }), tensor_view<float>(out));
            },
            "norm of group 0"));
        CHECK(hitch_test::throws_corrupt(
            [&] { codec.decode(tweak([](auto& c) { c.pop_back(); }), tensor_view<float>(out)); }, "truncated: codes"));
    }
    {
        const hc::qsgd codec({.levels = 3, .group_size = 0, .coding = hc::qsgd_coding::elias_gamma});
        auto s = codec.make_state(n);
        codec.encode(tensor_view<const float>(v), s, m);
        const std::size_t stream = 32 + 16 + 4 + 8;
        CHECK(hitch_test::throws_corrupt(
            [&] {
                codec.decode(tweak([&](auto& c) { hc::wire::store_le<std::uint64_t>(c.data() + stream - 8, n); }),
                             tensor_view<float>(out));
            },
            "Elias stream ends"));
        CHECK(hitch_test::throws_corrupt(
            [&] { codec.decode(tweak([](auto& c) { c.push_back(std::byte{0}); }), tensor_view<float>(out)); },
            "unexpected bits"));
        // A run of zeros longer than 62 bits: overflow, refused.
        CHECK(hitch_test::throws_corrupt(
            [&] {
                codec.decode(tweak([&](auto& c) {
                                 c.resize(stream + 9);
                                 std::fill(c.begin() + static_cast<std::ptrdiff_t>(stream), c.end(), std::byte{0});
                             }),
                             tensor_view<float>(out));
            },
            "Elias stream ends or overflows"));
    }
    {
        const hc::terngrad codec;
        auto s = codec.make_state(n);
        codec.encode(tensor_view<const float>(v), s, m);
        CHECK(hitch_test::throws_corrupt(
            [&] { codec.decode(tweak([](auto& c) { c[40] = std::byte{0x04}; }), tensor_view<float>(out)); },
            "code 01 in byte 0"));
        CHECK(hitch_test::throws_corrupt(
            [&] {
                codec.decode(tweak([](auto& c) { hc::wire::store_le(c.data() + 32, -2.0f); }), tensor_view<float>(out));
            },
            "scale -2"));
        CHECK(hitch_test::throws_corrupt(
            [&] { codec.decode(tweak([](auto& c) { c[36] = std::byte{1}; }), tensor_view<float>(out)); },
            "padding bytes"));
        std::vector<float> odd(41);
        auto s41 = codec.make_state(41);
        const std::vector<float> ones(41, 1.0f);
        codec.encode(tensor_view<const float>(ones), s41, m);
        CHECK(hitch_test::throws_corrupt(
            [&] { codec.decode(tweak([](auto& c) { c.back() |= std::byte{0x80}; }), tensor_view<float>(odd)); },
            "padding bits"));
    }
}
