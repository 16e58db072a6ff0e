#pragma once
// The wire format of hitch's compressed messages, and the checks every decoder makes before it reads a byte.
//
// A message is a 32-byte header followed by the codec's payload. All integers are little-endian.
//
//   offset  size  field
//        0     4  magic            "HCMP" (and "HCST" in version 1 of saved codec state; see the end of the file)
//        4     1  format version   wire::format_version (1)
//        5     1  codec id         compress::codec_ids (user codecs: 128..255)
//        6     1  element type     hitch::dtype of the encoded elements (half, bfloat16, float or double)
//        7     1  flags            0 in messages; state blobs use bit 0 for "error feedback wrapper"
//        8     8  element count    elements the message decodes to
//       16     8  payload length   bytes after the header; the message is exactly header + payload long
//       24     4  reserved         0
//       28     4  checksum         CRC32C of bytes [0, 28) followed by the payload
//
// This is the common frame of core/binary.hpp laid out for the hot path: the same fields in 32 bytes, read and
// written with byte_reader and byte_writer. wire::open() validates all of it and throws
// hitch::corrupt_message_error naming the first inconsistency; the codecs then read the payload through
// wire::reader (a byte_reader), whose every read is bounds-checked, so no input can make a
// decoder read or write outside its buffers. The header is a multiple of 8 bytes, so the payload of a message
// held in a std::vector<std::byte> starts suitably aligned for any element type.

#include <algorithm>
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

#include "hitch/core/binary.hpp"
#include "hitch/core/crc32c.hpp"
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

// Little-endian scalars: the codecs write their payloads at computed offsets with these.
using hitch::load_le;
using hitch::store_le;

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
    std::array<std::byte, 4> b;
    store_le(b.data(), magic);
    return hitch::detail::magic_text(b);
}

inline void write_header(std::byte* at, const header& h) {
    byte_writer w(std::span<std::byte>(at, header_bytes));
    w.put(h.magic).put(h.version).put(h.codec).put(static_cast<std::uint8_t>(h.type)).put(h.flags);
    w.put(h.count).put(h.payload_bytes).put(std::uint32_t{0}).put(h.checksum);
}

/// The header's fields; `reserved` receives bytes [24, 28), which a valid header keeps zero.
[[nodiscard]] inline header read_header(const std::byte* at, std::uint32_t* reserved = nullptr) {
    byte_reader r(std::span<const std::byte>(at, header_bytes), "hitch::compress::wire");
    header h;
    h.magic = r.get<std::uint32_t>("magic");
    h.version = r.get<std::uint8_t>("version");
    h.codec = r.get<std::uint8_t>("codec");
    h.type = static_cast<dtype>(r.get<std::uint8_t>("element type"));
    h.flags = r.get<std::uint8_t>("flags");
    h.count = r.get<std::uint64_t>("count");
    h.payload_bytes = r.get<std::uint64_t>("payload length");
    const auto zero = r.get<std::uint32_t>("reserved");
    if (reserved != nullptr) *reserved = zero;
    h.checksum = r.get<std::uint32_t>("checksum");
    return h;
}

/// The checksum of a complete message or blob: CRC32C of its first 28 bytes and its payload.
[[nodiscard]] inline std::uint32_t checksum_of(std::span<const std::byte> whole) {
    const auto payload = whole.subspan(header_bytes);
    const std::uint32_t head = crc32c_update(0xFFFFFFFFu, whole.first(checksum_offset));
    return ~(crc32c_shift_bytes(head, payload.size()) ^ crc32c_raw_parallel(payload));
}

[[nodiscard]] constexpr bool is_floating(dtype t) noexcept {
    return t == dtype::f16 || t == dtype::bf16 || t == dtype::f32 || t == dtype::f64;
}

/// Recomputes and stores the checksum of a message whose header and payload are in place.
inline void seal(std::span<std::byte> whole) { store_le(whole.data() + checksum_offset, checksum_of(whole)); }

