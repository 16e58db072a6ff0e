#pragma once
// The byte formats' common ground: little-endian reads and writes, and the frame every file or blob hitch writes
// carries (docs/design.md, "One binary format family"):
//
//   offset  size  field
//        0     8  magic     8 ASCII bytes (4-byte magics padded with NULs)
//        8     4  version   u32
//       12     8  length    u64: bytes of the whole frame, header included
//       20     4  crc32c    of the whole frame with this field zero
//       24     .  payload   written with byte_writer, read with byte_reader
//
// The length comes before the payload so a short file is told apart from a damaged one ("truncated: N of M
// bytes" versus "corrupt (checksum)"), and a format gains fields by bumping its version.

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hitch/core/crc32c.hpp"
#include "hitch/core/error.hpp"

namespace hitch {

/// A value byte_writer and byte_reader store as little-endian bytes: a trivially copyable value of 1, 2, 4 or 8
/// bytes (integers, floats, enums, hitch::half), its bytes reversed on a big-endian host.
template <class T>
concept byte_scalar =
    std::is_trivially_copyable_v<T> && (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8);

template <byte_scalar T>
inline void store_le(std::byte* at, T value) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(at, &value, sizeof(T));
    } else {
        std::array<std::byte, sizeof(T)> b;
        std::memcpy(b.data(), &value, sizeof(T));
        for (std::size_t i = 0; i < sizeof(T); ++i) at[i] = b[sizeof(T) - 1 - i];
    }
}

template <byte_scalar T>
[[nodiscard]] inline T load_le(const std::byte* at) noexcept {
    T value;
    if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(&value, at, sizeof(T));
    } else {
        std::array<std::byte, sizeof(T)> b;
        for (std::size_t i = 0; i < sizeof(T); ++i) b[i] = at[sizeof(T) - 1 - i];
        std::memcpy(&value, b.data(), sizeof(T));
    }
    return value;
}

/// Writes little-endian values one after another, either appended to a vector (which grows) or into a fixed
/// buffer (which must be large enough: passing its end is a bug in the format's writer and throws hitch::error).
class byte_writer {
public:
    explicit byte_writer(std::vector<std::byte>& out) noexcept : grow_(&out) {}
    explicit byte_writer(std::span<std::byte> fixed) noexcept : fixed_(fixed) {}

    template <byte_scalar T>
    byte_writer& put(T value) {
        store_le(room(sizeof(T)), value);
        return *this;
    }
    byte_writer& bytes(std::span<const std::byte> b) {
        std::byte* at = room(b.size());
        if (!b.empty()) std::memcpy(at, b.data(), b.size());
        return *this;
    }
    /// u32 length, then the bytes.
    byte_writer& text(std::string_view s) {
        put(static_cast<std::uint32_t>(s.size()));
        return bytes(std::as_bytes(std::span<const char>(s.data(), s.size())));
    }
    /// The values, no length.
    template <byte_scalar T>
    byte_writer& values(std::span<const T> v) {
        std::byte* at = room(v.size_bytes());
        if constexpr (std::endian::native == std::endian::little) {
            if (!v.empty()) std::memcpy(at, v.data(), v.size_bytes());
        } else {
            for (std::size_t i = 0; i < v.size(); ++i) store_le(at + i * sizeof(T), v[i]);
        }
        return *this;
    }
    /// Bytes written so far (from the writer's start: a vector's earlier contents are not counted).
    [[nodiscard]] std::size_t position() const noexcept { return pos_; }

private:
    std::byte* room(std::size_t n) {
        if (grow_ != nullptr) {
            const std::size_t at = grow_->size();
            grow_->resize(at + n);
            pos_ += n;
            return grow_->data() + at;
        }
        if (n > fixed_.size() - pos_)
            throw error(detail::concat("hitch::byte_writer: writing ", n, " bytes at offset ", pos_,
                                       " overflows a buffer of ", fixed_.size()));
        std::byte* at = fixed_.data() + pos_;
        pos_ += n;
        return at;
    }
    std::vector<std::byte>* grow_ = nullptr;
    std::span<std::byte> fixed_;
    std::size_t pos_ = 0;
};

/// Reads little-endian values one after another. Every read is checked against the end first; a read past it,
/// a count past its limit or a failed check throws corrupt_message_error "<who>: <kind>: <what>" (kind may be
/// empty), so no input can make a reader touch memory outside its bytes.
class byte_reader {
public:
    byte_reader(std::span<const std::byte> bytes, std::string_view who, std::string_view kind = {}) noexcept
        : bytes_(bytes), who_(who), kind_(kind) {}

