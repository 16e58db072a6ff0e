#pragma once
// The wire format of hitch's compressed messages, and the checks every decoder makes before it reads a byte.
//
// A message is a 32-byte header followed by the codec's payload. All integers are little-endian.
//
//   offset  size  field
//        0     4  magic            "HCMP" for messages, "HCST" for saved codec state
//        4     1  format version   wire::format_version (1)
//        5     1  codec id         compress::codec_ids (user codecs: 128..255)
//        6     1  element type     hitch::dtype of the encoded elements (half, bfloat16, float or double)
//        7     1  flags            0 in messages; state blobs use bit 0 for "error feedback wrapper"
//        8     8  element count    elements the message decodes to
//       16     8  payload length   bytes after the header; the message is exactly header + payload long
//       24     4  reserved         0
//       28     4  checksum         CRC32C of bytes [0, 28) followed by the payload
//
// wire::open() validates all of it and throws hitch::corrupt_message_error naming the first inconsistency; the
// codecs then read the payload through wire::reader, whose every read is bounds-checked, so no input can make a
// decoder read or write outside its buffers. The header is a multiple of 8 bytes, so the payload of a message
// held in a std::vector<std::byte> starts suitably aligned for any element type.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hitch/compress/detail/crc32c.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"

namespace hitch::compress {

/// The codec ids hitch's own codecs put in their messages. A user's codec picks an id in [128, 255].
namespace codec_ids {
inline constexpr std::uint8_t none = 1;
inline constexpr std::uint8_t fp16 = 2;
inline constexpr std::uint8_t bf16 = 3;
inline constexpr std::uint8_t onebit = 4;
inline constexpr std::uint8_t threshold = 5;
inline constexpr std::uint8_t topk = 6;
inline constexpr std::uint8_t dgc = 7;
inline constexpr std::uint8_t randomk = 8;
inline constexpr std::uint8_t qsgd = 9;
inline constexpr std::uint8_t terngrad = 10;
inline constexpr std::uint8_t powersgd = 11;
inline constexpr std::uint8_t first_user = 128;
}  // namespace codec_ids

/// The input of an encoder holds NaN or an infinity (or a value the codec cannot represent, such as one beyond
/// half's range for fp16). Thrown before any state changes, so a caller can skip the step and lose nothing.
class non_finite_error : public hitch::error {
public:
    using hitch::error::error;
};

namespace wire {

inline constexpr std::uint32_t message_magic = 0x504D4348u;  // "HCMP" read as little-endian bytes
inline constexpr std::uint32_t state_magic = 0x54534348u;    // "HCST"
inline constexpr std::uint8_t format_version = 1;
inline constexpr std::size_t header_bytes = 32;
inline constexpr std::size_t checksum_offset = 28;
/// Flag bit of state blobs written by error_feedback<Codec>.
inline constexpr std::uint8_t flag_error_feedback = 1;

/// The decoded header of a message or state blob.
struct header {
    std::uint32_t magic = message_magic;
    std::uint8_t version = format_version;
    std::uint8_t codec = 0;
    dtype type = dtype::f32;
    std::uint8_t flags = 0;
    std::uint64_t count = 0;
    std::uint64_t payload_bytes = 0;
    std::uint32_t checksum = 0;
};

/// A validated message: its header and its payload bytes.
struct message_view {
    header head;
    std::span<const std::byte> payload;
};

// ---- little-endian scalars -------------------------------------------------------------------------------------

template <class T>
    requires(std::is_trivially_copyable_v<T> && (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8))
inline void store_le(std::byte* at, T value) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(at, &value, sizeof(T));
    } else {
        std::array<std::byte, sizeof(T)> b;
        std::memcpy(b.data(), &value, sizeof(T));
        for (std::size_t i = 0; i < sizeof(T); ++i) at[i] = b[sizeof(T) - 1 - i];
    }
}

template <class T>
    requires(std::is_trivially_copyable_v<T> && (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8))
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

// ---- variable-length integers (unsigned LEB128: 7 bits per byte, high bit = more) -------------------------------

/// Bytes of v as a varint (1 to 10).
[[nodiscard]] constexpr std::size_t varint_size(std::uint64_t v) noexcept {
    return v == 0 ? 1 : (static_cast<std::size_t>(std::bit_width(v)) + 6) / 7;
}

