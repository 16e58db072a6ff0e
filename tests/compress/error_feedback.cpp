// error_feedback<Codec>: conservation over many steps (fused and generic paths), refused input leaves the state
// untouched, and the residual saves and loads through a checked blob.
#include <catch2/catch.hpp>

#include <limits>
#include <vector>

#include "../core/legacy_formats.hpp"
#include "helpers.hpp"
#include "hitch/compress/bf16.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/compress/none.hpp"

namespace hc = hitch::compress;
using hitch::tensor_view;

namespace {

// fp16 without its fused encode_ef: error_feedback must fall back to decoding its own message.
struct plain_fp16 {
    static constexpr std::uint8_t codec_id = 201;
    static constexpr std::string_view name = "plain_fp16";
    static constexpr bool additive = false;
    static constexpr bool needs_error_feedback = false;
    static constexpr bool ring_compressible = false;
    using state = hc::empty_state;
    using options_type = hc::fp16::options_type;
    hc::fp16 inner;
    plain_fp16() = default;
    explicit plain_fp16(const options_type& o) : inner(o) {}
    const options_type& options() const { return inner.options(); }
    state make_state(std::size_t n) const { return {n}; }
    std::size_t max_message_bytes(std::size_t n) const { return inner.max_message_bytes(n); }
    template <class T>
    std::size_t encode(tensor_view<T> in, state& s, std::vector<std::byte>& m) const {
        return inner.encode(in, s, m);
    }
    template <class T>
    void decode(std::span<const std::byte> m, tensor_view<T> out) const {
        inner.decode(m, out);
    }
    template <class T>
    void decode_add(std::span<const std::byte> m, tensor_view<T> out) const {
        inner.decode_add(m, out);
    }
    void save_state(const state& s, std::vector<std::byte>& b) const { hc::detail::save_empty_state<codec_id>(s, b); }
    void load_state(std::span<const std::byte> b, state& s) const { hc::detail::load_empty_state<codec_id>(b, s, "x"); }
};
static_assert(hitch::compressor<plain_fp16> && !hitch::residual_compressor<plain_fp16>);

}  // namespace

TEST_CASE("error feedback conserves everything over T steps: casts", "[compress][error_feedback]") {
    // Large gradients make fp16/bf16 rounding visible in the residual.
    hitch_test::check_conservation(hc::fp16{}, 3001, 40, 3.0f);
    hitch_test::check_conservation(hc::bf16{}, 3001, 40, 3.0f);
    hitch_test::check_conservation(hc::none{}, 1000, 5);
    hitch_test::check_conservation(plain_fp16{}, 3001, 40, 3.0f);
}

TEST_CASE("error feedback: fused and generic paths give the same messages and residuals",
          "[compress][error_feedback]") {
    const hc::error_feedback<hc::fp16> fused;
    const hc::error_feedback<plain_fp16> generic;
    auto a = fused.make_state(777);
    auto b = generic.make_state(777);
    std::vector<std::byte> ma, mb;
    for (int t = 0; t < 10; ++t) {
        const auto g = hitch_test::gradients(777, 50 + static_cast<std::uint64_t>(t), 2.0f);
        fused.encode(tensor_view<const float>(g), a, ma);
        generic.encode(tensor_view<const float>(g), b, mb);
        REQUIRE(ma.size() == mb.size());
        CHECK(std::equal(ma.begin() + 32, ma.end(), mb.begin() + 32));
        CHECK(a.residual == b.residual);
    }
}

TEST_CASE("error feedback: a refused bucket changes nothing", "[compress][error_feedback]") {
    const hc::error_feedback<hc::fp16> ef;
    auto s = ef.make_state(100);
    std::vector<std::byte> m;
    auto g = hitch_test::gradients(100, 9, 2.0f);
    ef.encode(tensor_view<const float>(g), s, m);
    const auto saved = s.residual;
    g[50] = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_AS(ef.encode(tensor_view<const float>(g), s, m), hc::non_finite_error);
    CHECK(s.residual == saved);
    g[50] = 1e6f;  // finite, but beyond half's range
    CHECK_THROWS_AS(ef.encode(tensor_view<const float>(g), s, m), hc::non_finite_error);
    CHECK(s.residual == saved);
    const hc::error_feedback<plain_fp16> generic;
    auto sg = generic.make_state(100);
    g[50] = std::numeric_limits<float>::infinity();
    CHECK_THROWS_AS(generic.encode(tensor_view<const float>(g), sg, m), hc::non_finite_error);
    CHECK(sg.residual == std::vector<float>(100, 0.0f));
}

