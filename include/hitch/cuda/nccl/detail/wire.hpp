#pragma once
// The messages of cuda::nccl's control channel (cuda/nccl/control.hpp): one fixed header, then a host payload or a
// reason. Every rank of a job runs the same build, so the header travels as its bytes (its layout is checked
// below); a magic number catches a message that is not one of these.
//
//   message   a user (or internal) message: tag, element type, size, its number from this sender, and whether its
//             bytes follow inline (host payload) or over NCCL after the handshake
//   ready     the receiver matched message `seq` and proposes slot `index` for its transfer
//   go        the sender answers: the transfer runs in slot `index` on both sides
//   reject    the receiver matched message `seq` but its size or type differs: nothing will be transferred
//   withdraw  the sender gave message `seq` up (its deadline passed before the receiver matched it)
//   abort     the sender aborted the context; the payload says why

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hitch/core/error.hpp"

namespace hitch::cuda::detail {

enum class wire_kind : std::uint8_t { message = 1, ready = 2, go = 3, reject = 4, withdraw = 5, abort = 6 };

inline constexpr std::uint32_t wire_magic = 0x4c43436eU;  // "nCCL"

struct wire_header {
    std::uint32_t magic = wire_magic;
    wire_kind kind = wire_kind::message;
    std::uint8_t internal = 0;  // 1: hitch's own traffic (barriers, agreements), matched apart from the user's
    std::uint8_t type = 0;      // the message's dtype
    std::uint8_t via_nccl = 0;  // 1: the bytes follow over NCCL after the handshake; 0: inline
    std::int32_t tag = 0;
    std::uint32_t reserved = 0;
    std::uint64_t context = 0;
    std::uint64_t seq = 0;    // the message's number among those its sender sent to this receiver
    std::uint64_t bytes = 0;  // the message's size
    std::uint64_t index = 0;  // ready: the slot proposed; go: the slot agreed
};
static_assert(std::is_trivially_copyable_v<wire_header> && sizeof(wire_header) == 48,
              "cuda::nccl's control header must keep its layout");

[[nodiscard]] inline std::vector<std::byte> encode(const wire_header& h, std::span<const std::byte> payload = {}) {
    std::vector<std::byte> out(sizeof(wire_header) + payload.size());
    std::memcpy(out.data(), &h, sizeof(wire_header));
    if (!payload.empty()) std::memcpy(out.data() + sizeof(wire_header), payload.data(), payload.size());
    return out;
}

/// The header of `bytes`; corrupt_message_error when it is not a control message.
[[nodiscard]] inline wire_header decode(std::span<const std::byte> bytes) {
    wire_header h;
    if (bytes.size() < sizeof(wire_header))
        throw corrupt_message_error(hitch::detail::concat("hitch::cuda::nccl: a control message of ", bytes.size(),
                                                          " bytes is shorter than its header (", sizeof(wire_header),
                                                          " bytes)"));
    std::memcpy(&h, bytes.data(), sizeof(wire_header));
    if (h.magic != wire_magic || h.kind < wire_kind::message || h.kind > wire_kind::abort)
        throw corrupt_message_error("hitch::cuda::nccl: a control message with a bad magic number or kind");
    return h;
}

[[nodiscard]] inline std::span<const std::byte> payload_of(std::span<const std::byte> bytes) noexcept {
    return bytes.subspan(sizeof(wire_header));
}

}  // namespace hitch::cuda::detail
