#pragma once
// What the reader harnesses share: the input as bytes, checksums recomputed so the fuzzer reaches the fields behind
// them, and the one place that decides which exceptions are answers (hitch's documented errors) and which are
// findings (anything else escapes, and libFuzzer reports the uncaught exception as a crash).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hitch/compress/wire.hpp"
#include "hitch/core/binary.hpp"
#include "hitch/core/error.hpp"

namespace hitch_fuzz {

[[nodiscard]] inline std::vector<std::byte> bytes_of(const std::uint8_t* data, std::size_t size) {
    std::vector<std::byte> out(size);
    for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<std::byte>(data[i]);
    return out;
}

/// Makes a core/binary.hpp frame's length and CRC32C agree with its bytes (no-op when shorter than a header).
inline void reseal_frame(std::vector<std::byte>& b) {
    if (b.size() < hitch::frame_header_bytes) return;
    hitch::store_le<std::uint64_t>(b.data() + 12, b.size());
    hitch::store_le<std::uint32_t>(b.data() + 20, hitch::detail::frame_checksum(b));
}

/// Makes a codec wire message's (or state blob's) payload length and checksum agree with its bytes.
inline void reseal_wire(std::vector<std::byte>& b) {
    namespace wire = hitch::compress::wire;
    if (b.size() < wire::header_bytes) return;
    wire::store_le<std::uint64_t>(b.data() + 16, b.size() - wire::header_bytes);
    wire::seal(b);
}

/// Runs `read`; hitch's documented answers to bad bytes end it quietly, anything else escapes.
template <class Read>
void expect_documented(Read&& read) {
    try {
        read();
    } catch (const hitch::corrupt_message_error&) {
    } catch (const hitch::mismatch_error&) {
    } catch (const hitch::config_error&) {
    }
}

}  // namespace hitch_fuzz
