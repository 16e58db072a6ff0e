#pragma once
// The device-side tables of a fused step (hitch/cuda/optim/multi_tensor.hpp), made once per model, and the
// per-layer scalars of each step, written by the host into page-locked memory and copied to the GPU on the
// device's stream (no synchronisation on the way: a step waits only if the previous step's copy has not run yet).
// nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/optim/detail/tables.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "hitch/cuda/device.hpp"
#include "hitch/cuda/optim/detail/kernels.cuh"
#include "hitch/cuda/optim/multi_tensor.hpp"
#include "hitch/device/buffer.hpp"

namespace hitch::cuda::optim::detail {

/// n rows of T rewritten by the host before each launch that reads them: page-locked host rows, their device copy,
/// and an event that says when the last copy has run (so the host rows may be rewritten).
template <class T>
class staged_rows {
public:
    staged_rows() = default;
    staged_rows(cuda::device& dev, std::size_t n) : device_rows_(dev, n), size_(n) {
        if (n == 0) return;
        void* p = nullptr;
        check(cudaMallocHost(&p, n * sizeof(T)), "cudaMallocHost");
        host_ = static_cast<T*>(p);
        check(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
    staged_rows(const staged_rows&) = delete;
    staged_rows& operator=(const staged_rows&) = delete;
    staged_rows(staged_rows&& o) noexcept
        : device_rows_(std::move(o.device_rows_)),
          host_(std::exchange(o.host_, nullptr)),
          copied_(std::exchange(o.copied_, nullptr)),
          size_(std::exchange(o.size_, 0)),
          pending_(std::exchange(o.pending_, false)) {}
    staged_rows& operator=(staged_rows&& o) noexcept {
        if (this != &o) {
            release();
            device_rows_ = std::move(o.device_rows_);
            host_ = std::exchange(o.host_, nullptr);
            copied_ = std::exchange(o.copied_, nullptr);
            size_ = std::exchange(o.size_, 0);
            pending_ = std::exchange(o.pending_, false);
        }
        return *this;
    }
    ~staged_rows() { release(); }

    /// The host rows, once the previous copy has run.
    [[nodiscard]] T* begin_write() {
        if (pending_) check(cudaEventSynchronize(copied_), "cudaEventSynchronize");
        pending_ = false;
        return host_;
    }
    /// Copies the host rows to the device on `stream`; returns the device rows.
    [[nodiscard]] const T* upload(cudaStream_t stream) {
        if (size_ == 0) return device_rows_.data();
        check(cudaMemcpyAsync(device_rows_.data(), host_, size_ * sizeof(T), cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync H2D (optimizer scalars)");
        check(cudaEventRecord(copied_, stream), "cudaEventRecord");
        pending_ = true;
        return device_rows_.data();
    }

private:
    void release() noexcept {
        if (copied_ != nullptr) {
            if (pending_) cudaEventSynchronize(copied_);  // the copy reads host_: let it finish first
            cudaEventDestroy(copied_);
        }
        if (host_ != nullptr) cudaFreeHost(host_);
        copied_ = nullptr;
        host_ = nullptr;
    }

    device_buffer<T, cuda::device> device_rows_;
    T* host_ = nullptr;
    cudaEvent_t copied_ = nullptr;
    std::size_t size_ = 0;
    bool pending_ = false;
};

/// The tensor and chunk tables of a model in device memory, and (for the layer-wise rules) room for the partial
/// sums of every chunk, each layer's sums and each layer's gradient scale.
class fused_tables {
public:
    fused_tables() = default;
    fused_tables(cuda::device& dev, std::vector<tensor_entry> rows, bool with_sums)
        : dev_(&dev), rows_(std::move(rows)) {
        std::vector<std::size_t> sizes;
        sizes.reserve(rows_.size());
        for (const tensor_entry& r : rows_) sizes.push_back(static_cast<std::size_t>(r.n));
        const chunk_layout layout = make_chunk_layout(sizes);
        for (std::size_t i = 0; i < rows_.size(); ++i) rows_[i].first_chunk = layout.first_chunk[i];
        chunk_count_ = layout.chunks.size();
        tensors_ = device_buffer<tensor_entry, cuda::device>(dev, rows_.size());
        dev.copy_from_host(tensors_.data(), rows_.data(), rows_.size() * sizeof(tensor_entry));
        chunks_ = device_buffer<chunk_entry, cuda::device>(dev, layout.chunks.size());
        dev.copy_from_host(chunks_.data(), layout.chunks.data(), layout.chunks.size() * sizeof(chunk_entry));
        if (with_sums) {
            partial_ = device_buffer<double, cuda::device>(dev, 2 * layout.chunks.size());
            sums_ = device_buffer<double, cuda::device>(dev, 2 * rows_.size());
            scales_ = device_buffer<float, cuda::device>(dev, rows_.size());
        }
    }

    /// Row i points somewhere else now (same size).
    void rebind(std::size_t i, tensor_entry row) {
        row.first_chunk = rows_.at(i).first_chunk;
        rows_[i] = row;
        dev_->copy_from_host(tensors_.data() + i, &rows_[i], sizeof(tensor_entry));
    }

    [[nodiscard]] cuda::device& device() const noexcept { return *dev_; }
    [[nodiscard]] std::size_t size() const noexcept { return rows_.size(); }
    [[nodiscard]] table_chunks chunks() const noexcept { return {chunks_.data(), tensors_.data(), chunk_count_}; }
    [[nodiscard]] table_tensors tensors() const noexcept {
        return {tensors_.data(), static_cast<std::uint32_t>(rows_.size())};
    }
    [[nodiscard]] double* partial() const noexcept { return partial_.data(); }
    [[nodiscard]] double* sums() const noexcept { return sums_.data(); }
    [[nodiscard]] float* scales() const noexcept { return scales_.data(); }

private:
    cuda::device* dev_ = nullptr;
    std::vector<tensor_entry> rows_;
    device_buffer<tensor_entry, cuda::device> tensors_;
    device_buffer<chunk_entry, cuda::device> chunks_;
    device_buffer<double, cuda::device> partial_, sums_;
    device_buffer<float, cuda::device> scales_;
    std::uint64_t chunk_count_ = 0;
};

}  // namespace hitch::cuda::optim::detail
