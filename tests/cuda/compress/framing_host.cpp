// The GPU framing's math on the host (no GPU needed): the CRC32C tables, shifts and tile geometry the kernels use
// (cuda/compress/detail/crc32c.hpp) against core/crc32c.hpp, and the header sealing (detail/wire.hpp) against the
// host codecs' messages: per-tile CRCs joined as the GPU joins them give every host message's checksum.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "hitch/compress/bf16.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/terngrad.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/core/crc32c.hpp"
#include "hitch/cuda/compress/detail/crc32c.hpp"
#include "hitch/cuda/compress/detail/wire.hpp"

namespace gpu = hitch::cuda::compress::detail;
namespace wire = hitch::compress::wire;

namespace {

std::vector<unsigned char> random_bytes(std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<unsigned char> v(n);
    for (auto& b : v) b = static_cast<unsigned char>(rng() & 0xffu);
    return v;
}

std::uint32_t host_raw(const unsigned char* p, std::size_t n) {
    return hitch::crc32c_update(0, std::span<const std::byte>(reinterpret_cast<const std::byte*>(p), n));
}

std::vector<float> gradients(std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1e-2f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

const std::vector<std::size_t> edge_sizes = {0, 1, 31, 32, 33, (std::size_t{1} << 20) + 3};

}  // namespace

TEST_CASE("the GPU's CRC32C tables and powers are core/crc32c.hpp's", "[cuda][compress][host]") {
    static constexpr gpu::crc32c_table_set tables{};
    for (std::size_t k = 0; k < 8; ++k)
        for (std::size_t b = 0; b < 256; ++b) REQUIRE(tables.t[k][b] == hitch::detail::crc32c_table.t[k][b]);
    static constexpr gpu::crc32c_power_set powers{};
    for (std::size_t k = 0; k < 64; ++k) REQUIRE(powers.x2k[k] == hitch::detail::crc32c_power_table.x2k[k]);
    static constexpr gpu::crc32c_slice_shift_set shifts{};
    for (unsigned t = 0; t < gpu::crc_tile_threads; ++t)
        REQUIRE(shifts.x[t] == gpu::crc32c_xpow8(gpu::crc_slice_bytes * (gpu::crc_tile_threads - 1 - t), powers.x2k));
}

TEST_CASE("the GPU's byte, word and shift updates equal the host's CRC32C", "[cuda][compress][host]") {
    static constexpr gpu::crc32c_table_set tables{};
    static constexpr gpu::crc32c_power_set powers{};
    const auto bytes = random_bytes(4096 + 17, 7);
    for (std::size_t offset : {0u, 1u, 3u, 8u}) {
        for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 65u, 1000u, 4096u}) {
            const unsigned char* p = bytes.data() + offset;
            REQUIRE(gpu::crc32c_update(0x12345678u, p, n, tables.t) ==
                    hitch::crc32c_update(0x12345678u,
                                         std::span<const std::byte>(reinterpret_cast<const std::byte*>(p), n)));
        }
    }
    std::uint32_t w[16];
    for (std::size_t k = 0; k < 16; ++k)
        w[k] = wire::load_le<std::uint32_t>(reinterpret_cast<const std::byte*>(bytes.data()) + 4 * k);
    CHECK(gpu::crc32c_update_words(0, w, 16, tables.t) == host_raw(bytes.data(), 64));
    std::mt19937_64 rng(3);
    for (int i = 0; i < 200; ++i) {
        const auto state = static_cast<std::uint32_t>(rng());
        const std::uint64_t n = i < 10 ? static_cast<std::uint64_t>(i) : rng() >> (rng() % 64);
        REQUIRE(gpu::crc32c_shift(state, n, powers.x2k) == hitch::crc32c_shift_bytes(state, n));
    }
    CHECK(gpu::crc32c_multiply(gpu::crc32c_one, 0xdeadbeefu) == 0xdeadbeefu);
}

TEST_CASE("joining slices and tiles as the kernels do gives the payload's CRC32C", "[cuda][compress][host]") {
    std::vector<std::size_t> sizes = edge_sizes;
    for (std::size_t n : {63u, 64u, 65u, 16383u, 16384u, 16385u, 3u * 16384u, 3u * 16384u + 100u}) sizes.push_back(n);
    for (std::size_t n : sizes) {
        const auto bytes = random_bytes(n, static_cast<std::uint32_t>(n));
        INFO("n = " << n);
        CHECK(gpu::crc32c_tiles(bytes.data(), n) == host_raw(bytes.data(), n));
        CHECK(gpu::crc_tiles(n) == (n + gpu::crc_tile_bytes - 1) / gpu::crc_tile_bytes);
    }
    // Every byte belongs to exactly one slice.
    const std::size_t n = 2 * gpu::crc_tile_bytes + 77;
    std::size_t covered = 0;
    for (std::size_t tile = 0; tile < gpu::crc_tiles(n); ++tile)
        for (unsigned t = 0; t < gpu::crc_tile_threads; ++t) {
            const gpu::crc_slice s = gpu::crc_slice_of(n, tile, t);
            REQUIRE(s.begin == std::min(n, covered));
            covered = std::max(covered, s.end);
        }
    CHECK(covered == n);
}

