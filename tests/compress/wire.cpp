// The wire format: varints, every header check of wire::open(), and state blobs of both versions.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../core/legacy_formats.hpp"
#include "helpers.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/core/crc32c.hpp"

namespace wire = hitch::compress::wire;

namespace {

std::vector<std::byte> sample_message(std::size_t payload = 40) {
    std::vector<std::byte> m;
    wire::writer w(m, 200, hitch::dtype::f32, 10, payload);
    for (std::size_t i = 0; i < payload; ++i) w.payload()[i] = static_cast<std::byte>(i * 7 + 1);
    w.finish(payload);
    return m;
}

}  // namespace

TEST_CASE("varints: sizes, round trip, and malformed input", "[compress][wire]") {
    const std::vector<std::uint64_t> values = {0, 1, 127, 128, 300, 16383, 16384, (1ull << 35) + 5, ~0ull};
    std::vector<std::byte> buf(10 * values.size());
    std::byte* at = buf.data();
    for (auto v : values) {
        std::byte* next = wire::put_varint(at, v);
        CHECK(static_cast<std::size_t>(next - at) == wire::varint_size(v));
        at = next;
    }
    CHECK(wire::varint_size(0) == 1);
    CHECK(wire::varint_size(127) == 1);
    CHECK(wire::varint_size(128) == 2);
    CHECK(wire::varint_size(~0ull) == 10);
    wire::varint_reader r(buf.data(), at, "test");
    for (auto v : values) CHECK(r.next() == v);
    CHECK(r.done());

    // Unterminated: the continuation bit set on the last byte.
    std::vector<std::byte> open_end = {std::byte{0x80}, std::byte{0x80}};
    CHECK(hitch_test::throws_corrupt(
        [&] { (void)wire::varint_reader(open_end.data(), open_end.data() + 2, "t").next(); }, "truncated varint"));
    // Eleven bytes, or a tenth byte carrying more than the 64th bit.
    std::vector<std::byte> too_long(11, std::byte{0x80});
    too_long.back() = std::byte{0};
    CHECK(hitch_test::throws_corrupt(
        [&] { (void)wire::varint_reader(too_long.data(), too_long.data() + too_long.size(), "t").next(); }, "varint"));
    std::vector<std::byte> overflow(10, std::byte{0xff});
    overflow.back() = std::byte{0x02};
    CHECK(hitch_test::throws_corrupt(
        [&] { (void)wire::varint_reader(overflow.data(), overflow.data() + overflow.size(), "t").next(); },
        "overflows 64 bits"));
}

TEST_CASE("wire::open accepts a sealed message and reads its header back", "[compress][wire]") {
    const auto m = sample_message();
    REQUIRE(m.size() == wire::header_bytes + 40);
    const auto v = wire::open(m, {"test", 200});
    CHECK(v.head.codec == 200);
    CHECK(v.head.type == hitch::dtype::f32);
    CHECK(v.head.count == 10);
    CHECK(v.payload.size() == 40);
    CHECK(v.payload[3] == static_cast<std::byte>(22));
    CHECK(v.head.checksum == wire::checksum_of(m));
}

TEST_CASE("wire::open refuses every kind of inconsistency", "[compress][wire]") {
    const auto good = sample_message();
    auto refuses = [&](std::vector<std::byte> m, const std::string& fragment, wire::expect e = {"test", 200}) {
        return hitch_test::throws_corrupt([&] { (void)wire::open(m, e); }, fragment);
    };
    CHECK(refuses({}, "shorter than the 32-byte header"));
    CHECK(refuses(std::vector<std::byte>(good.begin(), good.begin() + 31), "shorter than"));
    {  // truncated payload
        auto m = good;
        m.resize(m.size() - 1);
        CHECK(refuses(m, "truncated or padded"));
    }
    {  // padded
        auto m = good;
        m.push_back(std::byte{0});
        CHECK(refuses(m, "truncated or padded"));
    }
    {  // foreign bytes
        auto m = good;
        std::memcpy(m.data(), "PK\x03\x04", 4);
        CHECK(refuses(m, "not a hitch message"));
    }
    {  // a state blob is not a message
        auto m = good;
        wire::store_le(m.data(), wire::state_magic);
        CHECK(refuses(m, "magic \"HCST\""));
    }
    auto resealed = [&](std::size_t at, std::uint8_t value) {
        auto m = good;
        m[at] = static_cast<std::byte>(value);
        hitch_test::reseal(m);
        return m;
    };
    CHECK(refuses(resealed(4, 2), "format version 2"));
    CHECK(refuses(resealed(5, 9), "codec id 9 is not 200"));
    CHECK(refuses(resealed(6, static_cast<std::uint8_t>(hitch::dtype::i32)), "not a floating type"));
    CHECK(refuses(resealed(6, 99), "not a floating type"));
    CHECK(refuses(resealed(7, 1), "flags 1"));
    CHECK(refuses(resealed(25, 1), "reserved"));
    {  // payload length field lies, checksum fixed
        auto m = good;
        wire::store_le<std::uint64_t>(m.data() + 16, 39);
        hitch_test::reseal(m);
        CHECK(refuses(m, "announces 39 payload bytes"));
    }
    // Any single flipped bit anywhere is caught (by the checksum or a field check).
    for (std::size_t byte = 0; byte < good.size(); ++byte)
        for (int bit = 0; bit < 8; ++bit) {
            auto m = good;
            m[byte] ^= static_cast<std::byte>(1 << bit);
            CHECK_THROWS_AS(wire::open(m, {"test", 200}), hitch::corrupt_message_error);
        }
    {  // the checksum itself
        auto m = good;
        m[wire::checksum_offset] ^= std::byte{0x10};
        CHECK(refuses(m, "checksum mismatch"));
    }
}

