#pragma once
// hitch::cpu: host memory. Allocations are 64-byte aligned so vectorised loops and cache lines line up.

#include <cstddef>
#include <cstring>
#include <new>
#include <string_view>

#include "hitch/concepts/device.hpp"

namespace hitch {

class cpu {
public:
    static constexpr std::string_view name = "cpu";
    static constexpr memory_space space = memory_space::host;
    static constexpr std::size_t alignment = 64;

    [[nodiscard]] void* allocate_bytes(std::size_t bytes) {
        return ::operator new(bytes == 0 ? alignment : bytes, std::align_val_t{alignment});
    }
    void deallocate_bytes(void* p, std::size_t /*bytes*/) noexcept {
        ::operator delete(p, std::align_val_t{alignment});
    }
    void copy_to_host(void* dst, const void* src, std::size_t bytes) { copy(dst, src, bytes); }
    void copy_from_host(void* dst, const void* src, std::size_t bytes) { copy(dst, src, bytes); }
    void copy(void* dst, const void* src, std::size_t bytes) {
        if (bytes != 0) std::memmove(dst, src, bytes);
    }
    void fill_zero(void* p, std::size_t bytes) {
        if (bytes != 0) std::memset(p, 0, bytes);
    }
    void synchronize() noexcept {}
};

static_assert(device<cpu>, "hitch::cpu must model hitch::device");

}  // namespace hitch
