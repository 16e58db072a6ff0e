#pragma once
// Tensor views: a pointer, an element count and the memory space the pointer lives in. Views never own memory
// and never copy; they are built from std::vector, std::span, xtensor containers or a raw pointer.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"

namespace hitch {

/// Where a pointer can be dereferenced.
enum class memory_space : std::uint8_t { host = 0, cuda = 1 };

[[nodiscard]] constexpr std::string_view name(memory_space s) noexcept {
    return s == memory_space::host ? "host" : "cuda";
}

namespace detail {

/// A container that exposes contiguous storage through data() and size() (std::vector, std::array, xtensor
/// containers). Containers that may be strided report it through is_contiguous(), checked at run time.
template <class C, class T>
concept data_size_container = requires(C& c) {
    { c.data() } -> std::convertible_to<T*>;
    { c.size() } -> std::convertible_to<std::size_t>;
};

template <class C>
concept reports_contiguity = requires(const C& c) {
    { c.is_contiguous() } -> std::convertible_to<bool>;
};

template <class C>
concept has_data_offset = requires(const C& c) {
    { c.data_offset() } -> std::convertible_to<std::size_t>;
};

}  // namespace detail

/// A non-owning view of `size()` elements of type T starting at `data()`, in memory space `space()`.
template <class T>
class tensor_view {
public:
    using element_type = T;
    using value_type = std::remove_cv_t<T>;

    constexpr tensor_view() noexcept = default;
    constexpr tensor_view(T* data, std::size_t size, memory_space space = memory_space::host) noexcept
        : data_(data), size_(size), space_(space) {}

    /// From a span (host memory).
    template <class U, std::size_t Extent>
        requires std::is_convertible_v<U (*)[], T (*)[]>
    constexpr tensor_view(std::span<U, Extent> s) noexcept : data_(s.data()), size_(s.size()) {}

    /// From any contiguous host container (std::vector, std::array, xt::xtensor, xt::xarray ...), without copying.
    /// A container that reports itself non-contiguous (a strided xtensor view) is rejected with config_error.
    template <class C>
        requires(!std::is_same_v<std::remove_cvref_t<C>, tensor_view> &&
                 !std::is_same_v<std::remove_cvref_t<C>, tensor_view<std::remove_const_t<T>>> &&
                 detail::data_size_container<C, T>)
    tensor_view(C& container) : data_(container.data()), size_(container.size()) {  // NOLINT: implicit on purpose
        if constexpr (detail::reports_contiguity<C>) {
            if (!container.is_contiguous())
                throw config_error(
                    "hitch::tensor_view: the container is not contiguous (a strided view); "
                    "copy it into a contiguous container first");
        }
        if constexpr (detail::has_data_offset<C>) {
            if (container.data_offset() != 0)
                throw config_error(
                    "hitch::tensor_view: the container's data starts at a non-zero offset; "
                    "copy it into a contiguous container first");
        }
    }

    /// A view of mutable elements converts to a view of const elements.
    template <class U>
        requires(std::is_const_v<T> && std::is_same_v<U, std::remove_const_t<T>>)
    constexpr tensor_view(tensor_view<U> other) noexcept
        : data_(other.data()), size_(other.size()), space_(other.space()) {}

    [[nodiscard]] constexpr T* data() const noexcept { return data_; }
    [[nodiscard]] constexpr std::size_t size() const noexcept { return size_; }
    [[nodiscard]] constexpr std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
    [[nodiscard]] constexpr bool empty() const noexcept { return size_ == 0; }
    [[nodiscard]] constexpr memory_space space() const noexcept { return space_; }
    [[nodiscard]] constexpr bool on_host() const noexcept { return space_ == memory_space::host; }
    [[nodiscard]] static constexpr dtype element_dtype() noexcept
        requires hitch::element_type<value_type>
    {
        return dtype_of<value_type>();
    }

    /// Host views only: the elements as a span.
    [[nodiscard]] std::span<T> host_span() const {
        if (space_ != memory_space::host)
            throw config_error(
                detail::concat("hitch::tensor_view: host_span() on a view of ", name(space_), " memory"));
        return {data_, size_};
    }
    [[nodiscard]] constexpr T& operator[](std::size_t i) const noexcept { return data_[i]; }
    [[nodiscard]] constexpr T* begin() const noexcept { return data_; }
    [[nodiscard]] constexpr T* end() const noexcept { return data_ + size_; }

    /// Elements [offset, offset + count) of this view; throws config_error when out of range.
    [[nodiscard]] tensor_view subview(std::size_t offset, std::size_t count) const {
        if (offset > size_ || count > size_ - offset)
            throw config_error(detail::concat("hitch::tensor_view: subview [", offset, ", ", offset + count,
                                              ") is outside a view of ", size_, " elements"));
        return {data_ + offset, count, space_};
    }

    [[nodiscard]] tensor_view<const T> as_const() const noexcept { return {data_, size_, space_}; }

private:
    T* data_ = nullptr;
    std::size_t size_ = 0;
    memory_space space_ = memory_space::host;
};

template <class T>
tensor_view(std::vector<T>&) -> tensor_view<T>;
template <class T>
tensor_view(const std::vector<T>&) -> tensor_view<const T>;
template <class T, std::size_t E>
tensor_view(std::span<T, E>) -> tensor_view<T>;
template <class T>
tensor_view(T*, std::size_t, memory_space) -> tensor_view<T>;
template <class T>
tensor_view(T*, std::size_t) -> tensor_view<T>;

/// Views of a host container, spelled without naming the element type.
template <class C>
[[nodiscard]] auto view(C& container) {
    using T = std::remove_reference_t<decltype(*container.data())>;
    return tensor_view<T>(container);
}

}  // namespace hitch