namespace {

/// The host message's header as the GPU seals it: plan_header from the decoded header, the payload's raw state from
/// the kernels' tile geometry.
void check_sealed_like_host(const std::vector<std::byte>& message) {
    const wire::header h = wire::read_header(message.data());
    const auto* payload = reinterpret_cast<const unsigned char*>(message.data() + wire::header_bytes);
    const std::uint32_t raw = gpu::crc32c_tiles(payload, message.size() - wire::header_bytes);
    const auto head = gpu::sealed_header(gpu::plan_header(h), raw);
    REQUIRE(std::vector<std::byte>(head.begin(), head.end()) ==
            std::vector<std::byte>(message.begin(), message.begin() + wire::header_bytes));
    CHECK(gpu::message_checksum(message, message.size() - wire::header_bytes, raw) == wire::checksum_of(message));
}

template <class Codec>
void seal_all_sizes(const Codec& codec) {
    for (std::size_t n : edge_sizes) {
        INFO(Codec::name << " n = " << n);
        const auto g = gradients(n, static_cast<std::uint32_t>(n) + 1);
        auto s = codec.make_state(n);
        std::vector<std::byte> message;
        codec.encode(hitch::tensor_view<const float>(g.data(), n), s, message);
        check_sealed_like_host(message);
    }
}

}  // namespace

TEST_CASE("a header sealed from per-tile CRCs equals every host codec's header", "[cuda][compress][host]") {
    seal_all_sizes(hitch::compress::none{});
    seal_all_sizes(hitch::compress::fp16{});
    seal_all_sizes(hitch::compress::bf16{});
    seal_all_sizes(hitch::compress::onebit{});
    seal_all_sizes(hitch::compress::qsgd{});
    seal_all_sizes(hitch::compress::terngrad{});
    hitch::compress::qsgd_options elias;
    elias.coding = hitch::compress::qsgd_coding::elias_gamma;
    elias.levels = 1;
    seal_all_sizes(hitch::compress::qsgd(elias));
}

TEST_CASE("wire::check_header and check_checksum give open()'s texts", "[cuda][compress][host]") {
    const auto g = gradients(100, 5);
    hitch::compress::fp16 codec;
    auto s = codec.make_state(100);
    std::vector<std::byte> message;
    codec.encode(hitch::tensor_view<const float>(g.data(), g.size()), s, message);
    const wire::expect e{hitch::compress::fp16::who, hitch::compress::fp16::codec_id};
    const auto text_of_open = [&](const std::vector<std::byte>& m) {
        try {
            (void)wire::open(m, e);
        } catch (const hitch::corrupt_message_error& x) {
            return std::string(x.what());
        }
        return std::string();
    };
    const auto text_of_split = [&](const std::vector<std::byte>& m) {
        try {
            const std::size_t got = std::min(m.size(), wire::header_bytes);
            const wire::header h = wire::check_header(std::span<const std::byte>(m.data(), got), m.size(), e);
            const std::uint32_t raw =
                hitch::crc32c_update(0, std::span<const std::byte>(m).subspan(wire::header_bytes));
            wire::check_checksum(h, gpu::message_checksum(m, m.size() - wire::header_bytes, raw), e.who);
        } catch (const hitch::corrupt_message_error& x) {
            return std::string(x.what());
        }
        return std::string();
    };
    CHECK(text_of_open(message).empty());
    CHECK(text_of_split(message).empty());
    for (std::size_t at : {0u, 4u, 5u, 6u, 7u, 8u, 16u, 24u, 28u, 40u, 231u}) {
        auto bad = message;
        bad[at] ^= std::byte{0x40};
        INFO("byte " << at);
        CHECK_FALSE(text_of_open(bad).empty());
        CHECK(text_of_split(bad) == text_of_open(bad));
    }
    for (std::size_t size : {0u, 1u, 31u, 32u, 100u}) {
        auto bad = message;
        bad.resize(size);
        CHECK(text_of_split(bad) == text_of_open(bad));
    }
}
