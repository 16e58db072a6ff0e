#pragma once
// hitch::device<D>: where tensors live and how bytes get there. Modelled by hitch::cpu and hitch::cuda::device.
//
//   D::name                           static constexpr std::string_view: for messages ("cpu", "cuda")
//   D::space                          a hitch::memory_space tag (static constexpr)
//   d.allocate_bytes(n) -> void*      n bytes aligned for any element type; throws on failure
//   d.deallocate_bytes(p, n)          frees what allocate_bytes returned
//   d.copy_to_host(dst, src, n)       device -> host
//   d.copy_from_host(dst, src, n)     host -> device
//   d.copy(dst, src, n)               device -> device
//   d.fill_zero(p, n)                 n zero bytes at p (device memory)
//   d.synchronize()                   waits for outstanding work on the device
//
// host_device<D> is a device whose memory the host reads directly; host_device_archetype is the stand-in the
// floor checks host-side concepts against (optimizer<O> is optimizer_on<O, host_device_archetype>), so no concept
// header depends on a real device.

#include <concepts>
#include <cstddef>
#include <string_view>

#include "hitch/core/tensor.hpp"

namespace hitch {

template <class D>
concept device_has_name = requires {
    { D::name } -> std::convertible_to<std::string_view>;
};

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

/// A memory space with allocation, copies and synchronization.
template <class D>
concept device = device_has_name<D> && device_has_memory_space<D> && device_has_allocation<D> && device_has_copies<D> &&
                 device_has_synchronize<D>;

/// A device whose memory the host reads and writes directly.
template <class D>
concept host_device = device<D> && (D::space == memory_space::host);

/// The host device the concept floor checks against; it never allocates (concepts only ask what it can do).
struct host_device_archetype {
    static constexpr std::string_view name = "host-archetype";
    static constexpr memory_space space = memory_space::host;
    void* allocate_bytes(std::size_t);
    void deallocate_bytes(void*, std::size_t) noexcept;
    void copy_to_host(void*, const void*, std::size_t);
    void copy_from_host(void*, const void*, std::size_t);
    void copy(void*, const void*, std::size_t);
    void fill_zero(void*, std::size_t);
    void synchronize();
};

/// Returns true when D models device; otherwise fails to compile with one sentence naming the first requirement D
/// misses and what to write. Use it where a user's device first meets hitch: `static_assert(check_device<D>());`.
template <class D>
consteval bool check_device() {
    if constexpr (!device_has_name<D>) {
        static_assert(device_has_name<D>,
                      "hitch::device: the device type has no name: add "
                      "`static constexpr std::string_view name = \"my_device\";`");
    } else if constexpr (!device_has_memory_space<D>) {
        static_assert(device_has_memory_space<D>,
                      "hitch::device: the device type has no memory space: add "
                      "`static constexpr hitch::memory_space space = "
                      "hitch::memory_space::host;` (or ::cuda)");
    } else if constexpr (!device_has_allocation<D>) {
        static_assert(device_has_allocation<D>,
                      "hitch::device: the device type cannot allocate: add "
                      "`void* allocate_bytes(std::size_t n)` and "
                      "`void deallocate_bytes(void* p, std::size_t n)`");
    } else if constexpr (!device_has_copies<D>) {
        static_assert(device_has_copies<D>,
                      "hitch::device: the device type cannot copy: add "
                      "`copy_to_host(dst, src, n)`, `copy_from_host(dst, src, n)`, "
                      "`copy(dst, src, n)` and `fill_zero(p, n)`");
    } else if constexpr (!device_has_synchronize<D>) {
        static_assert(device_has_synchronize<D>,
                      "hitch::device: the device type cannot synchronize: add "
                      "`void synchronize()`");
    }
    return true;
}

static_assert(device<host_device_archetype>);

}  // namespace hitch
