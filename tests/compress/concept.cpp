// The compressor concept against stand-in types: one that models it and variants that each miss exactly one
// requirement and must not; and the models hitch ships.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/compress/bf16.hpp"
#include "hitch/compress/dgc.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/randomk.hpp"
#include "hitch/compress/terngrad.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/concepts/compressor.hpp"

namespace stand_in {

struct codec_state {
    std::size_t count = 0;
};

struct identity_and_traits {
    static constexpr std::uint8_t codec_id = 200;
    static constexpr std::string_view name = "stand-in";
    static constexpr bool additive = false;
    static constexpr bool needs_error_feedback = false;
    static constexpr bool ring_compressible = false;
    struct options_type {
        void validate() const {}
    };
    identity_and_traits() = default;
    explicit identity_and_traits(const options_type& o) : options_(o) {}
    const options_type& options() const { return options_; }
    options_type options_{};
};

struct good_codec : identity_and_traits {
    using identity_and_traits::identity_and_traits;
    using state = codec_state;
    state make_state(std::size_t n) const { return {n}; }
    template <class T>
    std::size_t encode(hitch::tensor_view<T>, state&, std::vector<std::byte>&) const {
        return 0;
    }
    std::size_t max_message_bytes(std::size_t) const { return 0; }
    template <class T>
    void decode(std::span<const std::byte>, hitch::tensor_view<T>) const {}
    template <class T>
    void decode_add(std::span<const std::byte>, hitch::tensor_view<T>) const {}
    void save_state(const state&, std::vector<std::byte>&) const {}
    void load_state(std::span<const std::byte>, state&) const {}
};

struct codec_without_name {
    static constexpr std::uint8_t codec_id = 200;
    static constexpr bool additive = false;
    static constexpr bool needs_error_feedback = false;
    static constexpr bool ring_compressible = false;
    using state = codec_state;
    state make_state(std::size_t n) const { return {n}; }
};
struct codec_without_options {
    static constexpr std::uint8_t codec_id = 200;
    static constexpr std::string_view name = "x";
};
struct codec_without_traits : codec_without_options {
    struct options_type {
        void validate() const {}
    };
    codec_without_traits() = default;
    explicit codec_without_traits(const options_type&) {}
    const options_type& options() const { return options_; }
    options_type options_{};
};
struct codec_without_state : identity_and_traits {
    using identity_and_traits::identity_and_traits;
    int make_state(std::size_t) const { return 0; }
};
struct codec_without_decode_add : identity_and_traits {
    using identity_and_traits::identity_and_traits;
    using state = codec_state;
    state make_state(std::size_t n) const { return {n}; }
    template <class T>
    std::size_t encode(hitch::tensor_view<T>, state&, std::vector<std::byte>&) const {
        return 0;
    }
    std::size_t max_message_bytes(std::size_t) const { return 0; }
    template <class T>
    void decode(std::span<const std::byte>, hitch::tensor_view<T>) const {}
    void save_state(const state&, std::vector<std::byte>&) const {}
    void load_state(std::span<const std::byte>, state&) const {}
};
struct codec_without_save : identity_and_traits {
    using identity_and_traits::identity_and_traits;
    using state = codec_state;
    state make_state(std::size_t n) const { return {n}; }
    template <class T>
    std::size_t encode(hitch::tensor_view<T>, state&, std::vector<std::byte>&) const {
        return 0;
    }
    std::size_t max_message_bytes(std::size_t) const { return 0; }
    template <class T>
    void decode(std::span<const std::byte>, hitch::tensor_view<T>) const {}
    template <class T>
    void decode_add(std::span<const std::byte>, hitch::tensor_view<T>) const {}
};
struct codec_without_max_bytes : identity_and_traits {
    using identity_and_traits::identity_and_traits;
    using state = codec_state;
    state make_state(std::size_t n) const { return {n}; }
    template <class T>
    std::size_t encode(hitch::tensor_view<T>, state&, std::vector<std::byte>&) const {
        return 0;
    }
    template <class T>
    void decode(std::span<const std::byte>, hitch::tensor_view<T>) const {}
    template <class T>
    void decode_add(std::span<const std::byte>, hitch::tensor_view<T>) const {}
    void save_state(const state&, std::vector<std::byte>&) const {}
    void load_state(std::span<const std::byte>, state&) const {}
};
// Claims to be additive but has no summable form: a compressor, not a summable_compressor.
struct additive_without_summable : good_codec {
    using good_codec::good_codec;
    static constexpr bool additive = true;
};

}  // namespace stand_in

