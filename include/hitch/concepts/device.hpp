#pragma once
// hitch::device<D>: where tensors live and how bytes get there. Modelled by hitch::cpu and hitch::cuda::device.
//
//   D::space                          a hitch::memory_space tag (static constexpr)
//   d.allocate_bytes(n) -> void*      n bytes aligned for any element type; throws on failure
//   d.deallocate_bytes(p, n)          frees what allocate_bytes returned
//   d.copy_to_host(dst, src, n)       device -> host
//   d.copy_from_host(dst, src, n)     host -> device
//   d.copy(dst, src, n)               device -> device
//   d.fill_zero(p, n)                 n zero bytes at p (device memory)
//   d.synchronize()                   waits for outstanding work on the device
//   d.name() -> string_view           for messages

#include <concepts>
#include <cstddef>
#include <string_view>

#include "hitch/core/tensor.hpp"

namespace hitch {

template <class D>
concept device_has_memory_space = requires {
    { D::space } -> std::convertible_to<memory_space>;
};

template <class D>
concept device_has_allocation = requires(D& d, void* p, std::size_t n) {
    { d.allocate_bytes(n) } -> std::same_as<void*>;
    d.deallocate_bytes(p, n);
};

template <class D>
concept device_has_copies = requires(D& d, void* dst, const void* src, std::size_t n) {
    d.copy_to_host(dst, src, n);
    d.copy_from_host(dst, src, n);
    d.copy(dst, src, n);
    d.fill_zero(dst, n);
};

template <class D>
concept device_has_synchronize = requires(D& d) { d.synchronize(); };

template <class D>
concept device_has_name = requires(const D& d) {
    { d.name() } -> std::convertible_to<std::string_view>;
};

/// A memory space with allocation, copies and synchronization.
template <class D>
concept device = device_has_memory_space<D> && device_has_allocation<D> && device_has_copies<D> &&
                 device_has_synchronize<D> && device_has_name<D>;

}  // namespace hitch
