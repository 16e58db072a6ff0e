#pragma once
// The framing of a message whose payload lives in device memory, on the host side (no CUDA header): the header is
// written by compress/wire.hpp's own write_header, and its checksum joins the header's first 28 bytes (CRC32C'd on
// the host) with the payload's raw state (CRC32C'd on the GPU, detail/crc32c.hpp):
//
//   checksum = ~(shift(raw(0xFFFFFFFF, header[0, 28)), payload bytes) ^ raw(0, payload))
//
// which is compress::wire::checksum_of's formula, so a GPU message is sealed exactly as wire::writer seals a host
// one. detail/wire.cuh holds the device message and the kernels that use this.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "hitch/compress/wire.hpp"
#include "hitch/core/crc32c.hpp"

namespace hitch::cuda::compress::detail {

namespace wire = hitch::compress::wire;

/// A header ready to be sealed: its 32 bytes with the checksum field zero, as eight little-endian words (a kernel
/// argument), and the header's part of the checksum.
struct header_plan {
    std::array<std::uint32_t, wire::header_bytes / 4> words{};
    /// raw(0xFFFFFFFF, header[0, 28)) shifted past the payload: the checksum is ~(head_shifted ^ payload_raw).
    std::uint32_t head_shifted = 0;
};

/// Plans the header of a message of `h.payload_bytes` payload bytes (h.checksum is ignored).
[[nodiscard]] inline header_plan plan_header(wire::header h) {
    h.checksum = 0;
    std::array<std::byte, wire::header_bytes> bytes{};
    wire::write_header(bytes.data(), h);
    header_plan plan;
    for (std::size_t k = 0; k < plan.words.size(); ++k)
        plan.words[k] = wire::load_le<std::uint32_t>(bytes.data() + 4 * k);
    const std::uint32_t head_raw =
        hitch::crc32c_update(0xFFFFFFFFu, std::span<const std::byte>(bytes.data(), wire::checksum_offset));
    plan.head_shifted = hitch::crc32c_shift_bytes(head_raw, h.payload_bytes);
    return plan;
}

/// The message checksum from the header's part and the payload's raw state from zero.
[[nodiscard]] constexpr std::uint32_t seal_checksum(std::uint32_t head_shifted, std::uint32_t payload_raw) noexcept {
    return ~(head_shifted ^ payload_raw);
}

/// The checksum of a message whose first 32 bytes are `head` (its checksum field is not read) and whose payload of
/// `payload_bytes` has the raw state `payload_raw`: what wire::checksum_of gives for the whole message.
[[nodiscard]] inline std::uint32_t message_checksum(std::span<const std::byte> head, std::uint64_t payload_bytes,
                                                    std::uint32_t payload_raw) {
    const std::uint32_t head_raw = hitch::crc32c_update(0xFFFFFFFFu, head.first(wire::checksum_offset));
    return seal_checksum(hitch::crc32c_shift_bytes(head_raw, payload_bytes), payload_raw);
}

/// The header bytes of a plan with its checksum in place (the host's view of what the sealing kernel writes).
[[nodiscard]] inline std::array<std::byte, wire::header_bytes> sealed_header(const header_plan& plan,
                                                                             std::uint32_t payload_raw) {
    std::array<std::byte, wire::header_bytes> bytes{};
    for (std::size_t k = 0; k < plan.words.size(); ++k) wire::store_le(bytes.data() + 4 * k, plan.words[k]);
    wire::store_le(bytes.data() + wire::checksum_offset, seal_checksum(plan.head_shifted, payload_raw));
    return bytes;
}

}  // namespace hitch::cuda::compress::detail
