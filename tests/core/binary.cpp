// core/binary.hpp: little-endian reads and writes with every bound checked, and the common frame's answers to a
// short, damaged, foreign or newer file. Also the sync policies' saved state (HSYN), the smallest format on it.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "hitch/core/binary.hpp"
#include "hitch/sync/detail/state.hpp"
#include "legacy_formats.hpp"

using Catch::Contains;

namespace {

std::vector<std::byte> bytes_of(const unsigned char* p, std::size_t n) {
    const auto* b = reinterpret_cast<const std::byte*>(p);
    return {b, b + n};
}

std::vector<std::byte> sample_frame() {
    std::vector<std::byte> out;
    hitch::frame_writer f(out, "TEST", 2);
    f.payload().put(std::uint32_t{7}).text("seven").put(1.5f);
    f.finish();
    return out;
}

constexpr hitch::frame_format sample_format{"TEST", 1, 2, "reader of test.bin", "test file"};

}  // namespace

TEST_CASE("byte_writer and byte_reader: little-endian round trip", "[core][binary]") {
    std::vector<std::byte> out;
    hitch::byte_writer w(out);
    const std::vector<float> floats = {1.0f, -2.5f, 3e-20f};
    w.put(std::uint8_t{0xab}).put(std::uint16_t{0x1234}).put(std::int32_t{-5}).put(std::uint64_t{1} << 40);
    w.put(0.25).text("name").values(std::span<const float>(floats));
    CHECK(w.position() == out.size());
    CHECK(out.size() == 1 + 2 + 4 + 8 + 8 + 4 + 4 + 12);
    CHECK(out[1] == std::byte{0x34});  // little-endian whatever the host
    CHECK(out[2] == std::byte{0x12});

    hitch::byte_reader r(out, "test");
    CHECK(r.get<std::uint8_t>("a") == 0xab);
    CHECK(r.get<std::uint16_t>("b") == 0x1234);
    CHECK(r.get<std::int32_t>("c") == -5);
    CHECK(r.get<std::uint64_t>("d") == std::uint64_t{1} << 40);
    CHECK(r.get<double>("e") == 0.25);
    CHECK(r.text(16, "f") == "name");
    std::vector<float> back;
    r.values(back, 3, "g");
    CHECK(back == floats);
    CHECK(r.remaining() == 0);
    r.expect_end();
}

TEST_CASE("byte_reader checks every bound and names its owner", "[core][binary]") {
    std::vector<std::byte> out;
    hitch::byte_writer(out).put(std::uint64_t{3}).put(std::uint32_t{100});
    hitch::byte_reader r(out, "hitch::thing", "corrupt");
    CHECK(r.count("n", 3) == 3);
    CHECK_THROWS_WITH(r.get<std::uint64_t>("the tail"),
                      "hitch::thing: corrupt: truncated: the tail needs 8 bytes but 4 remain");
    CHECK_THROWS_AS(r.get<std::uint64_t>("the tail"), hitch::corrupt_message_error);
    hitch::byte_reader r2(out, "hitch::thing");
    CHECK_THROWS_WITH(r2.count("n", 2), "hitch::thing: n 3 exceeds 2");
    hitch::byte_reader r3(out, "t");
    CHECK_THROWS_WITH(r3.take(~0ull, "huge"), Contains("huge needs 18446744073709551615 bytes but 12 remain"));
    hitch::byte_reader r4(out, "t");
    (void)r4.get<std::uint64_t>("n");
    CHECK_THROWS_WITH(r4.text(50, "name"), Contains("name length 100 exceeds the limit of 50 bytes"));
    hitch::byte_reader r5(out, "t");
    (void)r5.get<std::uint32_t>("a");
    CHECK_THROWS_WITH(r5.expect_end(), Contains("8 unexpected bytes"));

    std::array<std::byte, 6> fixed{};
    hitch::byte_writer f{std::span<std::byte>(fixed)};
    f.put(std::uint32_t{1});
    CHECK_THROWS_AS(f.put(std::uint32_t{2}), hitch::error);
    f.put(std::uint16_t{0xffff});
    CHECK(fixed[5] == std::byte{0xff});
}

TEST_CASE("byte_reader::values refuses a count whose byte size wraps around", "[core][binary]") {
    // 2^62 floats are 2^64 bytes: the product wraps to 0, which a check of the product alone lets through.
    std::vector<std::byte> out;
    hitch::byte_writer(out).put(std::uint64_t{1} << 62).put(1.0f);
    hitch::byte_reader r(out, "hitch::thing", "corrupt");
    const auto n = r.get<std::uint64_t>("n");
    std::vector<float> values{2.0f};
    CHECK_THROWS_WITH(r.values(values, n, "the values"),
                      "hitch::thing: corrupt: truncated: the values needs 4611686018427387904 values of 4 bytes but "
                      "4 bytes remain");
    CHECK(values == std::vector<float>{2.0f});
    hitch::byte_reader r2(out, "t");
    (void)r2.get<std::uint64_t>("n");
    r2.values(values, 1, "one value");
    CHECK(values == std::vector<float>{1.0f});
}