TEST_CASE("wire::reader and state blobs check every bound", "[compress][wire]") {
    std::vector<std::byte> payload(12);
    wire::store_le<std::uint64_t>(payload.data(), 3);
    wire::store_le<float>(payload.data() + 8, 1.5f);
    wire::reader r(payload, "test");
    CHECK(r.count("n", 10) == 3);
    CHECK(r.get<float>("x") == 1.5f);
    r.expect_end();
    CHECK(hitch_test::throws_corrupt([&] { (void)r.get<std::uint8_t>("tail"); }, "truncated: tail needs 1 bytes"));
    wire::reader r2(payload, "test");
    CHECK(hitch_test::throws_corrupt([&] { (void)r2.count("n", 2); }, "n 3 exceeds 2"));
    wire::reader r3(payload, "test");
    CHECK(hitch_test::throws_corrupt([&] { (void)r3.take(~0ull, "huge"); }, "huge needs"));
    wire::reader r4(payload, "test");
    (void)r4.get<std::uint32_t>("a");
    CHECK(hitch_test::throws_corrupt([&] { r4.expect_end(); }, "8 unexpected bytes"));

    std::vector<std::byte> blob;
    wire::seal_state(blob, 7, 100, payload);
    CHECK(wire::open_state(blob, 7, 100, "test").payload.size() == 12);
    CHECK(hitch_test::throws_corrupt([&] { (void)wire::open_state(blob, 7, 99, "test"); },
                                     "state is for a bucket of 100 elements, not 99"));
    CHECK(hitch_test::throws_corrupt([&] { (void)wire::open_state(blob, 8, 100, "test"); }, "codec id 7 is not 8"));
    CHECK(hitch_test::throws_corrupt([&] { (void)wire::open(blob, {"test", 7}); }, "not a hitch message"));
}

TEST_CASE("a message sealed from a payload CRC computed apart equals one sealed the ordinary way", "[compress][wire]") {
    std::mt19937 rng(11);
    std::vector<std::byte> data(1000);
    for (auto& b : data) b = static_cast<std::byte>(rng());
    std::vector<std::byte> m1, m2;
    for (auto* m : {&m1, &m2}) {
        hitch::compress::wire::writer w(*m, 200, hitch::dtype::f32, 7, 1000);
        std::memcpy(w.payload(), data.data(), 1000);
        if (m == &m1)
            w.finish(1000);
        else
            w.finish_with_payload_crc(1000, hitch::crc32c_update(0, data));
    }
    CHECK(m1 == m2);
}

TEST_CASE("state blobs: version 2 frame, and version 1 blobs are still read", "[compress][wire]") {
    std::vector<std::byte> body(12);
    wire::store_le<std::uint64_t>(body.data(), 3);
    std::vector<std::byte> blob;
    wire::seal_state(blob, 7, 100, body, 1);
    REQUIRE(blob.size() == wire::state_payload_offset + 12);
    CHECK(std::memcmp(blob.data(), "HCST\0\0\0\0", 8) == 0);
    CHECK(wire::load_le<std::uint32_t>(blob.data() + 8) == 2);
    CHECK(wire::load_le<std::uint64_t>(blob.data() + 12) == blob.size());
    const auto m = wire::open_state(blob, 7, 100, "test", 1);
    CHECK(m.head.codec == 7);
    CHECK(m.head.flags == 1);
    CHECK(m.payload.size() == 12);
    CHECK(m.payload.data() == blob.data() + wire::state_payload_offset);
    auto cut = blob;
    cut.resize(30);
    CHECK(hitch_test::throws_corrupt([&] { (void)wire::open_state(cut, 7, 100, "test", 1); },
                                     "test: truncated: 30 of 48 bytes"));
    auto flipped = blob;
    flipped[40] ^= std::byte{1};
    CHECK(
        hitch_test::throws_corrupt([&] { (void)wire::open_state(flipped, 7, 100, "test", 1); }, "corrupt (checksum)"));
    {  // with the exact figures: the checksum stored, the bytes read and the checksum they give
        std::ostringstream want;
        want << "test: corrupt (checksum): the header says 0x" << std::hex
             << hitch::load_le<std::uint32_t>(flipped.data() + hitch::frame_checksum_offset) << ", the " << std::dec
             << flipped.size() << " bytes give 0x" << std::hex << hitch::detail::frame_checksum(flipped);
        CHECK(hitch_test::throws_corrupt([&] { (void)wire::open_state(flipped, 7, 100, "test", 1); }, want.str()));
    }
    auto newer = blob;
    wire::store_le<std::uint32_t>(newer.data() + 8, 3);
    hitch_test::reseal_frame(newer);
    CHECK(hitch_test::throws_corrupt([&] { (void)wire::open_state(newer, 7, 100, "test", 1); },
                                     "written by a newer hitch (format 3, this build reads 1-2)"));

    // Version 1: the message header with magic "HCST", written by the first release.
    const std::vector<std::byte> old(reinterpret_cast<const std::byte*>(hitch_test::legacy::hcst_v1_counters),
                                     reinterpret_cast<const std::byte*>(hitch_test::legacy::hcst_v1_counters) +
                                         sizeof hitch_test::legacy::hcst_v1_counters);
    const auto v1 = wire::open_state(old, hitch::compress::codec_ids::qsgd, 5, "test");
    wire::reader r(v1.payload, "test");
    CHECK(r.get<std::uint64_t>("step") == 3);
    CHECK(r.get<std::uint64_t>("stream") == 9);
    r.expect_end();
    CHECK(hitch_test::throws_corrupt([&] { (void)wire::open_state(old, hitch::compress::codec_ids::qsgd, 6, "test"); },
                                     "bucket of 5 elements, not 6"));
}
