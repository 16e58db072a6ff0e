#pragma once
// A policy's saved position: the policy name and a few u64 counters, in the common frame of core/binary.hpp,
// checked on load.
//
//   frame "HSYN", version 2:  u32 n, n bytes (policy name) | u32 counter count | the counters, u64 each
//
// Version 1 ("HSYN", u32 name length, name, u32 count, counters in host order, no length or checksum) is still read.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hitch/core/binary.hpp"
#include "hitch/core/error.hpp"

namespace hitch::sync::detail {

inline constexpr std::string_view state_magic = "HSYN";
inline constexpr std::uint32_t state_version = 2;
inline constexpr std::uint32_t max_policy_name = 256;

inline void save_counters(std::vector<std::byte>& blob, std::string_view policy,
                          std::span<const std::uint64_t> values) {
    frame_writer f(blob, state_magic, state_version);
    f.payload().text(policy).put(static_cast<std::uint32_t>(values.size())).values(values);
    f.finish();
}

/// Reads what save_counters wrote for the same policy and number of values; throws otherwise.
inline void load_counters(std::span<const std::byte> blob, std::string_view policy, std::span<std::uint64_t> values) {
    const std::string who = hitch::detail::concat("hitch::sync::", policy, ": saved state");
    // Version 1 has the name length (never 0) where version 2 pads its magic with NULs.
    const bool version1 = blob.size() >= 8 && frame_magic_matches(blob.first(4), state_magic) &&
                          load_le<std::uint32_t>(blob.data() + 4) != 0;
    std::span<const std::byte> payload;
    if (version1) {
        payload = blob.subspan(4);
    } else {
        payload = open_frame(blob, {state_magic, 1, state_version, who, "hitch sync policy state"}).payload;
    }
    byte_reader r(payload, who, "corrupt");
    const std::string saved = r.text(max_policy_name, "the policy name");
    if (saved != policy)
        throw mismatch_error(
            hitch::detail::concat("hitch::sync::", policy, ": the saved state is of policy '", saved, "'"));
    const auto count = r.get<std::uint32_t>("the counter count");
    if (count != values.size())
        r.fail(hitch::detail::concat(count, " counters where policy '", policy, "' has ", values.size()));
    for (std::uint64_t& v : values) v = r.get<std::uint64_t>("a counter");
    r.expect_end();
}

}  // namespace hitch::sync::detail
