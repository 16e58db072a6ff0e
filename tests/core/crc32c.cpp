// CRC32C against its standard check value and the bitwise definition, on both code paths, and the linearity
// that lets pieces checksummed apart combine into the whole.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "hitch/core/crc32c.hpp"

namespace {

std::vector<std::byte> bytes_of(const std::string& s) {
    std::vector<std::byte> b(s.size());
    std::memcpy(b.data(), s.data(), s.size());
    return b;
}

// The CRC's definition, one bit at a time: the reference the table and hardware paths must equal.
std::uint32_t crc32c_bitwise(std::span<const std::byte> data) {
    std::uint32_t c = 0xFFFFFFFFu;
    for (std::byte b : data) {
        c ^= static_cast<std::uint32_t>(b);
        for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
    }
    return ~c;
}

}  // namespace

TEST_CASE("crc32c: standard check value, bitwise definition, streaming, and both code paths", "[core][crc32c]") {
    CHECK(hitch::crc32c_of(bytes_of("123456789")) == 0xE3069283u);
    CHECK(hitch::crc32c_of({}) == 0u);
    std::mt19937 rng(7);
    // Lengths around the three-stream block (3 x 1024 bytes) and the 8-byte steps.
    for (std::size_t n :
         {1u, 7u, 8u, 9u, 63u, 3071u, 3072u, 3073u, 4095u, 12287u, 12288u, 12289u, 24576u, 40000u, 100003u}) {
        std::vector<std::byte> data(n);
        for (auto& b : data) b = static_cast<std::byte>(rng());
        const std::uint32_t want = crc32c_bitwise(data);
        CHECK(hitch::crc32c_of(data) == want);
        CHECK(~hitch::detail::crc32c_update_portable(0xFFFFFFFFu, data.data(), data.size()) == want);
        hitch::detail::crc32c_hardware_enabled = false;
        CHECK(hitch::crc32c_of(data) == want);
        hitch::detail::crc32c_hardware_enabled = true;
        // Split anywhere, streaming gives the same value.
        const std::size_t cut = n / 3;
        CHECK(hitch::crc32c().update(std::span(data).first(cut)).update(std::span(data).subspan(cut)).value() == want);
    }
}

TEST_CASE("crc32c: pieces checksummed apart combine into the whole", "[core][crc32c]") {
    std::mt19937 rng(11);
    std::vector<std::byte> data(50000);
    for (auto& b : data) b = static_cast<std::byte>(rng());
    const std::uint32_t whole = hitch::crc32c_update(0xFFFFFFFFu, data);
    for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{17}, std::size_t{12288}, std::size_t{49999}}) {
        const auto a = std::span<const std::byte>(data).first(cut), b = std::span<const std::byte>(data).subspan(cut);
        CHECK((hitch::crc32c_shift_bytes(hitch::crc32c_update(0xFFFFFFFFu, a), b.size()) ^
               hitch::crc32c_update(0, b)) == whole);
    }
    // Above the parallel threshold (8 MiB) the chunked computation gives the same value.
    std::vector<std::byte> big(std::size_t{9} << 20);
    for (std::size_t i = 0; i < big.size(); i += 97) big[i] = static_cast<std::byte>(rng());
    CHECK(hitch::crc32c_raw_parallel(big) == hitch::crc32c_update(0, big));
}
