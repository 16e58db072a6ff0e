#pragma once
// hitch::cuda::nccl, a hitch::communicator over NCCL, bootstrapped over comm::mpi (one rank per process) or
// comm::local (one rank per thread), or any communicator with a non-blocking probe. Link hitch::nccl.
//
//   hitch::comm::mpi world;                                  // or comm::local, one rank per thread
//   hitch::cuda::nccl comm = hitch::cuda::nccl_over(world);  // collective; rank r takes GPU local_rank % GPUs
//   comm.isend(std::span<const float>(device_ptr, n), 1, 0).wait();
//   hitch::allreduce::group g(comm);
//   hitch::allreduce::allreduce(g, hitch::view(host_grads), reduce_op::average, hitch::allreduce::native{});
//
// Design (the details are in cuda/nccl/detail/engine.hpp):
//   - Device buffers move with ncclSend/ncclRecv in ncclGroupStart/End on the communicator's own stream. NCCL has
//     no tags, no probe, no any_source and matches transfers in issue order per pair, so every message is announced
//     on a control channel (a private duplicate of the bootstrap communicator: tag, type, size, sequence number);
//     the receiver matches announcements as MPI does, checks the size (a wrong size is comm_error on the receiver,
//     before a byte moves), and the two ranks agree on a slot for the transfer. Each rank issues its slots in
//     increasing order, so NCCL operations can never wait on each other in a cycle, whatever order the program
//     posts and waits its requests in.
//   - Host buffers travel inline on the control channel, or over NCCL through device staging from
//     nccl_options::stage_host_bytes up; probe and any_source work for both.
//   - Deadlines: every wait polls the control channel, ncclCommGetAsyncError and CUDA events against its deadline,
//     and nothing blocks the thread (a non-blocking NCCL communicator; copies through page-locked bounce buffers;
//     stream-ordered allocation). A request not yet handed to NCCL is withdrawn at its deadline and the
//     communicator goes on; once NCCL has it, the deadline aborts the communicator (ncclCommAbort) and
//     timeout_error names the operation, its message number and the peer. NCCL errors become comm_error with
//     ncclGetErrorString and ncclGetLastError's text. An aborted rank tells the others, which abort too.
//   - split(color, key) is ncclCommSplit (after the colors are exchanged on the control channel, so a rank that
//     does not come is named); allreduce::native is ncclAllReduce (hitch/cuda/nccl/native.hpp) and automatic weighs
//     it.
//   - One GPU per rank: NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU detected",
//     ncclInvalidUsage, reported here as comm_error at creation).

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/comm/local.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/error.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/nccl/api_backend.hpp"
#include "hitch/cuda/nccl/communicator.hpp"
#include "hitch/cuda/nccl/control.hpp"
#include "hitch/cuda/nccl/native.hpp"
#include "hitch/cuda/nccl/options.hpp"

namespace hitch::cuda {

/// The GPUs this process can use (0 without a driver or device).
[[nodiscard]] inline int device_count() noexcept {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return count;
}

/// The GPU rank `rank` of `bootstrap` takes: options.device when set, else its place on its node modulo the GPUs.
template <control_communicator C>
[[nodiscard]] int nccl_device_for(C& bootstrap, const nccl_options& options) {
    const int count = device_count();
    if (count == 0) throw cuda_error("hitch::cuda::nccl: no CUDA device is present");
    if (options.device >= count)
        throw config_error(hitch::detail::concat("hitch::cuda::nccl_options: option device = ", options.device,
                                                 " is outside the allowed range [-1, ", count, ")"));
    return options.device >= 0 ? options.device : local_rank(bootstrap) % count;
}

/// A cuda::nccl over the ranks of `bootstrap` (collective: every rank calls it). Rank 0 makes NCCL's unique id
/// and sends it to every rank over a private duplicate of `bootstrap`, which then carries the control channel;
/// each rank creates its NCCL communicator on its GPU (nccl_device_for) without blocking, and the call returns once
/// every rank's is ready, or throws timeout_error (naming the ranks that never came) or comm_error (NCCL's reason:
/// two ranks on one GPU, for example) within options.timeout_s.
template <control_communicator C>
[[nodiscard]] nccl nccl_over(C& bootstrap, const nccl_options& options = {}) {
    options.validate();
    const deadline limit(seconds_f(options.timeout_s));
    C dup = bootstrap.split(0, bootstrap.rank());
    const int device = nccl_device_for(dup, options);
    detail::check(cudaSetDevice(device), "cudaSetDevice");
    ncclUniqueId id{};
    const auto bytes = std::as_writable_bytes(std::span<ncclUniqueId>(&id, 1));
    constexpr int id_tag = 2;  // the control channel takes tag 1 on the same duplicate
    if (dup.rank() == 0) {
        const ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess)
            throw comm_error("hitch::cuda::nccl: ncclGetUniqueId failed: " + detail::nccl_text(r, nullptr));
        std::vector<typename C::request> sends;
        for (int peer = 1; peer < dup.size(); ++peer)
            sends.push_back(dup.isend(std::span<const std::byte>(bytes.data(), bytes.size()), peer, id_tag));
        for (auto& s : sends) s.wait(limit);
    } else {
        auto r = dup.irecv(bytes, 0, id_tag);
        try {
            r.wait(limit);
        } catch (const timeout_error&) {
            throw timeout_error("cuda::nccl creation",
                                hitch::detail::concat("rank ", dup.rank(), " of ", dup.size(), " over ", C::name,
                                                      ": NCCL's unique id never came"),
                                limit.waited(), "rank 0 did not arrive");
        }
    }
    auto backend = std::make_unique<nccl_api_backend>(device, dup.size(), dup.rank(), id);
    auto control = std::make_unique<control_over<C>>(std::move(dup));
    nccl_options rest = options;
    rest.timeout_s = std::max(limit.length().count() - limit.waited().count(), 1e-3);
    nccl made(std::move(backend), std::move(control), rest);
    made.set_timeout(seconds_f(options.timeout_s));
    return made;
}

/// Runs fn(comm) on `ranks` threads of this process, each a cuda::nccl rank bootstrapped over comm::local (rank r
/// on GPU r modulo the GPUs, unless options.device says otherwise: NCCL needs one GPU per rank); if a rank throws,
/// the others are released and the first error is rethrown here (comm::run_local's rules).
template <class F>
auto run_nccl_local(int ranks, F&& fn, const nccl_options& options = {}) {
    comm::local_options local;
    local.timeout_s = options.timeout_s;
    return comm::run_local(
        ranks,
        [&](comm::local& c) {
            nccl made = nccl_over(c, options);
            return fn(made);
        },
        local);
}

}  // namespace hitch::cuda
