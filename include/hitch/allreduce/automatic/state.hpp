#pragma once
// automatic's decisions as a blob for checkpoints: the versioned, checksummed bytes save_state() writes and
// load_state() reads, framed as docs/design.md's binary format family (magic, version, total length, CRC32C of
// the whole frame with the checksum field zero) until core/binary.hpp provides it:
//
//   offset size
//        0    8  magic "HAUT" and four NULs
//        8    4  version (1), little-endian like every field
//       12    8  length: bytes of the whole blob
//       20    4  crc32c
//       24    4  flags: 1 constants present, 2 profile present
//       28    .  constants: alpha, beta, gamma, native alpha, native beta (5 x f64), when present
//            .  profile: measured (i32), stopped_by_budget (i32), probe bytes (8 x f64), seconds (7 x 8 x f64)

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "hitch/allreduce/automatic/profile.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/core/crc32c.hpp"
#include "hitch/core/error.hpp"

namespace hitch::allreduce::detail {

/// The decoded content of a state blob.
struct automatic_state {
    std::optional<cost_constants> constants;
    std::optional<automatic_profile> profile;
};

inline constexpr std::array<char, 8> automatic_state_magic{'H', 'A', 'U', 'T', '\0', '\0', '\0', '\0'};
inline constexpr std::uint32_t automatic_state_version = 1;
inline constexpr std::size_t automatic_state_header_bytes = 24;

static_assert(std::endian::native == std::endian::little,
              "automatic's state blob is written in the host's byte order, which must be little-endian");

namespace state_bytes {

template <class T>
void put(std::vector<std::byte>& out, const T& v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
}
template <class T>
[[nodiscard]] T get(std::span<const std::byte> in, std::size_t at) {
    T v;
    std::memcpy(&v, in.data() + at, sizeof(T));
    return v;
}
[[nodiscard]] inline std::string hex(std::uint64_t v) {
    std::ostringstream s;
    s << "0x" << std::hex << v;
    return s.str();
}
[[nodiscard]] inline std::uint32_t checksum(std::span<const std::byte> blob) {
    std::vector<std::byte> copy(blob.begin(), blob.end());
    std::fill(copy.begin() + 20, copy.begin() + 24, std::byte{0});
    return crc32c_of(copy);
}

}  // namespace state_bytes

/// Replaces `out` with the blob of `s`.
inline void encode_automatic_state(const automatic_state& s, std::vector<std::byte>& out) {
    using state_bytes::put;
    out.clear();
    out.insert(out.end(), reinterpret_cast<const std::byte*>(automatic_state_magic.data()),
               reinterpret_cast<const std::byte*>(automatic_state_magic.data()) + automatic_state_magic.size());
    put(out, automatic_state_version);
    put(out, std::uint64_t{0});  // length, set below
    put(out, std::uint32_t{0});  // checksum, set below
    put(out, static_cast<std::uint32_t>((s.constants ? 1u : 0u) | (s.profile ? 2u : 0u)));
    if (s.constants) {
        const cost_constants& k = *s.constants;
        for (double v : {k.alpha_s, k.beta_s_per_byte, k.gamma_s_per_byte, k.native_alpha_s, k.native_beta_s_per_byte})
            put(out, v);
    }
    if (s.profile) {
        const automatic_profile& p = *s.profile;
        put(out, p.measured);
        put(out, p.stopped_by_budget);
        for (double b : p.bytes) put(out, b);
        for (const auto& row : p.seconds)
            for (double v : row) put(out, v);
    }
    const auto length = static_cast<std::uint64_t>(out.size());
    std::memcpy(out.data() + 12, &length, sizeof(length));
    const std::uint32_t crc = state_bytes::checksum(out);
    std::memcpy(out.data() + 20, &crc, sizeof(crc));
}

/// The state in `blob`; corrupt_message_error says what is wrong with it (truncated, damaged, foreign, newer).
[[nodiscard]] inline automatic_state decode_automatic_state(std::span<const std::byte> blob) {
    using state_bytes::get;
    const auto fail = [](const std::string& why) -> void {
        throw corrupt_message_error("hitch::allreduce::automatic::load_state: " + why);
    };
    const std::size_t size = blob.size();
    if (size < automatic_state_header_bytes)
        fail(concat("truncated: ", size, " of at least ", automatic_state_header_bytes, " bytes"));
    if (std::memcmp(blob.data(), automatic_state_magic.data(), automatic_state_magic.size()) != 0)
        fail(concat("not an automatic state (magic ", state_bytes::hex(get<std::uint64_t>(blob, 0)), ")"));
    const auto version = get<std::uint32_t>(blob, 8);
    if (version == 0 || version > automatic_state_version)
        fail(concat("written by a newer hitch (format ", version, ", this build reads 1-", automatic_state_version,
                    ")"));
    const auto length = get<std::uint64_t>(blob, 12);
    if (size < length) fail(concat("truncated: ", size, " of ", length, " bytes"));
    if (size > length) fail(concat(size, " bytes, but the header says ", length));
    if (get<std::uint32_t>(blob, 20) != state_bytes::checksum(blob)) fail("damaged: checksum mismatch");

    automatic_state s;
    const auto flags = get<std::uint32_t>(blob, 24);
    const std::size_t constants_bytes = 5 * sizeof(double);
    const std::size_t profile_bytes =
        2 * sizeof(std::int32_t) + sizeof(double) * automatic_profile::probes * (1 + automatic_profile::candidates);
    const std::size_t expected = automatic_state_header_bytes + 4 + ((flags & 1u) != 0 ? constants_bytes : 0) +
                                 ((flags & 2u) != 0 ? profile_bytes : 0);
    if ((flags & ~3u) != 0 || expected != size)
        fail(concat("damaged: flags ", state_bytes::hex(flags), " need ", expected, " bytes, the blob has ", size));
    std::size_t at = automatic_state_header_bytes + 4;
    const auto next_double = [&] {
        const auto v = get<double>(blob, at);
        at += sizeof(double);
        return v;
    };
    if ((flags & 1u) != 0) {
        cost_constants k;
        k.alpha_s = next_double();
        k.beta_s_per_byte = next_double();
        k.gamma_s_per_byte = next_double();
        k.native_alpha_s = next_double();
        k.native_beta_s_per_byte = next_double();
        s.constants = k;
    }
    if ((flags & 2u) != 0) {
        automatic_profile p;
        p.measured = get<std::int32_t>(blob, at);
        p.stopped_by_budget = get<std::int32_t>(blob, at + 4);
        at += 8;
        for (double& b : p.bytes) b = next_double();
        for (auto& row : p.seconds)
            for (double& v : row) v = next_double();
        if (p.measured < 0 || p.measured > automatic_profile::probes)
            fail(concat("damaged: ", p.measured, " probes measured, at most ", automatic_profile::probes));
        s.profile = p;
    }
    return s;
}

}  // namespace hitch::allreduce::detail
