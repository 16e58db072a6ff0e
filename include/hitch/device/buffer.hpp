#pragma once
// hitch::device_buffer<T, D>: an owning, move-only array of T in a device's memory, zero-initialised.

#include <cstddef>
#include <utility>

#include "hitch/concepts/device.hpp"
#include "hitch/core/tensor.hpp"

namespace hitch {

template <class T, device D>
class device_buffer {
public:
    device_buffer() = default;
    device_buffer(D& dev, std::size_t count) : device_(&dev), size_(count) {
        if (count != 0) {
            data_ = static_cast<T*>(dev.allocate_bytes(count * sizeof(T)));
            dev.fill_zero(data_, count * sizeof(T));
        }
    }
    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;
    device_buffer(device_buffer&& other) noexcept
        : device_(other.device_), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
    device_buffer& operator=(device_buffer&& other) noexcept {
        if (this != &other) {
            release();
            device_ = other.device_;
            data_ = std::exchange(other.data_, nullptr);
            size_ = std::exchange(other.size_, 0);
        }
        return *this;
    }
    ~device_buffer() { release(); }

    [[nodiscard]] T* data() const noexcept { return data_; }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    [[nodiscard]] tensor_view<T> view() const noexcept { return {data_, size_, D::space}; }
    /// The device the buffer was made on (null for a default-constructed buffer), e.g. for its stream.
    [[nodiscard]] D* device() const noexcept { return device_; }

private:
    void release() noexcept {
        if (data_ != nullptr) device_->deallocate_bytes(data_, size_ * sizeof(T));
        data_ = nullptr;
    }
    D* device_ = nullptr;
    T* data_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace hitch
