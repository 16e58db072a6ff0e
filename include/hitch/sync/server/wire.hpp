#pragma once
// The parameter server's two messages, each one frame of core/binary.hpp (magic, version, length, crc32c), so a
// damaged or foreign message is corrupt_message_error before anything acts on it.
//
//   request "HPSREQ" v1 (worker -> server, tag request_tag):
//     u32 kinds (request_kind bits) | u32 worker | u32 shard | u64 version the gradient was computed on |
//     u64 clock (the worker's gradient pushes so far) | f64 learning rate | u64 elements | u64 payload bytes |
//     payload: a codec message (push_gradient), raw f32 parameters (push_parameters), a path (save, load)
//   reply "HPSREP" v1 (server -> worker, tag reply_tag):
//     u32 status (0 ok, else the error's kind) | u64 version | u64 staleness | u64 dropped | u64 elements |
//     u64 payload bytes | payload: raw f32 parameters (elements of them) or the error's text

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hitch/core/binary.hpp"
#include "hitch/core/error.hpp"

namespace hitch::sync::detail {

inline constexpr int request_tag = 1;
inline constexpr int reply_tag = 2;

enum request_kind : std::uint32_t {
    push_gradient = 1u << 0,
    pull = 1u << 1,
    push_parameters = 1u << 2,
    done = 1u << 3,
    save = 1u << 4,
    stage_load = 1u << 5,
    commit_load = 1u << 6,
    abort_load = 1u << 7,
};
inline constexpr std::uint32_t all_request_kinds = (1u << 8) - 1;

struct request_header {
    std::uint32_t kinds = 0;
    std::uint32_t worker = 0;
    std::uint32_t shard = 0;
    std::uint64_t version = 0;
    std::uint64_t clock = 0;
    double learning_rate = 0.0;
    std::uint64_t elements = 0;
};

struct request {
    request_header header;
    std::span<const std::byte> payload;
};

/// The kind of error a server reports, so the worker rethrows the same type.
enum class reply_status : std::uint32_t { ok = 0, config = 1, mismatch = 2, corrupt = 3, other = 4 };

struct reply_header {
    reply_status status = reply_status::ok;
    std::uint64_t version = 0;
    std::uint64_t staleness = 0;
    std::uint64_t dropped = 0;
    std::uint64_t elements = 0;
};

struct reply {
    reply_header header;
    std::span<const std::byte> payload;
};

inline void encode_request(std::vector<std::byte>& out, const request_header& h, std::span<const std::byte> payload) {
    out.clear();
    frame_writer f(out, "HPSREQ", 1);
    f.payload()
        .put(h.kinds)
        .put(h.worker)
        .put(h.shard)
        .put(h.version)
        .put(h.clock)
        .put(h.learning_rate)
        .put(h.elements)
        .put(static_cast<std::uint64_t>(payload.size()))
        .bytes(payload);
    f.finish();
}

[[nodiscard]] inline request decode_request(std::span<const std::byte> bytes, std::string_view who) {
    const auto frame = open_frame(bytes, {"HPSREQ", 1, 1, who, "parameter-server request"});
    byte_reader r(frame.payload, who, "request");
    request q;
    q.header.kinds = r.get<std::uint32_t>("the request kinds");
    if (q.header.kinds == 0 || (q.header.kinds & ~all_request_kinds) != 0)
        r.fail(hitch::detail::concat("unknown request kinds 0x", std::hex, q.header.kinds));
    q.header.worker = r.get<std::uint32_t>("the worker");
    q.header.shard = r.get<std::uint32_t>("the shard");
    q.header.version = r.get<std::uint64_t>("the version");
    q.header.clock = r.get<std::uint64_t>("the clock");
    q.header.learning_rate = r.get<double>("the learning rate");
    q.header.elements = r.get<std::uint64_t>("the element count");
    const auto n = r.get<std::uint64_t>("the payload size");
    q.payload = r.take(n, "the payload");
    r.expect_end();
    return q;
}

inline void encode_reply(std::vector<std::byte>& out, const reply_header& h, std::span<const std::byte> payload) {
    out.clear();
    frame_writer f(out, "HPSREP", 1);
    f.payload()
        .put(static_cast<std::uint32_t>(h.status))
        .put(h.version)
        .put(h.staleness)
        .put(h.dropped)
        .put(h.elements)
        .put(static_cast<std::uint64_t>(payload.size()))
        .bytes(payload);
    f.finish();
}

[[nodiscard]] inline reply decode_reply(std::span<const std::byte> bytes, std::string_view who) {
    const auto frame = open_frame(bytes, {"HPSREP", 1, 1, who, "parameter-server reply"});
    byte_reader r(frame.payload, who, "reply");
    reply a;
    const auto status = r.get<std::uint32_t>("the status");
    if (status > static_cast<std::uint32_t>(reply_status::other)) r.fail(hitch::detail::concat("status ", status));
    a.header.status = static_cast<reply_status>(status);
    a.header.version = r.get<std::uint64_t>("the version");
    a.header.staleness = r.get<std::uint64_t>("the staleness");
    a.header.dropped = r.get<std::uint64_t>("the dropped count");
    a.header.elements = r.get<std::uint64_t>("the element count");
    const auto n = r.get<std::uint64_t>("the payload size");
    a.payload = r.take(n, "the payload");
    r.expect_end();
    return a;
}

/// Rethrows a server's error on the worker with the same type.
[[noreturn]] inline void throw_reply_error(reply_status status, std::string message) {
    switch (status) {
        case reply_status::config:
            throw config_error(std::move(message));
        case reply_status::mismatch:
            throw mismatch_error(std::move(message));
        case reply_status::corrupt:
            throw corrupt_message_error(std::move(message));
        default:
            throw error(std::move(message));
    }
}

}  // namespace hitch::sync::detail
