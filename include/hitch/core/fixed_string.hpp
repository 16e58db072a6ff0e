#pragma once
// hitch::fixed_string and hitch::join_names: names composed at compile time. Every model names itself with
// `static constexpr std::string_view name`; a composite (lars<momentum>, ef:topk) joins its parts' names into
// static storage, so the name stays a constant expression and costs no allocation.

#include <array>
#include <cstddef>
#include <string_view>

namespace hitch {

/// N characters held by value (NUL-terminated) in a constant expression.
template <std::size_t N>
struct fixed_string {
    std::array<char, N + 1> chars{};

    [[nodiscard]] constexpr std::string_view view() const noexcept { return {chars.data(), N}; }
};

namespace detail {

template <const std::string_view&... Parts>
struct joined {
    static constexpr std::size_t size = (Parts.size() + ... + 0);
    static constexpr fixed_string<size> value = [] {
        fixed_string<size> out{};
        std::size_t at = 0;
        const auto append = [&](std::string_view part) {
            for (const char c : part) out.chars[at++] = c;
        };
        (append(Parts), ...);
        return out;
    }();
};

}  // namespace detail

/// The parts, joined: `join_names<open, Base::name, close>` is "lars<momentum>" for Base = momentum. Each part is
/// a `static constexpr` or `inline constexpr` std::string_view.
template <const std::string_view&... Parts>
inline constexpr std::string_view join_names = detail::joined<Parts...>::value.view();

}  // namespace hitch
