#pragma once
// hitch::clock_source: where a deadline reads the time. Deadlines use the process's steady clock unless a
// communicator brings its own (a simulated cluster runs on virtual time); hitch::deadline_for(comm, timeout) in
// hitch/concepts/communicator.hpp picks the right one.

#include <chrono>

namespace hitch {

/// A source of time points on the steady clock's scale.
class clock_source {
public:
    using time_point = std::chrono::steady_clock::time_point;

    clock_source() = default;
    clock_source(const clock_source&) = delete;
    clock_source& operator=(const clock_source&) = delete;
    virtual ~clock_source() = default;

    [[nodiscard]] virtual time_point now() const noexcept = 0;
};

/// The process's steady clock, as a clock_source.
class steady_clock_source final : public clock_source {
public:
    [[nodiscard]] time_point now() const noexcept override { return std::chrono::steady_clock::now(); }
};

/// The steady clock_source every deadline uses unless a communicator brings its own.
[[nodiscard]] inline const clock_source& default_clock() noexcept {
    static const steady_clock_source source;
    return source;
}

}  // namespace hitch