/// Builds one message in a caller's buffer, reusing its capacity: begin() writes a provisional header and makes
/// room for up to `max_payload` bytes; the codec fills payload(); finish(n) sets the payload length, trims the
/// buffer to header + n bytes, and seals it.
class writer {
public:
    writer(std::vector<std::byte>& out, std::uint8_t codec, dtype type, std::uint64_t count, std::size_t max_payload,
           std::uint32_t magic = message_magic, std::uint8_t flags = 0)
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
            crc32c_update(0xFFFFFFFFu, std::span<const std::byte>(out_.data(), checksum_offset));
        store_le(out_.data() + checksum_offset, ~(crc32c_shift_bytes(head_raw, payload_bytes) ^ payload_raw));
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

/// The checks of open() that read only the header and the message's size, in open()'s order and with its texts:
/// `head` holds the message's first min(size, header_bytes) bytes. A reader whose message lies elsewhere (in device
/// memory) checks the header with this and the checksum with check_checksum, and so reports what open() would.
[[nodiscard]] inline header check_header(std::span<const std::byte> head, std::size_t size, const expect& e) {
    if (size < header_bytes || head.size() < header_bytes)
        corrupt(e.who,
                hitch::detail::concat("truncated: ", size, " bytes, shorter than the ", header_bytes, "-byte header"));
    std::uint32_t reserved = 0;
    const header h = read_header(head.data(), &reserved);
    if (h.magic != e.magic)
        corrupt(e.who,
                hitch::detail::concat("magic \"", magic_text(h.magic), "\" is not \"", magic_text(e.magic),
                                      "\" (not a hitch ", e.magic == state_magic ? "state blob" : "message", ")"));
    if (h.version != format_version)
        corrupt(e.who, hitch::detail::concat("format version ", int{h.version}, " is not ", int{format_version}));
    if (h.codec != e.codec)
        corrupt(e.who, hitch::detail::concat("codec id ", int{h.codec}, " is not ", int{e.codec},
                                             " (a message of another codec)"));
    if (!is_floating(h.type))
        corrupt(e.who,
                hitch::detail::concat("element type code ", static_cast<int>(h.type), " is not a floating type"));
    if (h.flags != e.flags) corrupt(e.who, hitch::detail::concat("flags ", int{h.flags}, " are not ", int{e.flags}));
    if (reserved != 0) corrupt(e.who, "reserved header field is not zero");
    if (h.payload_bytes != size - header_bytes)
        corrupt(e.who, hitch::detail::concat("header announces ", h.payload_bytes, " payload bytes but ",
                                             size - header_bytes, " follow the header (truncated or padded)"));
    return h;
}

/// open()'s last check: `actual` is the checksum of the whole message (checksum_of).
inline void check_checksum(const header& h, std::uint32_t actual, std::string_view who) {
    if (actual != h.checksum)
        corrupt(who, hitch::detail::concat("checksum mismatch (header says 0x", std::hex, h.checksum, ", bytes give 0x",
                                           actual, ")"));
}

/// Validates the header and checksum of `bytes` and returns header and payload. Throws corrupt_message_error on
/// anything inconsistent: short buffer, wrong magic (a foreign message), unknown version, another codec's message,
/// an element type that is not floating, unknown flags, a nonzero reserved field, a payload length that does not
/// match the buffer, or a bad checksum.
[[nodiscard]] inline message_view open(std::span<const std::byte> bytes, const expect& e) {
    const header h = check_header(bytes.first(std::min(bytes.size(), header_bytes)), bytes.size(), e);
    check_checksum(h, checksum_of(bytes), e.who);
    return {h, bytes.subspan(header_bytes)};
}

/// Checks that a message decodes to exactly `count` elements (the destination's size).
inline void expect_count(const message_view& m, std::size_t count, std::string_view who) {
    if (m.head.count != count)
        corrupt(who, hitch::detail::concat("it holds ", m.head.count, " elements but the destination has ", count));
}

/// Bounds-checked sequential reads of a payload; failures read "<who>: corrupt message: <what>".
class reader : public byte_reader {
public:
    reader(std::span<const std::byte> bytes, std::string_view who) noexcept
        : byte_reader(bytes, who, "corrupt message") {}
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
// Codec state (error-feedback residuals, DGC momentum, PowerSGD's Q) saves to a blob in the common frame of
// core/binary.hpp, so a checkpoint can store it next to the optimizer's state:
//
//   frame "HCST", version 2:  u64 element count | u8 codec id | u8 element type | u8 flags | u8 0 | the codec's
//                              payload (from byte 36, so its floats are aligned)
//
// Version 1 blobs (the 32-byte message header with magic "HCST" and format version 1) are still read.

inline constexpr std::string_view state_frame_magic = "HCST";
inline constexpr std::uint32_t state_version = 2;
/// Where a version 2 state blob's payload starts.
inline constexpr std::size_t state_payload_offset = frame_header_bytes + 12;

/// Appends floats to a state payload.
inline void put_floats(std::vector<std::byte>& out, std::span<const float> values) { byte_writer(out).values(values); }

template <class T>
inline void put_scalar(std::vector<std::byte>& out, T value) {
    byte_writer(out).put(value);
}

/// Reads `n` floats into `values` (resized).
inline void get_floats(reader& r, std::vector<float>& values, std::uint64_t n, std::string_view what) {
    r.values(values, n, what);
}

/// Wraps a finished state payload (`body`) in a frame and returns the blob in `out`.
inline void seal_state(std::vector<std::byte>& out, std::uint8_t codec, std::uint64_t count,
                       std::span<const std::byte> body, std::uint8_t flags = 0) {
    frame_writer f(out, state_frame_magic, state_version);
    f.payload().put(count).put(codec).put(static_cast<std::uint8_t>(dtype::f32)).put(flags).put(std::uint8_t{0});
    f.payload().bytes(body);
    f.finish();
}

/// Opens a state blob of `codec` for a bucket of `count` elements (version 2, or version 1).
[[nodiscard]] inline message_view open_state(std::span<const std::byte> blob, std::uint8_t codec, std::uint64_t count,
                                             std::string_view who, std::uint8_t flags = 0) {
    message_view m;
    if (blob.size() > 4 && load_le<std::uint32_t>(blob.data()) == state_magic && blob[4] == std::byte{1}) {
        m = open(blob, {who, codec, state_magic, flags});
    } else {
        const frame_view f =
            open_frame(blob, {state_frame_magic, format_version, state_version, who, "hitch codec state blob"});
        reader r(f.payload, who);
        m.head.magic = state_magic;
        m.head.version = static_cast<std::uint8_t>(f.version);
        m.head.count = r.get<std::uint64_t>("element count");
        m.head.codec = r.get<std::uint8_t>("codec id");
        m.head.type = static_cast<dtype>(r.get<std::uint8_t>("element type"));
        m.head.flags = r.get<std::uint8_t>("flags");
        if (r.get<std::uint8_t>("reserved") != 0) r.fail("reserved header field is not zero");
        m.head.payload_bytes = r.remaining();
        m.head.checksum = load_le<std::uint32_t>(blob.data() + frame_checksum_offset);
        m.payload = r.rest();
        if (m.head.codec != codec)
            corrupt(who, hitch::detail::concat("codec id ", int{m.head.codec}, " is not ", int{codec},
                                               " (a message of another codec)"));
        if (!is_floating(m.head.type))
            corrupt(who, hitch::detail::concat("element type code ", static_cast<int>(m.head.type),
                                               " is not a floating type"));
        if (m.head.flags != flags)
            corrupt(who, hitch::detail::concat("flags ", int{m.head.flags}, " are not ", int{flags}));
    }
    if (m.head.count != count)
        corrupt(who,
                hitch::detail::concat("the saved state is for a bucket of ", m.head.count, " elements, not ", count));
    return m;
}

}  // namespace wire
}  // namespace hitch::compress
