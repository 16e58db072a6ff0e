#pragma once
// A stand-in for a CUDA-aware communicator on one GPU: comm::local whose messages may also read from and write into
// GPU memory (carries_device_memory). A send from device memory copies it to the host when posted; a receive into
// device memory lands on the host and is copied up when it completes, so completion means the bytes are in place, as
// with a CUDA-aware MPI. Host memory passes straight through. The GPU tests run the direct path over it.

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/comm/local.hpp"
#include "hitch/concepts/communicator.hpp"

namespace hitch_test {

[[nodiscard]] inline bool on_gpu(const void* p) {
    cudaPointerAttributes a{};
    if (p == nullptr || cudaPointerGetAttributes(&a, p) != cudaSuccess) return false;
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

inline void cuda_or_throw(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

class device_local {
public:
    class request {
    public:
        request() = default;
        request(request&&) noexcept = default;
        request& operator=(request&&) noexcept = default;

        bool test() {
            if (!inner_.test()) return false;
            finish();
            return true;
        }
        void wait() {
            inner_.wait();
            finish();
        }
        void wait(const hitch::deadline& limit) {
            inner_.wait(limit);
            finish();
        }
        [[nodiscard]] hitch::message_info status() const { return inner_.status(); }
        [[nodiscard]] std::string describe() const { return inner_.describe(); }

    private:
        friend class device_local;
        void finish() {
            if (gpu_destination_ != nullptr) {
                cuda_or_throw(cudaMemcpy(gpu_destination_, staging_->data(), staging_->size(), cudaMemcpyHostToDevice),
                              "device_local: copy up");
                gpu_destination_ = nullptr;
            }
        }
        hitch::comm::local::request inner_;
        std::unique_ptr<std::vector<std::byte>> staging_;
        void* gpu_destination_ = nullptr;
    };

    static constexpr std::string_view name = "device_local";

    explicit device_local(hitch::comm::local inner) : inner_(std::move(inner)) {}

    [[nodiscard]] int rank() const noexcept { return inner_.rank(); }
    [[nodiscard]] int size() const noexcept { return inner_.size(); }
    [[nodiscard]] int max_tag() const noexcept { return inner_.max_tag(); }
    [[nodiscard]] hitch::seconds_f timeout() const noexcept { return inner_.timeout(); }
    void set_timeout(hitch::seconds_f t) { inner_.set_timeout(t); }
    void barrier() { inner_.barrier(); }
    [[nodiscard]] device_local split(int color, int key) { return device_local(inner_.split(color, key)); }
    [[nodiscard]] hitch::message_info probe(int peer, int tag) { return inner_.probe(peer, tag); }
    /// Every space: device memory is staged inside the communicator.
    [[nodiscard]] bool carries(hitch::memory_space) const noexcept { return true; }

    template <hitch::element_type T>
    [[nodiscard]] request isend(std::span<const T> data, int peer, int tag) {
        request r;
        if (on_gpu(data.data())) {
            r.staging_ = std::make_unique<std::vector<std::byte>>(data.size_bytes());
            cuda_or_throw(cudaMemcpy(r.staging_->data(), data.data(), data.size_bytes(), cudaMemcpyDeviceToHost),
                          "device_local: copy down");
            r.inner_ = inner_.isend(std::span<const T>(reinterpret_cast<const T*>(r.staging_->data()), data.size()),
                                    peer, tag);
        } else {
            r.inner_ = inner_.isend(data, peer, tag);
        }
        return r;
    }
    template <hitch::element_type T>
    [[nodiscard]] request isend(std::span<T> data, int peer, int tag) {
        return isend(std::span<const T>(data), peer, tag);
    }
    template <hitch::element_type T>
    [[nodiscard]] request irecv(std::span<T> data, int peer, int tag) {
        request r;
        if (on_gpu(data.data())) {
            r.staging_ = std::make_unique<std::vector<std::byte>>(data.size_bytes());
            r.gpu_destination_ = data.data();
            r.inner_ = inner_.irecv(std::span<T>(reinterpret_cast<T*>(r.staging_->data()), data.size()), peer, tag);
        } else {
            r.inner_ = inner_.irecv(data, peer, tag);
        }
        return r;
    }

private:
    hitch::comm::local inner_;
};

static_assert(hitch::communicator<device_local> && hitch::carries_device_memory<device_local>);

}  // namespace hitch_test
