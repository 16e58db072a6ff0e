#pragma once
// Deadlines for blocking calls. Every blocking call in hitch waits at most a finite time: the communicator's
// timeout, whose default comes from the environment variable HITCH_TIMEOUT_S when set, else
// hitch::default_timeout_seconds. A deadline is measured on the steady clock, or on a clock_source a communicator
// brings (hitch/core/clock.hpp).

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "hitch/core/clock.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/options.hpp"

namespace hitch {

using seconds_f = std::chrono::duration<double>;

/// The built-in default for every blocking call, when neither the caller nor HITCH_TIMEOUT_S sets one.
inline constexpr double default_timeout_seconds = 300.0;

/// Reads HITCH_TIMEOUT_S (a positive number of seconds). Unset gives the built-in default; a value that is not
/// a positive finite number throws config_error naming the variable.
[[nodiscard]] inline seconds_f timeout_from_environment() {
    const char* text = std::getenv("HITCH_TIMEOUT_S");
    if (text == nullptr || *text == '\0') return seconds_f(default_timeout_seconds);
    char* end = nullptr;
    const double value = std::strtod(text, &end);
    const option_validator check("hitch: environment variable");
    if (end == text || *end != '\0') check.fail("HITCH_TIMEOUT_S", std::string(text), "(0, inf) seconds");
    if (!(value > 0.0) || value > 1e9) check.fail("HITCH_TIMEOUT_S", value, "(0, 1e9] seconds");
    return seconds_f(value);
}

/// A point in time after which a blocking call gives up.
class deadline {
public:
    using clock = std::chrono::steady_clock;

    /// `timeout` from now on the steady clock.
    explicit deadline(seconds_f timeout) : deadline(timeout, nullptr) {}
    /// `timeout` from now on `source`, which must outlive the deadline.
    deadline(seconds_f timeout, const clock_source& source) : deadline(timeout, &source) {}

    [[nodiscard]] bool expired() const noexcept { return now() >= end_; }
    [[nodiscard]] clock::time_point when() const noexcept { return end_; }
    [[nodiscard]] seconds_f waited() const noexcept { return now() - start_; }
    /// The whole time it allows, from its start.
    [[nodiscard]] seconds_f length() const noexcept { return end_ - start_; }
    /// The clock it is measured on; null for the steady clock.
    [[nodiscard]] const clock_source* source() const noexcept { return source_; }

private:
    deadline(seconds_f timeout, const clock_source* source)
        : source_(source), start_(now()), end_(start_ + std::chrono::duration_cast<clock::duration>(timeout)) {}

    // The steady clock is read directly, not through clock_source, to keep the polling loops free of an indirect call.
    [[nodiscard]] clock::time_point now() const noexcept { return source_ != nullptr ? source_->now() : clock::now(); }

    const clock_source* source_;
    clock::time_point start_;
    clock::time_point end_;
};

/// Polls `done()` until it returns true or the deadline passes; spins briefly, then yields, then sleeps, so a
/// waiting rank does not starve the one it waits for on an oversubscribed machine. Returns false on expiry.
template <class Done>
[[nodiscard]] bool poll_until(const deadline& limit, Done&& done) {
    for (int spin = 0; spin < 2000; ++spin)
        if (done()) return true;
    for (int i = 0;; ++i) {
        if (done()) return true;
        if (limit.expired()) return done();
        if (i < 2000)
            std::this_thread::yield();
        else
            std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
}

}  // namespace hitch
