#pragma once
// GPU memory for the GPU tests of the collectives: a buffer uploaded from and downloaded to host vectors, and its
// tensor_view in memory_space::cuda.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "hitch/core/tensor.hpp"

namespace hitch_test {

template <class T>
class gpu_buffer {
public:
    explicit gpu_buffer(std::size_t n) : n_(n) {
        check(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc");
        check(cudaMemset(p_, 0xff, std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMemset");
    }
    explicit gpu_buffer(const std::vector<T>& v) : gpu_buffer(v.size()) { upload(v); }
    gpu_buffer(const gpu_buffer&) = delete;
    gpu_buffer& operator=(const gpu_buffer&) = delete;
    ~gpu_buffer() { cudaFree(p_); }

    void upload(const std::vector<T>& v) {
        if (v.size() != n_) throw std::runtime_error("gpu_buffer::upload: wrong size");
        check(cudaMemcpy(p_, v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "upload");
    }
    [[nodiscard]] std::vector<T> download() const {
        std::vector<T> v(n_);
        check(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
        return v;
    }
    [[nodiscard]] T* data() const noexcept { return p_; }
    [[nodiscard]] std::size_t size() const noexcept { return n_; }
    [[nodiscard]] hitch::tensor_view<T> view() const noexcept { return {p_, n_, hitch::memory_space::cuda}; }
    [[nodiscard]] hitch::tensor_view<const T> const_view() const noexcept {
        return {p_, n_, hitch::memory_space::cuda};
    }

private:
    static void check(cudaError_t e, const char* what) {
        if (e != cudaSuccess)
            throw std::runtime_error(std::string("gpu_buffer: ") + what + ": " + cudaGetErrorString(e));
    }
    T* p_ = nullptr;
    std::size_t n_;
};

}  // namespace hitch_test