    template <byte_scalar T>
    [[nodiscard]] T get(std::string_view what) {
        need(sizeof(T), what);
        const T v = load_le<T>(bytes_.data() + pos_);
        pos_ += sizeof(T);
        return v;
    }
    /// The next n bytes as a span (n is checked against what is left before anything is read).
    [[nodiscard]] std::span<const std::byte> take(std::uint64_t n, std::string_view what) {
        need(n, what);
        const auto s = bytes_.subspan(pos_, static_cast<std::size_t>(n));
        pos_ += static_cast<std::size_t>(n);
        return s;
    }
    void skip(std::uint64_t n, std::string_view what) { (void)take(n, what); }
    /// A u64 count that must not exceed `limit` (so later size computations cannot overflow).
    [[nodiscard]] std::uint64_t count(std::string_view what, std::uint64_t limit) {
        const auto v = get<std::uint64_t>(what);
        if (v > limit) fail(detail::concat(what, " ", v, " exceeds ", limit));
        return v;
    }
    /// What byte_writer::text wrote; longer than `limit` bytes is refused.
    [[nodiscard]] std::string text(std::uint32_t limit, std::string_view what) {
        const auto n = get<std::uint32_t>(what);
        if (n > limit) fail(detail::concat(what, " length ", n, " exceeds the limit of ", limit, " bytes"));
        const auto b = take(n, what);
        return {reinterpret_cast<const char*>(b.data()), b.size()};
    }
    /// n values into `out` (resized); n must have been bounded by the caller, so n * sizeof(T) cannot overflow.
    template <byte_scalar T>
    void values(std::vector<T>& out, std::uint64_t n, std::string_view what) {
        // Checked before the multiplication: a damaged count times sizeof(T) can wrap to a size that fits.
        if (n > remaining() / sizeof(T))
            fail(detail::concat("truncated: ", what, " needs ", n, " values of ", sizeof(T), " bytes but ", remaining(),
                                " bytes remain"));
        const auto b = take(n * sizeof(T), what);
        out.resize(static_cast<std::size_t>(n));
        if constexpr (std::endian::native == std::endian::little) {
            if (n != 0) std::memcpy(out.data(), b.data(), b.size());
        } else {
            for (std::size_t i = 0; i < out.size(); ++i) out[i] = load_le<T>(b.data() + i * sizeof(T));
        }
    }
    [[nodiscard]] std::size_t position() const noexcept { return pos_; }
    [[nodiscard]] std::size_t remaining() const noexcept { return bytes_.size() - pos_; }
    [[nodiscard]] std::span<const std::byte> rest() const noexcept { return bytes_.subspan(pos_); }
    /// The bytes must be consumed exactly.
    void expect_end() const {
        if (pos_ != bytes_.size())
            fail(detail::concat(bytes_.size() - pos_, " unexpected bytes after the end of the payload"));
    }
    [[noreturn]] void fail(std::string_view what) const {
        if (kind_.empty()) throw corrupt_message_error(detail::concat(who_, ": ", what));
        throw corrupt_message_error(detail::concat(who_, ": ", kind_, ": ", what));
    }
    [[nodiscard]] std::string_view who() const noexcept { return who_; }

private:
    void need(std::uint64_t n, std::string_view what) const {
        if (n > bytes_.size() - pos_)
            fail(detail::concat("truncated: ", what, " needs ", n, " bytes but ", bytes_.size() - pos_, " remain"));
    }
    std::span<const std::byte> bytes_;
    std::size_t pos_ = 0;
    std::string_view who_;
    std::string_view kind_;
};

// ---- the common frame ------------------------------------------------------------------------------------------

inline constexpr std::size_t frame_header_bytes = 24;
inline constexpr std::size_t frame_checksum_offset = 20;

/// What a reader of one format accepts, and the words its errors use.
struct frame_format {
    std::string_view magic;  // 1 to 8 ASCII characters, padded with NULs to 8 bytes
    // The versions this build reads, for the error text. Versions from before a format had this frame are read
    // by the format's own code, which dispatches on the version before it calls open_frame.
    std::uint32_t oldest_version = 1;
    std::uint32_t newest_version = 1;
    std::string_view who;   // the reader, and the file where there is one: "hitch::train::checkpoint: ck.rank0-of-2"
    std::string_view noun;  // what a foreign file is not: "hitch checkpoint"
};

/// An opened frame: its version and the payload after the header.
struct frame_view {
    std::uint32_t version = 0;
    std::span<const std::byte> payload;
};

