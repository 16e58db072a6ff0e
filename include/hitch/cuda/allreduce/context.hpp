#pragma once
// What the collectives on GPU buffers keep per group and GPU: the cached pinned buffer the staged path passes
// buffers through, two streams (copies in, copies back; the direct path's kernels run on the first), an event per
// pinned slot and direction, and device scratch for the direct path. Host code (compiles with a C++ compiler
// against the CUDA runtime). A group runs one call at a time, so a context is never used by two calls at once.

#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "hitch/allreduce/transport/scratch.hpp"
#include "hitch/cuda/allreduce/options.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/pinned.hpp"

namespace hitch::cuda::allreduce {

namespace detail {
using hitch::cuda::detail::check;
}  // namespace detail

/// Makes `device` current for its lifetime and restores the previous one (the caller's thread, or the group's
/// progress thread, may work on another GPU).
class device_guard {
public:
    explicit device_guard(int device) {
        detail::check(cudaGetDevice(&previous_), "cudaGetDevice");
        if (previous_ != device) detail::check(cudaSetDevice(device), "cudaSetDevice");
    }
    device_guard(const device_guard&) = delete;
    device_guard& operator=(const device_guard&) = delete;
    ~device_guard() {
        int now = previous_;
        if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
    }

private:
    int previous_ = 0;
};

/// The GPU that `pointer` lives on; the current one for host memory and null.
[[nodiscard]] inline int device_of(const void* pointer) {
    cudaPointerAttributes a{};
    if (pointer != nullptr) {  // an empty view may hold no pointer at all
        detail::check(cudaPointerGetAttributes(&a, pointer), "cudaPointerGetAttributes");
        if ((a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) && a.device >= 0) return a.device;
    }
    int current = 0;
    detail::check(cudaGetDevice(&current), "cudaGetDevice");
    return current;
}

/// Per group and GPU: pinned memory, streams, events, device scratch.
class device_context {
public:
    explicit device_context(int device) : device_(device) {
        const device_guard guard(device_);
        // Blocking streams: their copies also wait for work issued earlier on the legacy default stream.
        detail::check(cudaStreamCreateWithFlags(&in_, cudaStreamDefault), "cudaStreamCreateWithFlags");
        detail::check(cudaStreamCreateWithFlags(&out_, cudaStreamDefault), "cudaStreamCreateWithFlags");
    }
    device_context(const device_context&) = delete;
    device_context& operator=(const device_context&) = delete;
    ~device_context() {
        int previous = 0;
        const bool restore = cudaGetDevice(&previous) == cudaSuccess;
        cudaSetDevice(device_);
        for (cudaStream_t s : {in_, out_})
            if (s != nullptr) {
                cudaStreamSynchronize(s);
                cudaStreamDestroy(s);
            }
        for (cudaEvent_t e : copied_in_) cudaEventDestroy(e);
        for (cudaEvent_t e : copied_out_) cudaEventDestroy(e);
        if (scratch_ != nullptr) cudaFree(scratch_);
        pinned_.release();
        if (restore) cudaSetDevice(previous);
    }

    [[nodiscard]] int device() const noexcept { return device_; }
    /// Copies into pinned memory; the direct path's kernels.
    [[nodiscard]] cudaStream_t copy_in() const noexcept { return in_; }
    /// Copies back to the GPU buffer.
    [[nodiscard]] cudaStream_t copy_out() const noexcept { return out_; }
    [[nodiscard]] pinned_buffer& pinned() noexcept { return pinned_; }

    /// Events that mark a slot's copy in and copy back done (at least `slots` of each afterwards).
    void reserve_events(int slots) {
        while (static_cast<int>(copied_in_.size()) < slots) {
            cudaEvent_t a = nullptr, b = nullptr;
            detail::check(cudaEventCreateWithFlags(&a, cudaEventDisableTiming), "cudaEventCreateWithFlags");
            copied_in_.push_back(a);
            detail::check(cudaEventCreateWithFlags(&b, cudaEventDisableTiming), "cudaEventCreateWithFlags");
            copied_out_.push_back(b);
        }
    }
    [[nodiscard]] cudaEvent_t copied_in(int slot) const { return copied_in_.at(static_cast<std::size_t>(slot)); }
    [[nodiscard]] cudaEvent_t copied_out(int slot) const { return copied_out_.at(static_cast<std::size_t>(slot)); }

    /// Device memory of at least `bytes` bytes, kept for later calls; nothing may use the previous scratch.
    [[nodiscard]] void* scratch(std::size_t bytes) {
        if (bytes > scratch_bytes_) {
            if (scratch_ != nullptr) {
                detail::check(cudaStreamSynchronize(in_), "cudaStreamSynchronize");
                detail::check(cudaFree(scratch_), "cudaFree");
                scratch_ = nullptr;
                scratch_bytes_ = 0;
            }
            detail::check(cudaMalloc(&scratch_, bytes), "cudaMalloc");
            scratch_bytes_ = bytes;
        }
        return scratch_;
    }

    /// Waits for both streams, ignoring errors: after a call failed, before its memory is reused.
    void settle() noexcept {
        cudaStreamSynchronize(in_);
        cudaStreamSynchronize(out_);
    }

private:
    int device_;
    cudaStream_t in_ = nullptr;
    cudaStream_t out_ = nullptr;
    std::vector<cudaEvent_t> copied_in_;
    std::vector<cudaEvent_t> copied_out_;
    pinned_buffer pinned_;
    void* scratch_ = nullptr;
    std::size_t scratch_bytes_ = 0;
};

/// What a group keeps for its calls on GPU buffers: the options and a context per GPU (in the group's slot_store).
class group_device_state {
public:
    [[nodiscard]] device_options options() const {
        std::lock_guard lock(m_);
        return options_;
    }
    void set_options(const device_options& o) {
        o.validate();
        std::lock_guard lock(m_);
        options_ = o;
    }
    [[nodiscard]] device_context& context(int device) {
        std::lock_guard lock(m_);
        auto& c = contexts_[device];
        if (!c) c = std::make_unique<device_context>(device);
        return *c;
    }
    /// Pinned bytes held (for tests and diagnostics).
    [[nodiscard]] std::size_t pinned_bytes() const {
        std::lock_guard lock(m_);
        std::size_t total = 0;
        for (const auto& [device, c] : contexts_) total += c->pinned().bytes();
        return total;
    }

private:
    mutable std::mutex m_;
    device_options options_{};
    std::map<int, std::unique_ptr<device_context>> contexts_;
};

inline constexpr hitch::allreduce::slot_key<group_device_state> device_state_slot{"hitch.cuda.allreduce"};

/// The group's state for GPU buffers, made on first use.
[[nodiscard]] inline std::shared_ptr<group_device_state> device_state(hitch::allreduce::slot_store& slots) {
    return slots.get_or_make(device_state_slot, [] { return std::make_shared<group_device_state>(); });
}

}  // namespace hitch::cuda::allreduce
