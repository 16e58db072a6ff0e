#pragma once
// Checkpoint files: named sections of bytes, written atomically. Version 2 is the common frame of core/binary.hpp
// (magic "HITCHCKP", version, length, one CRC32C) around:
//
//   u32 section count
//   per section: u32 name length, name, u64 payload length, payload
//
// all little-endian. Version 1 (magic, u32 version, u32 byte-order mark, u32 section count, per section u32 name
// length, name, u64 payload length, u32 CRC32C of the payload, payload; then a u32 CRC32C of every byte before
// it; no length) is still read.
//
// checkpoint_writer::commit writes "<path>.tmp-<pid>-<n>", flushes it to disk, then renames it over <path> and
// syncs the directory, so a crash during a save leaves the previous checkpoint intact (and the next save of that
// path removes the temporary file such a crash left). checkpoint_reader reads the
// whole file and checks everything (magic, version, byte order, lengths, every checksum) before any section is
// handed out: a corrupt or truncated file is corrupt_message_error naming the file and what is wrong ("truncated:
// N of M bytes", "corrupt (checksum)", "written by a newer hitch").

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "hitch/core/binary.hpp"
#include "hitch/core/crc32c.hpp"
#include "hitch/core/error.hpp"

namespace hitch::train {

inline constexpr std::string_view checkpoint_magic = "HITCHCKP";
inline constexpr std::uint32_t checkpoint_version = 2;

namespace detail {

using hitch::detail::concat;
inline constexpr std::uint32_t checkpoint_byte_order = 0x01020304u;
inline constexpr std::uint32_t max_section_name = 4096;

/// Writes all of `bytes` to `fd`, retrying short writes; throws comm_error-free hitch::error on failure.
inline void write_all(int fd, std::span<const std::byte> bytes, const std::string& path) {
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw error(concat("hitch::train::checkpoint: writing ", path, " failed: ", std::strerror(errno)));
        }
        done += static_cast<std::size_t>(n);
    }
}

/// Removes "<path>.tmp-*": what a save of `path` killed before its rename left behind (saves of one path follow
/// each other, so none of them belongs to a save still running).
inline void remove_temporaries(const std::filesystem::path& path) {
    const std::string stem = path.filename().string() + ".tmp-";
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    std::error_code ec;
    std::vector<std::filesystem::path> orphans;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
        if (entry.path().filename().string().rfind(stem, 0) == 0) orphans.push_back(entry.path());
    for (const auto& orphan : orphans) std::filesystem::remove(orphan, ec);
}

}  // namespace detail

/// Collects named sections and writes them to a file atomically.
class checkpoint_writer {
public:
    /// Adds (or replaces) a section.
    void add(std::string name, std::vector<std::byte> bytes) {
        if (name.empty() || name.size() > detail::max_section_name)
            throw config_error(detail::concat("hitch::train::checkpoint_writer: section name '", name,
                                              "' must have 1 to ", detail::max_section_name, " bytes"));
        sections_[std::move(name)] = std::move(bytes);
    }
    /// Adds a section from whatever `write(std::ostream&)` produces (e.g. an optimizer's save()).
    template <class Write>
    void add_stream(std::string name, Write&& write) {
        std::ostringstream s(std::ios::binary);
        write(s);
        const std::string text = std::move(s).str();
        const auto* p = reinterpret_cast<const std::byte*>(text.data());
        add(std::move(name), std::vector<std::byte>(p, p + text.size()));
    }

    [[nodiscard]] std::vector<std::byte> serialize() const {
        std::vector<std::byte> out;
        std::size_t total = frame_header_bytes + 4;
        for (const auto& [name, bytes] : sections_) total += 12 + name.size() + bytes.size();
        out.reserve(total);
        frame_writer f(out, checkpoint_magic, checkpoint_version);
        byte_writer& w = f.payload();
        w.put(static_cast<std::uint32_t>(sections_.size()));
        for (const auto& [name, bytes] : sections_)
            w.text(name).put(static_cast<std::uint64_t>(bytes.size())).bytes(bytes);
        f.finish();
        return out;
    }

    /// Writes the checkpoint to `path` atomically: a crash at any point leaves either the old or the new file. The
    /// temporary files a killed earlier save of `path` left behind are removed.
    void commit(const std::filesystem::path& path) const {
        detail::remove_temporaries(path);
        const std::vector<std::byte> bytes = serialize();
        static std::atomic<unsigned> counter{0};
        const std::filesystem::path temp =
            path.string() + detail::concat(".tmp-", ::getpid(), "-", counter.fetch_add(1));
        const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            throw error(
                detail::concat("hitch::train::checkpoint: cannot create ", temp.string(), ": ", std::strerror(errno)));
        try {
            detail::write_all(fd, bytes, temp.string());
            if (::fsync(fd) != 0)
                throw error(detail::concat("hitch::train::checkpoint: fsync of ", temp.string(),
                                           " failed: ", std::strerror(errno)));
        } catch (...) {
            ::close(fd);
            std::error_code ignored;
            std::filesystem::remove(temp, ignored);
            throw;
        }
        ::close(fd);
        std::error_code ec;
        std::filesystem::rename(temp, path, ec);
        if (ec) {
            std::filesystem::remove(temp, ec);
            throw error(detail::concat("hitch::train::checkpoint: cannot rename ", temp.string(), " to ", path.string(),
                                       ": ", ec.message()));
        }
        const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
        const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            ::fsync(dfd);  // make the rename itself durable
            ::close(dfd);
        }
    }

private:
    std::map<std::string, std::vector<std::byte>> sections_;
};

