#pragma once
// hitch::reduce_op: how the contributions of the ranks are combined. The kernels that combine buffers live with
// the schedules (hitch/allreduce/reduce_op.hpp); the enum sits in core so the schedule concept can name it.

#include <cstdint>
#include <string_view>

namespace hitch {

/// How contributions are combined. `average` is a sum divided by the number of ranks.
enum class reduce_op : std::uint8_t { sum = 0, average = 1, min = 2, max = 3 };

[[nodiscard]] constexpr std::string_view name(reduce_op op) noexcept {
    switch (op) {
        case reduce_op::sum:
            return "sum";
        case reduce_op::average:
            return "average";
        case reduce_op::min:
            return "min";
        case reduce_op::max:
            return "max";
    }
    return "invalid-op";
}

[[nodiscard]] constexpr bool is_valid(reduce_op op) noexcept { return static_cast<std::uint8_t>(op) <= 3; }

}  // namespace hitch