TEST_CASE("compressor concept: stand-ins that model it and near-misses that do not", "[compress][concepts]") {
    STATIC_REQUIRE(hitch::compressor<stand_in::good_codec>);
    STATIC_REQUIRE(hitch::check_compressor<stand_in::good_codec>());
    STATIC_REQUIRE_FALSE(hitch::compressor_has_options<stand_in::codec_without_options>);
    STATIC_REQUIRE_FALSE(hitch::compressor<stand_in::codec_without_options>);
    STATIC_REQUIRE_FALSE(hitch::compressor_has_identity<stand_in::codec_without_name>);
    STATIC_REQUIRE_FALSE(hitch::compressor<stand_in::codec_without_name>);
    STATIC_REQUIRE_FALSE(hitch::compressor_has_traits<stand_in::codec_without_traits>);
    STATIC_REQUIRE_FALSE(hitch::compressor<stand_in::codec_without_traits>);
    STATIC_REQUIRE_FALSE(hitch::compressor_has_state<stand_in::codec_without_state>);
    STATIC_REQUIRE_FALSE(hitch::compressor<stand_in::codec_without_state>);
    STATIC_REQUIRE_FALSE(hitch::compressor_can_decode<stand_in::codec_without_decode_add>);
    STATIC_REQUIRE_FALSE(hitch::compressor<stand_in::codec_without_decode_add>);
    STATIC_REQUIRE_FALSE(hitch::compressor_saves_state<stand_in::codec_without_save>);
    STATIC_REQUIRE_FALSE(hitch::compressor<stand_in::codec_without_save>);
    STATIC_REQUIRE_FALSE(hitch::compressor_can_encode<stand_in::codec_without_max_bytes>);
    STATIC_REQUIRE_FALSE(hitch::compressor<stand_in::codec_without_max_bytes>);
    STATIC_REQUIRE(hitch::compressor<stand_in::additive_without_summable>);
    STATIC_REQUIRE_FALSE(hitch::summable_compressor<stand_in::additive_without_summable>);
    STATIC_REQUIRE_FALSE(hitch::residual_compressor<stand_in::good_codec>);
    STATIC_REQUIRE_FALSE(hitch::low_rank_compressor<stand_in::good_codec>);
    STATIC_REQUIRE_FALSE(hitch::compressor<int>);
    // A user's codec gets error feedback for free.
    STATIC_REQUIRE(hitch::compressor<hitch::compress::error_feedback<stand_in::good_codec>>);
}

TEST_CASE("compressor concept: hitch's casts and their traits", "[compress][concepts]") {
    namespace hc = hitch::compress;
    STATIC_REQUIRE(hitch::summable_compressor<hc::none>);
    STATIC_REQUIRE(hitch::summable_compressor<hc::fp16>);
    STATIC_REQUIRE(hitch::summable_compressor<hc::bf16>);
    STATIC_REQUIRE(hitch::summable_compressor<hc::error_feedback<hc::fp16>>);
    STATIC_REQUIRE(hc::error_feedback<hc::fp16>::name == "ef_fp16");
    STATIC_REQUIRE(hc::error_feedback<hc::fp16>::codec_id == hc::fp16::codec_id);
    STATIC_REQUIRE_FALSE(hc::error_feedback<hc::fp16>::needs_error_feedback);
}

TEST_CASE("compressor concept: codecs whose state advances can take back an encode", "[compress][concepts]") {
    namespace hc = hitch::compress;
    auto can_undo = []<class Codec>(const Codec&) {
        return requires(const Codec& c, typename Codec::state& s) { c.undo(s); };
    };
    STATIC_REQUIRE(can_undo(hc::topk{}));
    STATIC_REQUIRE(can_undo(hc::randomk{}));
    STATIC_REQUIRE(can_undo(hc::qsgd{}));
    STATIC_REQUIRE(can_undo(hc::terngrad{}));
    STATIC_REQUIRE(can_undo(hc::dgc{}));
    STATIC_REQUIRE(can_undo(hc::error_feedback<hc::onebit>{}));
    // undo takes back exactly one step.
    const hc::terngrad t;
    auto s = t.make_state(10);
    const std::vector<float> g(10, 1.0f);
    std::vector<std::byte> m;
    t.encode(hitch::tensor_view<const float>(g), s, m);
    t.encode(hitch::tensor_view<const float>(g), s, m);
    t.undo(s);
    CHECK(s.step == 1);
}
