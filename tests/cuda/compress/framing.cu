// The GPU framing against the host's: payload CRC32C of device bytes, messages sealed on the GPU, and the decode-side
// checks of open() on damaged messages (the same corrupt_message_error texts as compress::wire::open). Skips (exit
// 77) without a GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "hitch/compress/wire.hpp"
#include "hitch/core/crc32c.hpp"
#include "hitch/cuda/compress/detail/wire.cuh"

namespace cc = hitch::cuda::compress;
namespace wire = hitch::compress::wire;

namespace {

std::vector<std::byte> random_bytes(std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::byte> v(n);
    for (auto& b : v) b = static_cast<std::byte>(rng() & 0xffu);
    return v;
}

std::string open_text(const std::vector<std::byte>& m, const wire::expect& e) {
    try {
        (void)wire::open(m, e);
    } catch (const hitch::corrupt_message_error& x) {
        return x.what();
    }
    return {};
}

std::string device_open_text(hitch::cuda::device& dev, const std::vector<std::byte>& m, const wire::expect& e) {
    cc::device_message d(dev);
    d.assign(m);
    try {
        (void)cc::open(dev, d.view(), e);
    } catch (const hitch::corrupt_message_error& x) {
        return x.what();
    }
    return {};
}

}  // namespace

TEST_CASE("payload_crc of device bytes equals the host's CRC32C", "[cuda][compress]") {
    hitch::cuda::device dev;
    cc::detail::device_scratch<std::uint32_t> out(dev, 1);
    for (std::size_t n : {0u, 1u, 31u, 32u, 33u, 16384u, 16385u, 100000u, (1u << 20) + 3u}) {
        const auto bytes = random_bytes(n + 3, static_cast<std::uint32_t>(n));
        cc::device_message d(dev);
        d.assign(bytes);
        for (std::size_t offset : {0u, 3u}) {  // aligned and unaligned starts
            cc::detail::payload_crc(dev, d.data() + offset, n, out.data());
            const std::uint32_t got = cc::detail::read_back(dev, out.data());
            INFO("n = " << n << " offset " << offset);
            CHECK(got == hitch::crc32c_update(0, std::span<const std::byte>(bytes).subspan(offset, n)));
        }
    }
}

TEST_CASE("a message sealed on the GPU opens on the host, and the host's on the GPU", "[cuda][compress]") {
    hitch::cuda::device dev;
    for (std::size_t payload : {0u, 1u, 31u, 33u, 16384u + 5u, (1u << 20) + 3u}) {
        const auto body = random_bytes(payload, static_cast<std::uint32_t>(payload) + 9);
        cc::device_message m(dev);
        cc::message_writer w(dev, m, 42, hitch::dtype::f32, 7, payload);
        if (payload != 0) dev.copy_from_host(w.payload(), body.data(), payload);
        CHECK(w.finish() == payload + 32);
        const std::vector<std::byte> host = m.to_host();
        const wire::message_view v = wire::open(host, {"test", 42});
        CHECK(v.head.count == 7);
        CHECK(std::vector<std::byte>(v.payload.begin(), v.payload.end()) == body);
        // The host's own writer gives the same bytes.
        std::vector<std::byte> reference;
        wire::writer hw(reference, 42, hitch::dtype::f32, 7, payload);
        std::copy(body.begin(), body.end(), hw.payload());
        hw.finish(payload);
        CHECK(host == reference);
        const cc::device_message_view dv = cc::open(dev, m.view(), {"test", 42});
        CHECK(dv.payload_bytes == payload);
        CHECK(dv.head.checksum == v.head.checksum);
    }
}

TEST_CASE("open() on the GPU reports a damaged message as wire::open does", "[cuda][compress]") {
    hitch::cuda::device dev;
    std::vector<std::byte> message;
    const auto body = random_bytes(1000, 1);
    wire::writer w(message, 9, hitch::dtype::bf16, 500, body.size());
    std::copy(body.begin(), body.end(), w.payload());
    w.finish(body.size());
    const wire::expect e{"hitch::compress::test", 9};
    CHECK(device_open_text(dev, message, e).empty());
    for (std::size_t at : {0u, 4u, 5u, 6u, 7u, 8u, 16u, 24u, 28u, 32u, 500u, 1031u}) {
        auto bad = message;
        bad[at] ^= std::byte{0x21};
        INFO("byte " << at);
        const std::string host = open_text(bad, e);
        CHECK_FALSE(host.empty());
        CHECK(device_open_text(dev, bad, e) == host);
    }
    for (std::size_t size : {0u, 1u, 31u, 32u, 500u, 1031u}) {
        auto bad = message;
        bad.resize(size);
        INFO("truncated to " << size);
        CHECK(device_open_text(dev, bad, e) == open_text(bad, e));
    }
    auto padded = message;
    padded.push_back(std::byte{0});
    CHECK(device_open_text(dev, padded, e) == open_text(padded, e));
    CHECK(device_open_text(dev, message, {"hitch::compress::other", 10}) ==
          open_text(message, {"hitch::compress::other", 10}));
}

TEST_CASE("payload_reader checks and reads a device payload as wire::reader does", "[cuda][compress]") {
    hitch::cuda::device dev;
    std::vector<std::byte> message;
    std::vector<std::byte> body(200);
    wire::store_le<std::uint32_t>(body.data(), 0xabcdef01u);
    wire::store_le<std::uint64_t>(body.data() + 4, 123456u);
    wire::store_le<std::uint64_t>(body.data() + 100, 77u);
    wire::writer w(message, 9, hitch::dtype::f32, 1, body.size());
    std::copy(body.begin(), body.end(), w.payload());
    w.finish(body.size());
    cc::device_message d(dev);
    d.assign(message);
    const cc::device_message_view v = cc::open(dev, d.view(), {"who", 9});
    cc::payload_reader r(dev, v, "who");
    CHECK(r.get<std::uint32_t>("a") == 0xabcdef01u);
    CHECK(r.count("b", 1u << 20) == 123456u);
    (void)r.take(88, "gap");
    CHECK(r.get<std::uint64_t>("far") == 77u);  // past the prefetched bytes
    std::string text;
    try {
        (void)r.take(1000, "codes");
    } catch (const hitch::corrupt_message_error& x) {
        text = x.what();
    }
    wire::reader hr(std::span<const std::byte>(body), "who");
    (void)hr.take(108, "all");
    std::string host_text;
    try {
        (void)hr.take(1000, "codes");
    } catch (const hitch::corrupt_message_error& x) {
        host_text = x.what();
    }
    CHECK(text == host_text);
    CHECK_FALSE(text.empty());
}