TEST_CASE("the common frame: header fields, and a short, damaged, foreign or newer file each said as such",
          "[core][binary]") {
    const auto good = sample_frame();
    REQUIRE(good.size() == hitch::frame_header_bytes + 4 + 4 + 5 + 4);
    CHECK(std::memcmp(good.data(), "TEST\0\0\0\0", 8) == 0);
    CHECK(hitch::load_le<std::uint32_t>(good.data() + 8) == 2);
    CHECK(hitch::frame_length(good) == good.size());
    const auto v = hitch::open_frame(good, sample_format);
    CHECK(v.version == 2);
    CHECK(v.payload.data() == good.data() + hitch::frame_header_bytes);
    CHECK(v.payload.size() == good.size() - hitch::frame_header_bytes);

    const auto open = [](std::vector<std::byte> b) { (void)hitch::open_frame(b, sample_format); };
    CHECK_THROWS_WITH(open({good.begin(), good.begin() + 30}), "reader of test.bin: truncated: 30 of 41 bytes");
    CHECK_THROWS_WITH(open({good.begin(), good.begin() + 10}),
                      "reader of test.bin: truncated: 10 bytes, shorter than the 24-byte header");
    CHECK_THROWS_WITH(open({}), Contains("truncated: 0 bytes"));
    auto longer = good;
    longer.push_back(std::byte{0});
    CHECK_THROWS_WITH(open(longer), Contains("42 bytes where the header says 41"));
    auto flipped = good;
    flipped[30] ^= std::byte{0x40};
    CHECK_THROWS_WITH(open(flipped), Contains("reader of test.bin: corrupt (checksum): the header says 0x") &&
                                         Contains("the 41 bytes give 0x"));
    auto foreign = good;
    std::memcpy(foreign.data(), "PK\x03\x04", 4);
    CHECK_THROWS_WITH(open(foreign), Contains("not a test file (magic \"PK\\x03\\x04\", expected \"TEST\")"));
    auto newer = good;
    hitch::store_le<std::uint32_t>(newer.data() + 8, 3);
    CHECK_THROWS_WITH(open(newer), "reader of test.bin: written by a newer hitch (format 3, this build reads 1-2)");
    hitch::store_le<std::uint32_t>(newer.data() + 8, 0);
    CHECK_THROWS_WITH(open(newer), Contains("format 0 is not one this build reads (1-2)"));
    // Every flipped bit and every cut is refused.
    for (std::size_t i = 0; i < good.size(); ++i) {
        for (int bit = 0; bit < 8; ++bit) {
            auto b = good;
            b[i] ^= static_cast<std::byte>(1 << bit);
            CHECK_THROWS_AS(open(b), hitch::corrupt_message_error);
        }
        CHECK_THROWS_AS(open({good.begin(), good.begin() + static_cast<std::ptrdiff_t>(i)}),
                        hitch::corrupt_message_error);
    }
}

TEST_CASE("sync policy state: version 2 round trip, version 1 still read", "[core][binary][sync]") {
    namespace sd = hitch::sync::detail;
    std::vector<std::byte> blob;
    const std::vector<std::uint64_t> values = {7, 11, 1u << 20};
    sd::save_counters(blob, "local_sgd", values);
    CHECK(std::memcmp(blob.data(), "HSYN\0\0\0\0", 8) == 0);
    std::vector<std::uint64_t> back(3);
    sd::load_counters(blob, "local_sgd", back);
    CHECK(back == values);
    CHECK_THROWS_AS(sd::load_counters(blob, "hard", back), hitch::mismatch_error);
    std::vector<std::uint64_t> two(2);
    CHECK_THROWS_WITH(sd::load_counters(blob, "local_sgd", two), Contains("3 counters where policy 'local_sgd' has 2"));
    auto cut = blob;
    cut.resize(cut.size() / 2);
    CHECK_THROWS_WITH(sd::load_counters(cut, "local_sgd", back),
                      Contains("hitch::sync::local_sgd: saved state: truncated: 32 of 65 bytes"));
    std::vector<std::byte> empty;
    sd::save_counters(empty, "hard", {});
    CHECK_NOTHROW(sd::load_counters(empty, "hard", {}));

    const auto old = bytes_of(hitch_test::legacy::hsyn_v1, sizeof hitch_test::legacy::hsyn_v1);
    std::vector<std::uint64_t> from_old(3);
    sd::load_counters(old, "local_sgd", from_old);
    CHECK(from_old == values);
    CHECK_THROWS_AS(sd::load_counters(std::span(old).first(old.size() - 1), "local_sgd", from_old),
                    hitch::corrupt_message_error);
}