namespace detail {

[[nodiscard]] inline std::array<std::byte, 8> padded_magic(std::string_view magic) noexcept {
    std::array<std::byte, 8> m{};
    std::memcpy(m.data(), magic.data(), std::min<std::size_t>(magic.size(), 8));
    return m;
}

/// The magic as text, non-printable bytes escaped and trailing NULs dropped.
[[nodiscard]] inline std::string magic_text(std::span<const std::byte> magic) {
    std::size_t n = magic.size();
    while (n > 0 && magic[n - 1] == std::byte{0}) --n;
    std::string s;
    for (std::size_t i = 0; i < n; ++i) {
        const auto c = static_cast<unsigned char>(magic[i]);
        if (c >= 0x20 && c < 0x7f)
            s += static_cast<char>(c);
        else
            s += concat("\\x", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
    }
    return s;
}

/// CRC32C of a whole frame with its checksum field taken as zero.
[[nodiscard]] inline std::uint32_t frame_checksum(std::span<const std::byte> frame) {
    static constexpr std::array<std::byte, 4> zero{};
    std::uint32_t head = crc32c_update(0xFFFFFFFFu, frame.first(frame_checksum_offset));
    head = crc32c_update(head, zero);
    const auto payload = frame.subspan(frame_header_bytes);
    return ~(crc32c_shift_bytes(head, payload.size()) ^ crc32c_raw_parallel(payload));
}

[[noreturn]] inline void frame_fail(const frame_format& f, std::string_view what) {
    throw corrupt_message_error(concat(f.who, ": ", what));
}

}  // namespace detail

/// Writes one frame: the constructor clears `out` and reserves the header, payload() appends, finish() fills in
/// the length and the checksum.
class frame_writer {
public:
    frame_writer(std::vector<std::byte>& out, std::string_view magic, std::uint32_t version)
        : out_(out), payload_(out) {
        out_.clear();
        out_.resize(frame_header_bytes);
        const auto m = detail::padded_magic(magic);
        std::memcpy(out_.data(), m.data(), m.size());
        store_le(out_.data() + 8, version);
    }
    [[nodiscard]] byte_writer& payload() noexcept { return payload_; }
    void finish() {
        store_le(out_.data() + 12, static_cast<std::uint64_t>(out_.size()));
        store_le(out_.data() + frame_checksum_offset, std::uint32_t{0});
        store_le(out_.data() + frame_checksum_offset, detail::frame_checksum(out_));
    }

private:
    std::vector<std::byte>& out_;
    byte_writer payload_;
};

/// True when `bytes` start with the format's 8-byte magic (a short buffer: when what there is matches).
[[nodiscard]] inline bool frame_magic_matches(std::span<const std::byte> bytes, std::string_view magic) noexcept {
    const auto m = detail::padded_magic(magic);
    const std::size_t n = std::min(bytes.size(), m.size());
    return n == 0 || std::memcmp(bytes.data(), m.data(), n) == 0;
}

/// The frame's total length as its header states it, for a reader that has only the first bytes of a stream
/// (at least frame_header_bytes of them).
[[nodiscard]] inline std::uint64_t frame_length(std::span<const std::byte> header) noexcept {
    return load_le<std::uint64_t>(header.data() + 12);
}

/// Checks magic, version, length and checksum, in that order, and returns the version and the payload. Throws
/// corrupt_message_error "<who>: ..." with "not a <noun>", "written by a newer hitch (format V, this build reads
/// A-B)", "truncated: N of M bytes", or "corrupt (checksum)" and the figures. The version is judged before the
/// checksum: a later version may checksum differently, and its files must be refused as new, not as damaged.
[[nodiscard]] inline frame_view open_frame(std::span<const std::byte> bytes, const frame_format& f) {
    using detail::concat;
    if (!frame_magic_matches(bytes, f.magic))
        detail::frame_fail(f, concat("not a ", f.noun, " (magic \"",
                                     detail::magic_text(bytes.first(std::min<std::size_t>(bytes.size(), 8))),
                                     "\", expected \"", f.magic, "\")"));
    if (bytes.size() < frame_header_bytes)
        detail::frame_fail(
            f, concat("truncated: ", bytes.size(), " bytes, shorter than the ", frame_header_bytes, "-byte header"));
    const auto version = load_le<std::uint32_t>(bytes.data() + 8);
    if (version > f.newest_version || version < f.oldest_version) {
        const std::string reads = f.oldest_version == f.newest_version
                                      ? concat(f.newest_version)
                                      : concat(f.oldest_version, "-", f.newest_version);
        if (version > f.newest_version)
            detail::frame_fail(f,
                               concat("written by a newer hitch (format ", version, ", this build reads ", reads, ")"));
        detail::frame_fail(f, concat("format ", version, " is not one this build reads (", reads, ")"));
    }
    const auto length = frame_length(bytes);
    if (length < frame_header_bytes)
        detail::frame_fail(f, concat("corrupt: the header gives a length of ", length, " bytes"));
    if (length > bytes.size()) detail::frame_fail(f, concat("truncated: ", bytes.size(), " of ", length, " bytes"));
    if (length < bytes.size())
        detail::frame_fail(
            f, concat("corrupt: ", bytes.size(), " bytes where the header says ", length, " (bytes after the end)"));
    const auto stored = load_le<std::uint32_t>(bytes.data() + frame_checksum_offset);
    const auto actual = detail::frame_checksum(bytes);
    if (stored != actual)
        detail::frame_fail(f, concat("corrupt (checksum): the header says 0x", std::hex, stored, ", the ", std::dec,
                                     bytes.size(), " bytes give 0x", std::hex, actual));
    return {version, bytes.subspan(frame_header_bytes)};
}

}  // namespace hitch
