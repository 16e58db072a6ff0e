#pragma once
// hitch::cuda::nccl_backend: what cuda::nccl asks of NCCL, as an interface with no CUDA or NCCL header, so the
// communicator's matching, ordering and deadline logic (cuda/nccl/detail/engine.hpp) compiles and is tested on a
// host without a GPU against a stand-in backend with NCCL's semantics (tests/cuda/comm/fake_nccl.hpp). The backend
// over the real library is cuda/nccl/api_backend.hpp.
//
// A backend is one NCCL communicator and the stream its work runs on. Work is stream-ordered: group(), allreduce()
// and the copies queue behind everything queued before them and run in that order; record() marks the work queued
// so far, and done(ticket) says whether it has all finished (including the host side of copy_to_host). Nothing here
// blocks the calling thread: a backend whose communicator is busy (NCCL's ncclInProgress on a non-blocking
// communicator) keeps the work queued and issues it from later calls.
//
// The semantics cuda::nccl relies on are NCCL's:
//   - a group's sends and receives progress together; groups (and collectives) on one stream run one after the
//     other, so a send or receive may wait for its peer's matching operation for as long as the peer's stream
//     is busy with earlier work;
//   - sends and receives between two ranks are matched in the order each side issued them (per direction), and a
//     matched pair must have the same size;
//   - a collective must be issued by every rank of the communicator, in the same order relative to the other
//     collectives and groups;
//   - an error is reported asynchronously (state() fails) and leaves queued work incomplete; abort() releases
//     everything and makes the backend unusable.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "hitch/core/dtype.hpp"
#include "hitch/core/reduce_op.hpp"

namespace hitch::cuda {

/// One send or receive of a group: `bytes` bytes to or from `peer` (a rank of the backend's communicator).
struct nccl_p2p {
    enum kind_t : std::uint8_t { send, recv };
    kind_t kind = send;
    int peer = 0;
    const void* send_data = nullptr;  // send: memory the backend carries()
    void* recv_data = nullptr;        // recv: memory the backend carries()
    std::size_t bytes = 0;
};

/// What the backend's communicator is doing: created and idle or working (ready), still being created or
/// finishing a call (in_progress: ncclInProgress), or failed (the message says why; the backend is then unusable
/// until abort()).
struct nccl_state {
    enum kind_t : std::uint8_t { ready, in_progress, failed };
    kind_t kind = ready;
    std::string message;
};

/// A point in a backend's stream: done(t) once everything queued before record() returned t has finished.
using nccl_ticket = std::uint64_t;

class nccl_backend {
public:
    nccl_backend() = default;
    nccl_backend(const nccl_backend&) = delete;
    nccl_backend& operator=(const nccl_backend&) = delete;
    virtual ~nccl_backend() = default;

    [[nodiscard]] virtual int rank() const = 0;
    [[nodiscard]] virtual int size() const = 0;
    /// For messages: "NCCL 2.28.9, GPU 0".
    [[nodiscard]] virtual std::string describe() const = 0;

    /// True when sends may read, and receives write, `p` directly (device memory of the communicator's GPU, or
    /// memory mapped for it); other memory is staged through allocate() and the copies.
    [[nodiscard]] virtual bool carries(const void* p) const = 0;

    /// The communicator's state; polls NCCL (ncclCommGetAsyncError) and issues queued work it now accepts.
    [[nodiscard]] virtual nccl_state state() = 0;

    /// Device memory of `bytes` bytes for staging, usable by work queued after this call (stream-ordered).
    [[nodiscard]] virtual void* allocate(std::size_t bytes) = 0;
    /// Frees memory from allocate() once the work queued before this call has finished (stream-ordered).
    virtual void release(void* p) = 0;
    /// Queues a copy of `bytes` bytes from host memory into `device_dst`; the host bytes are read before this
    /// returns (the caller may reuse `host_src` at once).
    virtual void copy_from_host(void* device_dst, const void* host_src, std::size_t bytes) = 0;
    /// Queues a copy of `bytes` bytes from `device_src` into host memory; `host_dst` holds them once a ticket
    /// recorded after this call is done.
    virtual void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes) = 0;
    /// Queues one NCCL group (ncclGroupStart, each ncclSend or ncclRecv in order, ncclGroupEnd).
    virtual void group(std::span<const nccl_p2p> ops) = 0;
    /// Queues ncclAllReduce of `count` elements of `type` (f16, bf16, f32, f64; u8 for max) with `op` (average is
    /// NCCL's ncclAvg). min and max follow NCCL: a NaN operand loses to a number (fminf, fmaxf).
    virtual void allreduce(const void* send, void* recv, std::size_t count, dtype type, reduce_op op) = 0;
    /// Marks the work queued so far.
    [[nodiscard]] virtual nccl_ticket record() = 0;
    /// True once everything queued before record() returned `ticket` has finished.
    [[nodiscard]] virtual bool done(nccl_ticket ticket) = 0;

    /// ncclCommAbort: stops the work in flight, fails what is queued, and makes the backend unusable. Idempotent.
    virtual void abort() noexcept = 0;
    /// Gives the communicator back once its work is done, without blocking: the first call with nothing in flight
    /// starts NCCL's finalize; true once the communicator is destroyed, false while work is still in flight or
    /// being flushed (call again). Nothing may be queued after the first call.
    [[nodiscard]] virtual bool close() = 0;

    /// ncclCommSplit: collective over this communicator's ranks; every rank calls it with its color (>= 0) and
    /// key. The new backend's state() is in_progress until every rank has called it. The ranks of the new one are
    /// ordered by (key, rank in this one).
    [[nodiscard]] virtual std::unique_ptr<nccl_backend> split(int color, int key) = 0;
};

}  // namespace hitch::cuda
