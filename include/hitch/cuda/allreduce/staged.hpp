#pragma once
// The staged path: a call on GPU buffers runs the host algorithm on pinned host memory, with the copies on the
// group's streams, pipelined per the staging plan (staging_plan.hpp). Host code (compiles with a C++ compiler
// against the CUDA runtime): staging needs no kernel.

#include <cuda_runtime.h>

#include <cstddef>

#include "hitch/allreduce/space.hpp"
#include "hitch/cuda/allreduce/context.hpp"
#include "hitch/cuda/allreduce/staging_plan.hpp"

namespace hitch::cuda::allreduce {

namespace detail {

inline void copy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t stream, std::string_view what) {
    if (bytes == 0) return;
    // cudaMemcpyDefault: the pointers say where they live (unified addressing), so a call may mix host and GPU
    // buffers (allgather of a host `mine` into a GPU `all`).
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), what);
}

/// run_pipeline's streams: the context's copy-in and copy-back streams and its events.
struct cuda_streams {
    device_context& ctx;
    void copy_in(void* dst, const void* src, std::size_t bytes) {
        copy_async(dst, src, bytes, ctx.copy_in(), "cudaMemcpyAsync (staging in)");
    }
    void copy_out(void* dst, const void* src, std::size_t bytes) {
        copy_async(dst, src, bytes, ctx.copy_out(), "cudaMemcpyAsync (staging back)");
    }
    void record_in(int slot) { check(cudaEventRecord(ctx.copied_in(slot), ctx.copy_in()), "cudaEventRecord"); }
    void record_out(int slot) { check(cudaEventRecord(ctx.copied_out(slot), ctx.copy_out()), "cudaEventRecord"); }
    void in_waits_out(int slot) {
        check(cudaStreamWaitEvent(ctx.copy_in(), ctx.copied_out(slot), 0), "cudaStreamWaitEvent");
    }
    void host_waits_in(int slot) { check(cudaEventSynchronize(ctx.copied_in(slot)), "cudaEventSynchronize"); }
    void host_waits_out() { check(cudaStreamSynchronize(ctx.copy_out()), "cudaStreamSynchronize (staging back)"); }
};

/// Synchronises the context's streams when a call leaves early (an error in the host algorithm), so no copy still
/// in flight writes into pinned memory or a GPU buffer after the call has returned.
class settle_on_exit {
public:
    explicit settle_on_exit(device_context& c) noexcept : c_(c) {}
    settle_on_exit(const settle_on_exit&) = delete;
    settle_on_exit& operator=(const settle_on_exit&) = delete;
    ~settle_on_exit() { c_.settle(); }

private:
    device_context& c_;
};

}  // namespace detail

/// Runs `call` staged through the pinned memory of `ctx` (whose GPU must be current) as `plan` says; returns once
/// the results are back in the GPU buffer.
inline void run_staged(const hitch::allreduce::space_call& call, const staging_plan& plan,
                       const hitch::allreduce::host_runner& host, device_context& ctx) {
    const detail::settle_on_exit settle(ctx);
    if (call.buffer.space == memory_space::host) {
        // Only `mine` is on the GPU: it lands in the host buffer and the host algorithm runs there.
        detail::copy_async(static_cast<std::byte*>(call.buffer.data) + call.input_offset, call.input.data,
                           call.input.bytes, ctx.copy_in(), "cudaMemcpyAsync (staged input)");
        detail::check(cudaStreamSynchronize(ctx.copy_in()), "cudaStreamSynchronize");
        host(static_cast<std::byte*>(call.buffer.data), 0, call.buffer.bytes);
        return;
    }
    ctx.pinned().reserve(plan.pinned_bytes());
    ctx.reserve_events(plan.slots());
    detail::cuda_streams streams{ctx};
    run_pipeline(plan, call, host, ctx.pinned().data(), streams);
}

}  // namespace hitch::cuda::allreduce