/// Reads and fully validates a checkpoint file; then hands out its sections.
class checkpoint_reader {
public:
    explicit checkpoint_reader(const std::filesystem::path& path) : path_(path.string()) {
        std::ifstream in(path, std::ios::binary);
        if (!in) throw error(detail::concat("hitch::train::checkpoint: cannot open ", path_));
        in.seekg(0, std::ios::end);
        const std::streamoff size = in.tellg();
        in.seekg(0);
        bytes_.resize(static_cast<std::size_t>(size));
        in.read(reinterpret_cast<char*>(bytes_.data()), size);
        if (!in) throw error(detail::concat("hitch::train::checkpoint: cannot read ", path_));
        parse();
    }
    /// From bytes already in memory (`what` names them in errors).
    checkpoint_reader(std::vector<std::byte> bytes, std::string what)
        : path_(std::move(what)), bytes_(std::move(bytes)) {
        parse();
    }

    [[nodiscard]] bool has(std::string_view name) const { return sections_.find(std::string(name)) != sections_.end(); }
    /// The section's bytes; a missing section is mismatch_error (the checkpoint is of another configuration).
    [[nodiscard]] std::span<const std::byte> section(std::string_view name) const {
        const auto it = sections_.find(std::string(name));
        if (it == sections_.end())
            throw mismatch_error(detail::concat("hitch::train::checkpoint: ", path_, " has no section '", name,
                                                "' (it was written by another configuration)"));
        return {bytes_.data() + it->second.first, it->second.second};
    }
    /// The section as a stream, for loaders that read streams (e.g. an optimizer's load()).
    [[nodiscard]] std::istringstream stream(std::string_view name) const {
        const auto s = section(name);
        return std::istringstream(std::string(reinterpret_cast<const char*>(s.data()), s.size()), std::ios::binary);
    }
    [[nodiscard]] std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (const auto& [name, where] : sections_) out.push_back(name);
        return out;
    }
    [[nodiscard]] const std::string& path() const noexcept { return path_; }

private:
    void parse() {
        who_ = detail::concat("hitch::train::checkpoint: ", path_);
        if (bytes_.size() >= 12 && frame_magic_matches(bytes_, checkpoint_magic) &&
            load_le<std::uint32_t>(bytes_.data() + 8) == 1) {
            parse_version1();
            return;
        }
        const frame_view f = open_frame(bytes_, {checkpoint_magic, 1, checkpoint_version, who_, "hitch checkpoint"});
        byte_reader r(f.payload, who_, "corrupt");
        const auto count = r.get<std::uint32_t>("the section count");
        for (std::uint32_t i = 0; i < count; ++i) {
            std::string name = r.text(detail::max_section_name, "a section name");
            if (name.empty()) r.fail(detail::concat("section ", i, " has an empty name"));
            const auto length = r.get<std::uint64_t>("a section length");
            const auto at = static_cast<std::size_t>(f.payload.data() - bytes_.data()) + r.position();
            r.skip(length, detail::concat("section '", name, "'"));
            if (!sections_.emplace(name, std::make_pair(at, static_cast<std::size_t>(length))).second)
                r.fail(detail::concat("section '", name, "' appears twice"));
        }
        r.expect_end();
    }

    // ---- version 1 ----
    [[noreturn]] void corrupt(std::string_view what) const {
        throw corrupt_message_error(detail::concat("hitch::train::checkpoint: ", path_, " is corrupt: ", what));
    }
    template <class T>
    T take(std::size_t& at) const {
        if (bytes_.size() - at < sizeof(T)) corrupt(detail::concat("truncated at byte ", at));
        T value;
        std::memcpy(&value, bytes_.data() + at, sizeof(T));
        at += sizeof(T);
        return value;
    }
    void parse_version1() {
        if (bytes_.size() < checkpoint_magic.size() + 16) corrupt(detail::concat("only ", bytes_.size(), " bytes"));
        const std::size_t body = bytes_.size() - sizeof(std::uint32_t);
        std::uint32_t stored = 0;
        std::memcpy(&stored, bytes_.data() + body, sizeof(stored));
        if (crc32c_of(std::span<const std::byte>(bytes_.data(), body)) != stored) corrupt("file checksum mismatch");
        std::size_t at = checkpoint_magic.size() + sizeof(std::uint32_t);
        if (take<std::uint32_t>(at) != detail::checkpoint_byte_order)
            corrupt("written on a host of another byte order");
        const auto count = take<std::uint32_t>(at);
        for (std::uint32_t i = 0; i < count; ++i) {
            const auto name_len = take<std::uint32_t>(at);
            if (name_len == 0 || name_len > detail::max_section_name || body - at < name_len)
                corrupt(detail::concat("section ", i, " has a bad name length"));
            std::string name(reinterpret_cast<const char*>(bytes_.data() + at), name_len);
            at += name_len;
            const auto length = take<std::uint64_t>(at);
            const auto crc = take<std::uint32_t>(at);
            if (length > body - at) corrupt(detail::concat("section '", name, "' runs past the end of the file"));
            const std::span<const std::byte> payload(bytes_.data() + at, static_cast<std::size_t>(length));
            if (crc32c_of(payload) != crc) corrupt(detail::concat("section '", name, "' checksum mismatch"));
            if (!sections_.emplace(name, std::make_pair(at, static_cast<std::size_t>(length))).second)
                corrupt(detail::concat("section '", name, "' appears twice"));
            at += static_cast<std::size_t>(length);
        }
        if (at != body) corrupt(detail::concat(body - at, " unexpected bytes after the last section"));
    }

    std::string path_;
    std::string who_;  // "hitch::train::checkpoint: <path>", the start of every error
    std::vector<std::byte> bytes_;
    std::map<std::string, std::pair<std::size_t, std::size_t>> sections_;
};

}  // namespace hitch::train
