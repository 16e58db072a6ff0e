#pragma once
// A policy's saved position: "HSYN", the policy name, and a few u64 counters, checked on load.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/core/error.hpp"

namespace hitch::sync::detail {

inline void save_counters(std::vector<std::byte>& blob, std::string_view policy, std::span<const std::uint64_t> values) {
    blob.clear();
    const auto put = [&](const void* p, std::size_t n) {
        blob.insert(blob.end(), static_cast<const std::byte*>(p), static_cast<const std::byte*>(p) + n);
    };
    put("HSYN", 4);
    const auto name_len = static_cast<std::uint32_t>(policy.size());
    put(&name_len, 4);
    put(policy.data(), policy.size());
    const auto count = static_cast<std::uint32_t>(values.size());
    put(&count, 4);
    put(values.data(), values.size_bytes());
}

/// Reads what save_counters wrote for the same policy and number of values; throws otherwise.
inline void load_counters(std::span<const std::byte> blob, std::string_view policy, std::span<std::uint64_t> values) {
    const auto fail = [&](std::string_view what) {
        throw corrupt_message_error(hitch::detail::concat("hitch::sync::", policy, ": saved state ", what));
    };
    std::size_t at = 0;
    const auto take = [&](void* out, std::size_t n) {
        if (blob.size() - at < n) fail("is truncated");
        std::memcpy(out, blob.data() + at, n);
        at += n;
    };
    char magic[4];
    take(magic, 4);
    if (std::memcmp(magic, "HSYN", 4) != 0) fail("has a bad magic");
    std::uint32_t name_len = 0;
    take(&name_len, 4);
    if (name_len > 256 || blob.size() - at < name_len) fail("has a bad policy name");
    const std::string_view saved(reinterpret_cast<const char*>(blob.data() + at), name_len);
    at += name_len;
    if (saved != policy)
        throw mismatch_error(hitch::detail::concat("hitch::sync::", policy, ": the saved state is of policy '", saved, "'"));
    std::uint32_t count = 0;
    take(&count, 4);
    if (count != values.size()) fail("has the wrong number of counters");
    take(values.data(), values.size_bytes());
    if (at != blob.size()) fail("has trailing bytes");
}

}  // namespace hitch::sync::detail
