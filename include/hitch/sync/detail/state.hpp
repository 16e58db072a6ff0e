#pragma once
// A policy's saved position: the policy name, a few u64 counters and, for a policy that keeps them, float buffers
// (block momentum's global model and its momentum), in the common frame of core/binary.hpp, checked on load.
//
//   frame "HSYN", version 2:  u32 n, n bytes (policy name) | u32 counter count | the counters, u64 each
//   frame "HSYN", version 3:  version 2's fields | u32 buffer count | per buffer: u64 n, n f32
//
// save_counters writes version 2, so a policy without buffers writes what it always did (an older hitch reads it);
// save_counters_and_buffers writes version 3. Version 1 ("HSYN", u32 name length, name, u32 count, counters in
// host order, no length or checksum) is still read.

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
inline constexpr std::uint32_t state_version_with_buffers = 3;
inline constexpr std::uint32_t max_policy_name = 256;
inline constexpr std::uint32_t max_state_buffers = 64;

inline void save_counters(std::vector<std::byte>& blob, std::string_view policy,
                          std::span<const std::uint64_t> values) {
    frame_writer f(blob, state_magic, state_version);
    f.payload().text(policy).put(static_cast<std::uint32_t>(values.size())).values(values);
    f.finish();
}

inline void save_counters_and_buffers(std::vector<std::byte>& blob, std::string_view policy,
                                      std::span<const std::uint64_t> values,
                                      std::span<const std::span<const float>> buffers) {
    frame_writer f(blob, state_magic, state_version_with_buffers);
    f.payload().text(policy).put(static_cast<std::uint32_t>(values.size())).values(values);
    f.payload().put(static_cast<std::uint32_t>(buffers.size()));
    for (std::span<const float> b : buffers) f.payload().put(static_cast<std::uint64_t>(b.size())).values(b);
    f.finish();
}

/// Reads what either save function wrote for the same policy and number of values and returns the buffers (none
/// for versions 1 and 2); throws otherwise.
[[nodiscard]] inline std::vector<std::vector<float>> load_counters_and_buffers(std::span<const std::byte> blob,
                                                                               std::string_view policy,
                                                                               std::span<std::uint64_t> values) {
    const std::string who = hitch::detail::concat("hitch::sync::", policy, ": saved state");
    // Version 1 has the name length (never 0) where later versions pad their magic with NULs.
    const bool version1 = blob.size() >= 8 && frame_magic_matches(blob.first(4), state_magic) &&
                          load_le<std::uint32_t>(blob.data() + 4) != 0;
    std::span<const std::byte> payload;
    std::uint32_t version = 1;
    if (version1) {
        payload = blob.subspan(4);
    } else {
        const frame_view frame =
            open_frame(blob, {state_magic, 1, state_version_with_buffers, who, "hitch sync policy state"});
        payload = frame.payload;
        version = frame.version;
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
    std::vector<std::vector<float>> buffers;
    if (version >= state_version_with_buffers) {
        const auto n = r.get<std::uint32_t>("the buffer count");
        if (n > max_state_buffers)
            r.fail(hitch::detail::concat("the buffer count ", n, " exceeds ", max_state_buffers));
        buffers.resize(n);
        for (std::vector<float>& b : buffers) {
            const std::uint64_t size = r.count("a buffer's length", r.remaining() / sizeof(float));
            r.values(b, size, "a buffer");
        }
    }
    r.expect_end();
    return buffers;
}

/// Reads the state of a policy that keeps no buffers.
inline void load_counters(std::span<const std::byte> blob, std::string_view policy, std::span<std::uint64_t> values) {
    if (const auto buffers = load_counters_and_buffers(blob, policy, values); !buffers.empty())
        throw mismatch_error(hitch::detail::concat("hitch::sync::", policy, ": the saved state has ", buffers.size(),
                                                   " buffers; this policy keeps none"));
}

}  // namespace hitch::sync::detail
