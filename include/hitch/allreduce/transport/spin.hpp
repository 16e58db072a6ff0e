#pragma once
// Waiting on a peer that runs on a core of its own: poll briefly before yielding.

#include <algorithm>
#include <chrono>
#include <thread>

namespace hitch::allreduce::detail {

/// Busy-polls `ready()` for up to `budget` before the caller falls back to a wait that yields the core. When every
/// rank has a core of its own the peer is running and answers within microseconds; yielding then would hand the
/// core to another process for a whole time slice.
template <class Ready>
[[nodiscard]] bool spin_for(std::chrono::nanoseconds budget, Ready&& ready) {
    if (budget.count() <= 0) return false;
    const auto end = std::chrono::steady_clock::now() + budget;
    for (int i = 0;; ++i) {
        if (ready()) return true;
        if ((i & 63) == 63 && std::chrono::steady_clock::now() >= end) return false;
    }
}

/// Cores the process may run on, read once (std::thread::hardware_concurrency() reads /sys on every call).
[[nodiscard]] inline int cores() noexcept {
    static const int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return n;
}

}  // namespace hitch::allreduce::detail
