#pragma once
// hitch::cuda::device: CUDA device memory on one GPU and one stream. Host code (compiles with a C++ compiler
// against the CUDA runtime).

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "hitch/concepts/device.hpp"
#include "hitch/core/error.hpp"

namespace hitch::cuda {

namespace detail {
inline void check(cudaError_t code, std::string_view call) {
    if (code != cudaSuccess)
        throw cuda_error(hitch::detail::concat("hitch::cuda: ", call, " failed: ", cudaGetErrorName(code), ": ",
                                               cudaGetErrorString(code)));
}
}  // namespace detail

/// True when at least one CUDA device can be used by this process.
[[nodiscard]] inline bool available() noexcept {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky error left by a missing driver
        return false;
    }
    return count > 0;
}

/// One GPU and a stream on it. Allocation is stream-ordered (cudaMallocAsync); copies are asynchronous on the
/// stream except the device-to-host copy, which synchronizes so the host can read the result.
class device {
public:
    static constexpr std::string_view name = "cuda";
    static constexpr memory_space space = memory_space::cuda;

    explicit device(int ordinal = 0) : ordinal_(ordinal) {
        int count = 0;
        detail::check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
        if (ordinal < 0 || ordinal >= count)
            throw config_error(hitch::detail::concat("hitch::cuda::device: option ordinal = ", ordinal,
                                                     " is outside the allowed range [0, ", count, ")"));
        detail::check(cudaSetDevice(ordinal_), "cudaSetDevice");
        detail::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    }
    device(const device&) = delete;
    device& operator=(const device&) = delete;
    ~device() {
        if (stream_ != nullptr) {
            cudaStreamSynchronize(stream_);
            cudaStreamDestroy(stream_);
        }
    }

    [[nodiscard]] void* allocate_bytes(std::size_t bytes) {
        void* p = nullptr;
        activate();
        detail::check(cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, stream_), "cudaMallocAsync");
        return p;
    }
    void deallocate_bytes(void* p, std::size_t /*bytes*/) noexcept {
        if (p != nullptr) cudaFreeAsync(p, stream_);
    }
    void copy_to_host(void* dst, const void* src, std::size_t bytes) {
        if (bytes == 0) return;
        activate();
        detail::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync D2H");
        synchronize();
    }
    void copy_from_host(void* dst, const void* src, std::size_t bytes) {
        if (bytes == 0) return;
        activate();
        detail::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync H2D");
        // The host buffer may be reused as soon as this returns.
        synchronize();
    }
    void copy(void* dst, const void* src, std::size_t bytes) {
        if (bytes == 0) return;
        activate();
        detail::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync D2D");
    }
    void fill_zero(void* p, std::size_t bytes) {
        if (bytes == 0) return;
        activate();
        detail::check(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemsetAsync");
    }
    void synchronize() { detail::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

    [[nodiscard]] int ordinal() const noexcept { return ordinal_; }
    [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }

private:
    void activate() { detail::check(cudaSetDevice(ordinal_), "cudaSetDevice"); }
    int ordinal_ = 0;
    cudaStream_t stream_ = nullptr;
};

static_assert(hitch::device<device>, "hitch::cuda::device must model hitch::device");

}  // namespace hitch::cuda
