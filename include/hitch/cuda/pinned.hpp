#pragma once
// hitch::cuda::pinned_buffer: page-locked host memory (cudaHostAlloc), which the GPU's copy engines read and write
// at full speed and asynchronously; pageable memory is copied through a driver bounce buffer and synchronously.
// Allocated portable (usable by every device and context of the process). Host code (compiles with a C++ compiler
// against the CUDA runtime).

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "hitch/cuda/device.hpp"

namespace hitch::cuda {

class pinned_buffer {
public:
    pinned_buffer() = default;
    explicit pinned_buffer(std::size_t bytes) { reserve(bytes); }
    pinned_buffer(const pinned_buffer&) = delete;
    pinned_buffer& operator=(const pinned_buffer&) = delete;
    pinned_buffer(pinned_buffer&& o) noexcept
        : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    pinned_buffer& operator=(pinned_buffer&& o) noexcept {
        if (this != &o) {
            release();
            data_ = std::exchange(o.data_, nullptr);
            bytes_ = std::exchange(o.bytes_, 0);
        }
        return *this;
    }
    ~pinned_buffer() { release(); }

    [[nodiscard]] std::byte* data() const noexcept { return data_; }
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

    /// At least `bytes` bytes afterwards. Growing drops the contents (the memory is reallocated, not copied);
    /// no copy may be in flight on the old memory.
    void reserve(std::size_t bytes) {
        if (bytes <= bytes_) return;
        release();
        void* p = nullptr;
        detail::check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc");
        data_ = static_cast<std::byte*>(p);
        bytes_ = bytes;
    }
    /// Gives the memory back.
    void release() noexcept {
        if (data_ != nullptr) cudaFreeHost(data_);
        data_ = nullptr;
        bytes_ = 0;
    }

private:
    std::byte* data_ = nullptr;
    std::size_t bytes_ = 0;
};

}  // namespace hitch::cuda