TEST_CASE("error feedback: the residual saves and loads through a checked blob", "[compress][error_feedback]") {
    const hc::error_feedback<hc::fp16> ef;
    auto s = ef.make_state(500);
    std::vector<std::byte> m, blob;
    for (int t = 0; t < 3; ++t) {
        const auto g = hitch_test::gradients(500, 70 + static_cast<std::uint64_t>(t), 2.0f);
        ef.encode(tensor_view<const float>(g), s, m);
    }
    ef.save_state(s, blob);
    CHECK(blob.size() == hc::wire::state_payload_offset + 8 + 4 * 500 + 8 + hc::wire::state_payload_offset);
    auto restored = ef.make_state(500);
    ef.load_state(blob, restored);
    CHECK(restored.residual == s.residual);
    // Both continue identically.
    const auto g = hitch_test::gradients(500, 99, 2.0f);
    std::vector<std::byte> m2;
    ef.encode(tensor_view<const float>(g), s, m);
    ef.encode(tensor_view<const float>(g), restored, m2);
    CHECK(m == m2);
    CHECK(restored.residual == s.residual);

    auto other_size = ef.make_state(499);
    CHECK(hitch_test::throws_corrupt([&] { ef.load_state(blob, other_size); }, "bucket of 500 elements, not 499"));
    for (std::size_t at : {std::size_t{3}, std::size_t{40}, blob.size() - 1}) {
        auto bad = blob;
        bad[at] ^= std::byte{4};
        auto t = ef.make_state(500);
        CHECK_THROWS_AS(ef.load_state(bad, t), hitch::corrupt_message_error);
        CHECK(t.residual == std::vector<float>(500, 0.0f));
    }
    auto truncated = blob;
    truncated.resize(truncated.size() - 5);
    CHECK(hitch_test::throws_corrupt([&] { ef.load_state(truncated, other_size); }, "truncated"));
    // A plain fp16 state blob is not an error_feedback blob (flags differ), and vice versa.
    std::vector<std::byte> plain;
    hc::fp16{}.save_state(hc::fp16{}.make_state(500), plain);
    CHECK(hitch_test::throws_corrupt([&] { ef.load_state(plain, restored); }, "flags 0 are not 1"));
    hc::empty_state e{500};
    CHECK(hitch_test::throws_corrupt([&] { hc::fp16{}.load_state(blob, e); }, "flags 1 are not 0"));
    // A blob whose residual holds NaN (resealed so only the content check can catch it).
    auto nan_blob = blob;
    hc::wire::store_le(nan_blob.data() + hc::wire::state_payload_offset + 8 + 4 * 7,
                       std::numeric_limits<float>::quiet_NaN());
    hitch_test::reseal_frame(nan_blob);
    CHECK(hitch_test::throws_corrupt([&] { ef.load_state(nan_blob, restored); }, "NaN"));
}

TEST_CASE("error_feedback loads a version 1 state blob written by the first release", "[compress][error_feedback]") {
    const auto* p = reinterpret_cast<const std::byte*>(hitch_test::legacy::hcst_v1_error_feedback_fp16);
    const std::vector<std::byte> old(p, p + sizeof hitch_test::legacy::hcst_v1_error_feedback_fp16);
    const hc::error_feedback<hc::fp16> ef;
    auto s = ef.make_state(3);
    ef.load_state(old, s);
    CHECK(s.residual == std::vector<float>{0x1.99ap-16f, -0x1.556p-14f, -0x1.d2ap-27f});
    // Saved again, it is a version 2 blob that loads to the same state.
    std::vector<std::byte> again;
    ef.save_state(s, again);
    CHECK(hc::wire::load_le<std::uint32_t>(again.data() + 8) == hc::wire::state_version);
    auto t = ef.make_state(3);
    ef.load_state(again, t);
    CHECK(t.residual == s.residual);
}
