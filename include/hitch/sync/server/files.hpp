#pragma once
// Where a server keeps its shard's checkpoint ("<prefix>.shard<s>"; a worker's own state is in data_parallel's
// "<prefix>.rank<r>-of-<p>"), written whole to a temporary file and renamed over the old one, so a crash leaves
// the previous checkpoint intact.

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hitch/core/error.hpp"

namespace hitch::sync::detail {

[[nodiscard]] inline std::filesystem::path shard_file(std::string_view prefix, std::size_t shard) {
    return hitch::detail::concat(prefix, ".shard", shard);
}

inline void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes) {
    const std::filesystem::path tmp = path.string() + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        out.flush();
        if (!out) throw error(hitch::detail::concat("hitch::sync: cannot write ", tmp.string()));
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec)
        throw error(hitch::detail::concat("hitch::sync: cannot rename ", tmp.string(), " to ", path.string(), ": ",
                                          ec.message()));
}

[[nodiscard]] inline std::vector<std::byte> read_file(const std::filesystem::path& path, std::string_view who) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw error(hitch::detail::concat(who, ": cannot open ", path.string()));
    std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> bytes(chars.size());
    for (std::size_t i = 0; i < chars.size(); ++i) bytes[i] = static_cast<std::byte>(chars[i]);
    return bytes;
}

}  // namespace hitch::sync::detail
