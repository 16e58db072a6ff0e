#pragma once
// The plan of a staged call: how a buffer in GPU memory is cut into pieces that pass through pinned host memory, and
// which copies each piece needs. Plain host code (no CUDA header), so the host tests check it without a GPU.
//
// A call is one piece unless it is piecewise (all-reduce, broadcast: the host algorithm on each piece gives the
// result on the whole) and larger than chunk_bytes. One piece is staged whole: copy in what the rank reads, run the
// host algorithm on the whole buffer (the same messages as on a host buffer: ranks with host and GPU buffers can
// meet in one call), copy back what it writes. Pieces cycle through `slots` pieces of pinned memory:
//
//   copy in piece i    into slot i % slots, once the copy back of piece i - slots (the slot's last user) is done
//   host algorithm     on piece i, once its copy in is done (while piece i+1 is copied in, piece i-1 copied back)
//   copy back piece i  from slot i % slots
//
// Each piece is a whole number of elements; all pieces but the last hold chunk_bytes rounded down to whole
// elements. Ranks must cut alike (the same messages follow from the same cut): the plan's fingerprint, 0 for one
// piece, joins the call's agreement check. run_pipeline() is that loop over any two ordered streams of copies with
// events (CUDA streams in staged.hpp; a simulation that runs them in every order the events allow in the tests).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hitch/allreduce/space.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/hash.hpp"
#include "hitch/cuda/allreduce/options.hpp"

namespace hitch::cuda::allreduce {

using hitch::allreduce::byte_range;

/// The part of `r` inside [offset, offset + bytes), relative to `offset`; empty when they do not meet.
[[nodiscard]] constexpr byte_range clip(const byte_range& r, std::size_t offset, std::size_t bytes) noexcept {
    const std::size_t lo = std::max(r.offset, offset);
    const std::size_t hi = std::min(r.offset + r.bytes, offset + bytes);
    return hi > lo ? byte_range{lo - offset, hi - lo} : byte_range{0, 0};
}

/// One piece of a staged call.
struct staging_piece {
    std::size_t offset = 0;       ///< first byte of the piece in the buffer
    std::size_t bytes = 0;        ///< its length
    int slot = 0;                 ///< the slot of pinned memory it passes through
    std::size_t slot_offset = 0;  ///< where that slot starts in the pinned buffer
    byte_range copy_in{};         ///< what is copied into the slot, relative to the piece
    byte_range copy_out{};        ///< what is copied back from the slot, relative to the piece
    /// The piece whose copy back must finish before this piece's copy in may start (the slot's last user), or -1.
    long long waits_for = -1;
    friend bool operator==(const staging_piece&, const staging_piece&) = default;
};

class staging_plan {
public:
    /// The plan of a call on `bytes` bytes of `element_bytes`-byte elements that reads `reads` and writes `writes`.
    [[nodiscard]] static staging_plan make(std::size_t bytes, std::size_t element_bytes, bool piecewise,
                                           byte_range reads, byte_range writes, const device_options& o) {
        if (element_bytes == 0 || bytes % element_bytes != 0)
            throw config_error(hitch::detail::concat("hitch::cuda::allreduce::staging_plan: ", bytes,
                                                     " bytes is not a whole number of ", element_bytes,
                                                     "-byte elements"));
        staging_plan p;
        p.bytes_ = bytes;
        p.reads_ = reads;
        p.writes_ = writes;
        const std::size_t chunk = o.chunk_bytes / element_bytes * element_bytes;
        if (piecewise && chunk != 0 && bytes > chunk) {
            p.chunk_ = chunk;
            p.pieces_ = (bytes + chunk - 1) / chunk;
            p.slots_ = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(o.slots), p.pieces_));
        } else {
            p.chunk_ = bytes;
            p.pieces_ = 1;
            p.slots_ = 1;
        }
        return p;
    }

    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
    /// Pieces of the call (1 for an empty buffer: the host algorithm still runs, with its messages of 0 bytes).
    [[nodiscard]] std::size_t pieces() const noexcept { return pieces_; }
    [[nodiscard]] int slots() const noexcept { return slots_; }
    /// Bytes of a full piece (the buffer's for one piece).
    [[nodiscard]] std::size_t chunk_bytes() const noexcept { return chunk_; }
    /// Pinned memory the call needs.
    [[nodiscard]] std::size_t pinned_bytes() const noexcept { return static_cast<std::size_t>(slots_) * chunk_; }
    [[nodiscard]] bool pipelined() const noexcept { return pieces_ > 1; }

    [[nodiscard]] staging_piece piece(std::size_t i) const {
        if (i >= pieces_)
            throw config_error(hitch::detail::concat("hitch::cuda::allreduce::staging_plan::piece: ", i,
                                                     " is outside the allowed range [0, ", pieces_, ")"));
        staging_piece s;
        s.offset = i * chunk_;
        s.bytes = std::min(chunk_, bytes_ - s.offset);
        s.slot = static_cast<int>(i % static_cast<std::size_t>(slots_));
        s.slot_offset = static_cast<std::size_t>(s.slot) * chunk_;
        s.copy_in = clip(reads_, s.offset, s.bytes);
        s.copy_out = clip(writes_, s.offset, s.bytes);
        s.waits_for = i >= static_cast<std::size_t>(slots_) ? static_cast<long long>(i) - slots_ : -1;
        return s;
    }

    /// What the ranks must agree on beyond the host call: 0 for one piece (the host call's messages), else the cut.
    [[nodiscard]] std::uint64_t fingerprint() const noexcept {
        if (pieces_ <= 1) return 0;
        std::uint64_t h = fnv1a(std::string_view("hitch.cuda.staged"));
        for (std::uint64_t v : {static_cast<std::uint64_t>(chunk_), static_cast<std::uint64_t>(pieces_)})
            for (int b = 0; b < 8; ++b) {
                h ^= (v >> (8 * b)) & 0xffu;
                h *= fnv1a_prime;
            }
        return h == 0 ? 1 : h;
    }

