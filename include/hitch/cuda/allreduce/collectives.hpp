#pragma once
// hitch's collectives on GPU buffers. Include this header and the free functions of hitch/allreduce/collectives.hpp
// (allreduce, reduce_scatter, allgather, broadcast, reduce and their _async forms) take tensor_views of
// memory_space::cuda, with every schedule, reduce op and element type, over every communicator:
//
//   hitch::allreduce::group g(comm);                                     // comm::local threads or comm::mpi
//   hitch::tensor_view<float> grads(device_pointer, n, hitch::memory_space::cuda);
//   hitch::allreduce::allreduce(g, grads, hitch::reduce_op::average, hitch::allreduce::ring{});
//
// Two paths (path.hpp decides, per call, alike on every rank):
//   staged  the buffer is copied into pinned host memory cached by the group, the host schedule runs there, the
//           results are copied back (staged.hpp); a piecewise call larger than device_options::chunk_bytes is cut
//           into pieces whose copies overlap the host schedule's work on the neighbouring pieces
//           (staging_plan.hpp). Works on every communicator.
//   direct  device pointers go to the communicator and the reductions run on the GPU (reduce.cuh): where the
//           communicator carries device memory (a CUDA-aware MPI, detected by cuda_aware.hpp) and the algorithm has
//           a direct form; compiled in by hitch/cuda/allreduce/collectives.cuh (nvcc).
//
// This header is host code (it compiles with a C++ compiler against the CUDA runtime); including it installs the
// backend for memory_space::cuda (allreduce/space.hpp). As with a CUDA-aware MPI, the caller makes sure the writes
// to a buffer are complete before the call (synchronise the stream that wrote it); a blocking call returns, and a
// non-blocking call's handle completes, once the results are in the GPU buffer.

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string_view>

#include "hitch/allreduce/collectives.hpp"
#include "hitch/allreduce/space.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/cuda/allreduce/context.hpp"
#include "hitch/cuda/allreduce/cuda_aware.hpp"
#include "hitch/cuda/allreduce/options.hpp"
#include "hitch/cuda/allreduce/path.hpp"
#include "hitch/cuda/allreduce/staged.hpp"
#include "hitch/cuda/allreduce/staging_plan.hpp"

namespace hitch::cuda::allreduce {

/// Runs the calls that go direct (hitch/cuda/allreduce/direct.cuh installs the one hitch has).
class direct_engine {
public:
    virtual ~direct_engine() = default;
    /// Runs `call` with device pointers handed to `messages`, on the context's GPU (current) and streams.
    virtual void run(const hitch::allreduce::space_call& call, hitch::allreduce::space_messages& messages,
                     device_context& ctx, const device_options& options) = 0;
};

namespace detail {
inline std::atomic<direct_engine*> installed_direct_engine{nullptr};
}  // namespace detail

/// Installs the direct engine (null removes it); returns the one it replaces.
inline direct_engine* install_direct_engine(direct_engine* engine) noexcept {
    return detail::installed_direct_engine.exchange(engine, std::memory_order_acq_rel);
}

/// The value of HITCH_CUDA_AWARE_MPI, absent when unset.
[[nodiscard]] inline std::optional<std::string_view> cuda_aware_environment() noexcept {
    const char* v = std::getenv(cuda_aware_variable.data());
    if (v == nullptr) return std::nullopt;
    return std::string_view(v);
}

/// The backend of memory_space::cuda (see the file comment).
class backend final : public hitch::allreduce::space_backend {
public:
    [[nodiscard]] std::uint64_t plan(const hitch::allreduce::space_call& call) override {
        const device_options o = device_state(*call.slots)->options();
        if (choose(call, o).direct) return direct_fingerprint();
        return make_plan(call, o).fingerprint();
    }

    void run(const hitch::allreduce::space_call& call, const hitch::allreduce::host_runner& host,
             hitch::allreduce::space_messages& messages) override {
        const std::shared_ptr<group_device_state> state = device_state(*call.slots);
        const device_options o = state->options();
        const bool gpu_buffer = call.buffer.space != memory_space::host;
        device_context& ctx = state->context(device_of(gpu_buffer ? call.buffer.data : call.input.data));
        const device_guard guard(ctx.device());
        if (call.size <= 1 && gpu_buffer) {
            // Nothing moves between ranks: every collective leaves the buffer as it is, but allgather's `mine`.
            if (call.input.bytes != 0) {
                const detail::settle_on_exit settle(ctx);
                detail::copy_async(static_cast<std::byte*>(call.buffer.data) + call.input_offset, call.input.data,
                                   call.input.bytes, ctx.copy_in(), "cudaMemcpyAsync (allgather input)");
                detail::check(cudaStreamSynchronize(ctx.copy_in()), "cudaStreamSynchronize");
            }
            return;
        }
        if (choose(call, o).direct) {
            const detail::settle_on_exit settle(ctx);
            detail::installed_direct_engine.load(std::memory_order_acquire)->run(call, messages, ctx, o);
            return;
        }
        run_staged(call, make_plan(call, o), host, ctx);
    }

    /// The path a call takes and why.
    [[nodiscard]] static path_choice choose(const hitch::allreduce::space_call& call, const device_options& o) {
        return choose_path(call, o, cuda_aware_environment(), installed_mpi_cuda_query(),
                           detail::installed_direct_engine.load(std::memory_order_acquire) != nullptr);
    }
    [[nodiscard]] static staging_plan make_plan(const hitch::allreduce::space_call& call, const device_options& o) {
        return staging_plan::make(call.buffer.bytes, call.element_bytes, call.piecewise, call.reads, call.writes, o);
    }
};

/// The one backend of the process.
[[nodiscard]] inline backend& cuda_backend() {
    static backend b;
    return b;
}

namespace detail {
inline const bool backend_installed =
    (hitch::allreduce::set_space_backend(memory_space::cuda, &hitch::cuda::allreduce::cuda_backend()), true);
}  // namespace detail

// ---- per-group settings and reports ----

/// Sets the options of g's calls on GPU buffers (config_error when out of range). Every rank must set the same.
template <communicator C>
void set_options(hitch::allreduce::group<C>& g, const device_options& o) {
    device_state(g.state().slots)->set_options(o);
}

/// The options of g's calls on GPU buffers.
template <communicator C>
[[nodiscard]] device_options options(hitch::allreduce::group<C>& g) {
    return device_state(g.state().slots)->options();
}

/// Pinned host memory g holds for staging (0 before its first staged call).
template <communicator C>
[[nodiscard]] std::size_t pinned_bytes(hitch::allreduce::group<C>& g) {
    return device_state(g.state().slots)->pinned_bytes();
}

/// The path an all-reduce of `bytes` of GPU memory with `schedule` would take on g, and why (for reports).
template <communicator C>
[[nodiscard]] path_choice explain_allreduce(hitch::allreduce::group<C>& g, std::string_view schedule) {
    hitch::allreduce::space_call call =
        hitch::allreduce::detail::space_call_for(g, hitch::allreduce::operation::allreduce, schedule);
    call.buffer.space = memory_space::cuda;
    call.carries = hitch::allreduce::detail::carries_space(g.comm(), memory_space::cuda);
    return backend::choose(call, options(g));
}

}  // namespace hitch::cuda::allreduce
