#pragma once
// Validation of run-time options. Every option struct is checked when the object that takes it is constructed;
// a bad value throws config_error naming the owner, the field, the value and the allowed range, e.g.
//   "hitch::optim::adam: option beta1 = 1.5 is outside the allowed range [0, 1)".

#include <cmath>
#include <concepts>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

#include "hitch/core/error.hpp"

namespace hitch {

/// Checks option values on behalf of one owner (the type or function that received them).
class option_validator {
public:
    explicit option_validator(std::string_view owner) : owner_(owner) {}

    /// value > 0
    template <class T>
    const option_validator& positive(std::string_view field, T value) const {
        check_number(field, value);
        if (!(value > T{})) fail(field, value, "(0, inf)");
        return *this;
    }
    /// value >= 0
    template <class T>
    const option_validator& non_negative(std::string_view field, T value) const {
        check_number(field, value);
        if (value < T{}) fail(field, value, "[0, inf)");
        return *this;
    }
    /// value >= lo
    template <class T>
    const option_validator& at_least(std::string_view field, T value, T lo) const {
        check_number(field, value);
        if (value < lo) fail(field, value, range_text('[', lo, "inf", ')'));
        return *this;
    }
    /// lo <= value <= hi
    template <class T>
    const option_validator& closed(std::string_view field, T value, T lo, T hi) const {
        check_number(field, value);
        if (value < lo || value > hi) fail(field, value, range_text('[', lo, hi, ']'));
        return *this;
    }
    /// lo <= value < hi
    template <class T>
    const option_validator& half_open(std::string_view field, T value, T lo, T hi) const {
        check_number(field, value);
        if (value < lo || !(value < hi)) fail(field, value, range_text('[', lo, hi, ')'));
        return *this;
    }
    /// lo < value <= hi
    template <class T>
    const option_validator& open_closed(std::string_view field, T value, T lo, T hi) const {
        check_number(field, value);
        if (!(value > lo) || value > hi) fail(field, value, range_text('(', lo, hi, ']'));
        return *this;
    }
    /// lo < value < hi
    template <class T>
    const option_validator& open(std::string_view field, T value, T lo, T hi) const {
        check_number(field, value);
        if (!(value > lo) || !(value < hi)) fail(field, value, range_text('(', lo, hi, ')'));
        return *this;
    }
    /// A free-form requirement: throws with `requirement` as the allowed range when `ok` is false.
    template <class T>
    const option_validator& require(bool ok, std::string_view field, const T& value,
                                    std::string_view requirement) const {
        if (!ok) fail(field, value, requirement);
        return *this;
    }

    /// Throws config_error for `field` = `value`, naming what is allowed.
    template <class T>
    [[noreturn]] void fail(std::string_view field, const T& value, std::string_view allowed) const {
        std::ostringstream s;
        s << owner_ << ": option " << field << " = ";
        if constexpr (std::is_same_v<T, bool>)
            s << (value ? "true" : "false");
        else if constexpr (std::is_convertible_v<const T&, std::string_view>)
            s << '"' << std::string_view(value) << '"';
        else if constexpr (std::is_integral_v<T> && sizeof(T) == 1)
            s << static_cast<int>(value);
        else
            s << value;
        s << " is outside the allowed range " << allowed;
        throw config_error(s.str());
    }

    [[nodiscard]] const std::string& owner() const noexcept { return owner_; }

private:
    template <class T>
    void check_number(std::string_view field, T value) const {
        if constexpr (std::is_floating_point_v<T>) {
            if (std::isnan(value)) fail(field, "NaN", "(any number, not NaN)");
        }
    }
    template <class L, class H>
    static std::string range_text(char open, const L& lo, const H& hi, char close) {
        std::ostringstream s;
        s << open << lo << ", " << hi << close;
        return s.str();
    }

    std::string owner_;
};

}  // namespace hitch