private:
    std::size_t bytes_ = 0;
    std::size_t chunk_ = 0;
    std::size_t pieces_ = 1;
    int slots_ = 1;
    byte_range reads_{};
    byte_range writes_{};
};

/// The staged loop of `plan` (see the file comment): `pinned` holds plan.pinned_bytes(); `streams` runs copies in
/// order on two streams and has events per slot:
///   copy_in(dst, src, bytes), record_in(slot)      on the copy-in stream
///   copy_out(dst, src, bytes), record_out(slot)    on the copy-back stream
///   in_waits_out(slot)     the copy-in stream waits for the slot's last record_out
///   host_waits_in(slot)    the host waits for the slot's last record_in
///   host_waits_out()       the host waits for everything on the copy-back stream
/// `host` runs the host algorithm on a piece. call.input (allgather's `mine`) is copied with the first piece.
template <class Streams>
void run_pipeline(const staging_plan& plan, const hitch::allreduce::space_call& call,
                  const hitch::allreduce::host_runner& host, std::byte* pinned, Streams& streams) {
    auto* buffer = static_cast<std::byte*>(call.buffer.data);
    const std::size_t pieces = plan.pieces();
    const auto stage_in = [&](std::size_t i) {
        const staging_piece s = plan.piece(i);
        if (s.waits_for >= 0) streams.in_waits_out(s.slot);  // the slot's last piece must be back first
        if (s.copy_in.bytes != 0)
            streams.copy_in(pinned + s.slot_offset + s.copy_in.offset, buffer + s.offset + s.copy_in.offset,
                            s.copy_in.bytes);
        if (i == 0 && call.input.bytes != 0)
            streams.copy_in(pinned + call.input_offset, static_cast<const std::byte*>(call.input.data),
                            call.input.bytes);
        streams.record_in(s.slot);
    };
    const std::size_t ahead = std::min<std::size_t>(pieces, static_cast<std::size_t>(plan.slots()));
    for (std::size_t i = 0; i < ahead; ++i) stage_in(i);
    for (std::size_t i = 0; i < pieces; ++i) {
        const staging_piece s = plan.piece(i);
        streams.host_waits_in(s.slot);
        host(pinned + s.slot_offset, s.offset, s.bytes);
        if (s.copy_out.bytes != 0)
            streams.copy_out(buffer + s.offset + s.copy_out.offset, pinned + s.slot_offset + s.copy_out.offset,
                             s.copy_out.bytes);
        streams.record_out(s.slot);
        if (i + ahead < pieces) stage_in(i + ahead);
    }
    streams.host_waits_out();
}

}  // namespace hitch::cuda::allreduce
