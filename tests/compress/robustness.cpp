// Every decoder against damaged input: flipped bits (caught by the checksum), resealed mutations of every byte
// (caught by the field checks, or decoded within bounds), truncations, foreign and mismatched messages. Built
// with AddressSanitizer and UndefinedBehaviorSanitizer in the sanitizer configuration, so "within bounds" is
// checked, not assumed.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "codecs.hpp"
#include "helpers.hpp"

using hitch::tensor_view;

namespace {

template <class Codec>
std::vector<std::byte> valid_message(const Codec& codec, std::size_t n) {
    auto s = codec.make_state(n);
    const auto g = hitch_test::gradients(n, 123);
    std::vector<std::byte> m;
    codec.encode(tensor_view<const float>(g), s, m);
    return m;
}

// Decodes, and returns 0 on success, 1 on corrupt_message_error; anything else fails the test.
template <class Codec>
int try_decode(const Codec& codec, const std::vector<std::byte>& m, std::vector<float>& out, bool add) {
    try {
        if (add)
            codec.decode_add(m, tensor_view<float>(out));
        else
            codec.decode(m, tensor_view<float>(out));
        return 0;
    } catch (const hitch::corrupt_message_error&) {
        return 1;
    } catch (const std::exception& e) {
        FAIL_CHECK(Codec::name << ": decoding a damaged message threw something else: " << e.what());
        return 2;
    }
}

}  // namespace

TEST_CASE("every decoder: flipped bits are refused, resealed damage is refused or decoded in bounds",
          "[compress][robustness]") {
    hitch_test::for_each_codec([](const auto& codec) {
        using codec_t = std::remove_cvref_t<decltype(codec)>;
        const std::size_t n = 203;
        const auto good = valid_message(codec, n);
        std::vector<float> out(n);
        INFO(codec_t::name << ": message of " << good.size() << " bytes");
        REQUIRE(try_decode(codec, good, out, false) == 0);
        std::size_t refused = 0, accepted = 0;
        std::mt19937 rng(static_cast<unsigned>(good.size()));
        for (std::size_t at = 0; at < good.size(); ++at) {
            // Without resealing, the checksum catches any change.
            auto flipped = good;
            flipped[at] ^= static_cast<std::byte>(1u << (rng() % 8));
            CHECK(try_decode(codec, flipped, out, false) == 1);
            // Resealed, the field checks must refuse or the decoder must stay in bounds.
            for (int trial = 0; trial < 3; ++trial) {
                auto m = good;
                m[at] = static_cast<std::byte>(rng());
                if (at < 28) hitch::compress::wire::store_le<std::uint64_t>(m.data() + 16, m.size() - 32);
                hitch_test::reseal(m);
                const int r = try_decode(codec, m, out, trial == 2);
                refused += r == 1;
                accepted += r == 0;
            }
        }
        CHECK(refused > 0);
        CHECK(refused + accepted == 3 * good.size());  // nothing but corrupt_message_error or success
        // Every truncation of the payload, length field fixed up and resealed: refused.
        for (std::size_t len = 32; len < good.size(); ++len) {
            std::vector<std::byte> t(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(len));
            hitch::compress::wire::store_le<std::uint64_t>(t.data() + 16, len - 32);
            hitch_test::reseal(t);
            CHECK(try_decode(codec, t, out, false) == 1);
        }
        // Into a destination of another size.
        std::vector<float> smaller(n - 1), larger(n + 1);
        CHECK(hitch_test::throws_corrupt([&] { codec.decode(good, tensor_view<float>(smaller)); },
                                         "destination has 202"));
        CHECK(hitch_test::throws_corrupt([&] { codec.decode_add(good, tensor_view<float>(larger)); },
                                         "destination has 204"));
    });
}

TEST_CASE("every decoder refuses every other codec's messages and random bytes", "[compress][robustness]") {
    std::vector<std::vector<std::byte>> messages;
    std::vector<int> ids;
    hitch_test::for_each_codec([&](const auto& codec) {
        messages.push_back(valid_message(codec, 100));
        ids.push_back(std::remove_cvref_t<decltype(codec)>::codec_id);
    });
    std::mt19937 rng(3);
    hitch_test::for_each_codec([&](const auto& codec) {
        using codec_t = std::remove_cvref_t<decltype(codec)>;
        std::vector<float> out(100);
        for (std::size_t k = 0; k < messages.size(); ++k)
            if (ids[k] != codec_t::codec_id)
                CHECK(hitch_test::throws_corrupt([&] { codec.decode(messages[k], tensor_view<float>(out)); },
                                                 "codec id"));
        for (std::size_t len : {0u, 1u, 31u, 32u, 33u, 100u, 1000u}) {
            std::vector<std::byte> junk(len);
            for (auto& b : junk) b = static_cast<std::byte>(rng());
            CHECK_THROWS_AS(codec.decode(junk, tensor_view<float>(out)), hitch::corrupt_message_error);
        }
    });
}