/// Writes v at `at` (room for varint_size(v) bytes) and returns the position after it.
inline std::byte* put_varint(std::byte* at, std::uint64_t v) noexcept {
    while (v >= 0x80u) {
        *at++ = static_cast<std::byte>((v & 0x7fu) | 0x80u);
        v >>= 7;
    }
    *at++ = static_cast<std::byte>(v);
    return at;
}

[[noreturn]] inline void corrupt(std::string_view who, std::string_view what) {
    throw corrupt_message_error(hitch::detail::concat(who, ": corrupt message: ", what));
}

// ---- header ----------------------------------------------------------------------------------------------------

[[nodiscard]] inline std::string magic_text(std::uint32_t magic) {
    std::string s;
    for (int i = 0; i < 4; ++i) {
        const auto c = static_cast<unsigned char>(magic >> (8 * i));
        if (c >= 0x20 && c < 0x7f) s += static_cast<char>(c);
        else s += hitch::detail::concat("\\x", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
    }
    return s;
}

inline void write_header(std::byte* at, const header& h) noexcept {
    store_le(at + 0, h.magic);
    store_le(at + 4, h.version);
    store_le(at + 5, h.codec);
    store_le(at + 6, static_cast<std::uint8_t>(h.type));
    store_le(at + 7, h.flags);
    store_le(at + 8, h.count);
    store_le(at + 16, h.payload_bytes);
    store_le(at + 24, std::uint32_t{0});
    store_le(at + 28, h.checksum);
}

[[nodiscard]] inline header read_header(const std::byte* at) noexcept {
    header h;
    h.magic = load_le<std::uint32_t>(at + 0);
    h.version = load_le<std::uint8_t>(at + 4);
    h.codec = load_le<std::uint8_t>(at + 5);
    h.type = static_cast<dtype>(load_le<std::uint8_t>(at + 6));
    h.flags = load_le<std::uint8_t>(at + 7);
    h.count = load_le<std::uint64_t>(at + 8);
    h.payload_bytes = load_le<std::uint64_t>(at + 16);
    h.checksum = load_le<std::uint32_t>(at + 28);
    return h;
}

/// The checksum of a complete message or blob: CRC32C of its first 28 bytes and its payload.
[[nodiscard]] inline std::uint32_t checksum_of(std::span<const std::byte> whole) {
    const auto payload = whole.subspan(header_bytes);
    const std::uint32_t head = compress::detail::crc32c_update(0xFFFFFFFFu, whole.first(checksum_offset));
    return ~(compress::detail::crc32c_shift_bytes(head, payload.size()) ^ compress::detail::crc32c_raw_parallel(payload));
}

[[nodiscard]] constexpr bool is_floating(dtype t) noexcept {
    return t == dtype::f16 || t == dtype::bf16 || t == dtype::f32 || t == dtype::f64;
}

/// Recomputes and stores the checksum of a message whose header and payload are in place.
inline void seal(std::span<std::byte> whole) {
    store_le(whole.data() + checksum_offset, checksum_of(whole));
}

/// Builds one message in a caller's buffer, reusing its capacity: begin() writes a provisional header and makes
/// room for up to `max_payload` bytes; the codec fills payload(); finish(n) sets the payload length, trims the
/// buffer to header + n bytes, and seals it.
class writer {
public:
    writer(std::vector<std::byte>& out, std::uint8_t codec, dtype type, std::uint64_t count,
           std::size_t max_payload, std::uint32_t magic = message_magic, std::uint8_t flags = 0)
        : out_(out) {
        head_.magic = magic;
        head_.codec = codec;
        head_.type = type;
        head_.flags = flags;
        head_.count = count;
        out_.resize(header_bytes + max_payload);
    }
    [[nodiscard]] std::byte* payload() noexcept { return out_.data() + header_bytes; }
    [[nodiscard]] std::size_t capacity() const noexcept { return out_.size() - header_bytes; }

    /// Completes the message with `payload_bytes` bytes of payload and returns its total size.
    std::size_t finish(std::size_t payload_bytes) {
        head_.payload_bytes = payload_bytes;
        out_.resize(header_bytes + payload_bytes);
        write_header(out_.data(), head_);
        seal(out_);
        return out_.size();
    }
    /// As finish(), with the payload's raw CRC32C state from zero (crc32c_update(0, payload)) computed by the codec,
    /// e.g. chunk by chunk while the bytes were in cache, so the payload is not read again.
    std::size_t finish_with_payload_crc(std::size_t payload_bytes, std::uint32_t payload_raw) {
        head_.payload_bytes = payload_bytes;
        out_.resize(header_bytes + payload_bytes);
        write_header(out_.data(), head_);
        const std::uint32_t head_raw =
            compress::detail::crc32c_update(0xFFFFFFFFu, std::span<const std::byte>(out_.data(), checksum_offset));
        store_le(out_.data() + checksum_offset,
                 ~(compress::detail::crc32c_shift_bytes(head_raw, payload_bytes) ^ payload_raw));
        return out_.size();
    }

private:
    std::vector<std::byte>& out_;
    header head_;
};

/// Expectations of open(): which magic, codec and flags the caller accepts.
struct expect {
    std::string_view who;  // the decoder, for messages ("hitch::compress::onebit")
    std::uint8_t codec = 0;
    std::uint32_t magic = message_magic;
    std::uint8_t flags = 0;
};

/// Validates the header and checksum of `bytes` and returns header and payload. Throws corrupt_message_error on
/// anything inconsistent: short buffer, wrong magic (a foreign message), unknown version, another codec's message,
/// an element type that is not floating, unknown flags, a nonzero reserved field, a payload length that does not
/// match the buffer, or a bad checksum.
[[nodiscard]] inline message_view open(std::span<const std::byte> bytes, const expect& e) {
    if (bytes.size() < header_bytes)
        corrupt(e.who, hitch::detail::concat("truncated: ", bytes.size(), " bytes, shorter than the ", header_bytes,
                                      "-byte header"));
    const header h = read_header(bytes.data());
    if (h.magic != e.magic)
        corrupt(e.who, hitch::detail::concat("magic \"", magic_text(h.magic), "\" is not \"", magic_text(e.magic),
                                      "\" (not a hitch ", e.magic == state_magic ? "state blob" : "message", ")"));
    if (h.version != format_version)
        corrupt(e.who, hitch::detail::concat("format version ", int{h.version}, " is not ", int{format_version}));
    if (h.codec != e.codec)
        corrupt(e.who, hitch::detail::concat("codec id ", int{h.codec}, " is not ", int{e.codec},
                                      " (a message of another codec)"));
    if (!is_floating(h.type))
        corrupt(e.who, hitch::detail::concat("element type code ", static_cast<int>(h.type), " is not a floating type"));
    if (h.flags != e.flags) corrupt(e.who, hitch::detail::concat("flags ", int{h.flags}, " are not ", int{e.flags}));
    if (load_le<std::uint32_t>(bytes.data() + 24) != 0) corrupt(e.who, "reserved header field is not zero");
    if (h.payload_bytes != bytes.size() - header_bytes)
        corrupt(e.who, hitch::detail::concat("header announces ", h.payload_bytes, " payload bytes but ",
                                      bytes.size() - header_bytes, " follow the header (truncated or padded)"));
    const std::uint32_t actual = checksum_of(bytes);
    if (actual != h.checksum)
        corrupt(e.who, hitch::detail::concat("checksum mismatch (header says 0x", std::hex, h.checksum, ", bytes give 0x",
                                      actual, ")"));
    return {h, bytes.subspan(header_bytes)};
}

/// Checks that a message decodes to exactly `count` elements (the destination's size).
inline void expect_count(const message_view& m, std::size_t count, std::string_view who) {
    if (m.head.count != count)
        corrupt(who, hitch::detail::concat("it holds ", m.head.count, " elements but the destination has ", count));
}

/// Bounds-checked sequential reads of a payload. Every read that would pass the end throws corrupt_message_error.
class reader {
public:
    reader(std::span<const std::byte> bytes, std::string_view who) : bytes_(bytes), who_(who) {}

    template <class T>
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
    /// A count that must not exceed `limit` (so later size computations cannot overflow).
    [[nodiscard]] std::uint64_t count(std::string_view what, std::uint64_t limit) {
        const auto v = get<std::uint64_t>(what);
        if (v > limit) fail(hitch::detail::concat(what, " ", v, " exceeds ", limit));
        return v;
    }
    [[nodiscard]] std::size_t position() const noexcept { return pos_; }
    [[nodiscard]] std::size_t remaining() const noexcept { return bytes_.size() - pos_; }
    [[nodiscard]] std::span<const std::byte> rest() const noexcept { return bytes_.subspan(pos_); }
    void skip(std::size_t n, std::string_view what) { (void)take(n, what); }
    /// The payload must be consumed exactly.
    void expect_end() const {
        if (pos_ != bytes_.size())
            fail(hitch::detail::concat(bytes_.size() - pos_, " unexpected bytes after the end of the payload"));
    }
    [[noreturn]] void fail(std::string_view what) const { corrupt(who_, what); }
    [[nodiscard]] std::string_view who() const noexcept { return who_; }

private:
    void need(std::uint64_t n, std::string_view what) const {
        if (n > bytes_.size() - pos_)
            fail(hitch::detail::concat("truncated: ", what, " needs ", n, " bytes but ", bytes_.size() - pos_,
                                " remain"));
    }
    std::span<const std::byte> bytes_;
    std::size_t pos_ = 0;
    std::string_view who_;
};

/// Decodes varints from [at, end): each value must end within the range and fit 64 bits (an overlong or
/// unterminated varint throws corrupt_message_error).
class varint_reader {
public:
    varint_reader(const std::byte* at, const std::byte* end, std::string_view who) : at_(at), end_(end), who_(who) {}
    [[nodiscard]] std::uint64_t next() {
        std::uint64_t v = 0;
        for (int shift = 0;; shift += 7) {
            if (at_ == end_) corrupt(who_, "truncated varint");
            const auto b = static_cast<std::uint64_t>(*at_++);
            if (shift == 63 && b > 1) corrupt(who_, "varint overflows 64 bits");
            v |= (b & 0x7fu) << shift;
            if ((b & 0x80u) == 0) return v;
            if (shift == 63) corrupt(who_, "varint longer than 10 bytes");
        }
    }
    [[nodiscard]] bool done() const noexcept { return at_ == end_; }
    [[nodiscard]] const std::byte* position() const noexcept { return at_; }

private:
    const std::byte* at_;
    const std::byte* end_;
    std::string_view who_;
};

// ---- state blobs ------------------------------------------------------------------------------------------------
// Codec state (error-feedback residuals, DGC momentum, PowerSGD's Q) saves to a blob with the same header (magic
// "HCST") and loads back with the same checks, so a checkpoint can store it next to the optimizer's state.

/// Appends floats to a state payload.
inline void put_floats(std::vector<std::byte>& out, std::span<const float> values) {
    const std::size_t at = out.size();
    out.resize(at + values.size() * sizeof(float));
    if constexpr (std::endian::native == std::endian::little) {
        if (!values.empty()) std::memcpy(out.data() + at, values.data(), values.size() * sizeof(float));
    } else {
        for (std::size_t i = 0; i < values.size(); ++i) store_le(out.data() + at + 4 * i, values[i]);
    }
}

template <class T>
inline void put_scalar(std::vector<std::byte>& out, T value) {
    const std::size_t at = out.size();
    out.resize(at + sizeof(T));
    store_le(out.data() + at, value);
}

/// Reads `n` floats into `values` (resized).
inline void get_floats(reader& r, std::vector<float>& values, std::uint64_t n, std::string_view what) {
    const auto bytes = r.take(n * sizeof(float), what);  // n was bounded by the caller: no overflow
    values.resize(static_cast<std::size_t>(n));
    if constexpr (std::endian::native == std::endian::little) {
        if (n != 0) std::memcpy(values.data(), bytes.data(), bytes.size());
    } else {
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = load_le<float>(bytes.data() + 4 * i);
    }
}

/// Wraps a finished state payload (`body`) in a header and returns the blob.
inline void seal_state(std::vector<std::byte>& out, std::uint8_t codec, std::uint64_t count,
                       std::span<const std::byte> body, std::uint8_t flags = 0) {
    writer w(out, codec, dtype::f32, count, body.size(), state_magic, flags);
    if (!body.empty()) std::memcpy(w.payload(), body.data(), body.size());
    w.finish(body.size());
}

/// Opens a state blob of `codec` for a bucket of `count` elements.
[[nodiscard]] inline message_view open_state(std::span<const std::byte> blob, std::uint8_t codec, std::uint64_t count,
                                             std::string_view who, std::uint8_t flags = 0) {
    const message_view m = open(blob, {who, codec, state_magic, flags});
    if (m.head.count != count)
        corrupt(who, hitch::detail::concat("the saved state is for a bucket of ", m.head.count, " elements, not ", count));
    return m;
}

}  // namespace wire
}  // namespace hitch::compress
