#pragma once
// Wall-clock deadlines that tests choose short, stretched where the code runs slower: HITCH_TEST_TIME_SCALE (a
// number >= 1; make test-tsan sets it, as ThreadSanitizer runs code 5 to 15 times slower) multiplies them.
#include <cstdlib>

namespace hitch_test {

[[nodiscard]] inline double time_scale() {
    const char* text = std::getenv("HITCH_TEST_TIME_SCALE");
    const double v = text != nullptr ? std::strtod(text, nullptr) : 1.0;
    return v >= 1.0 && v <= 1000.0 ? v : 1.0;
}
/// `seconds` stretched by HITCH_TEST_TIME_SCALE.
[[nodiscard]] inline double scaled_seconds(double seconds) { return seconds * time_scale(); }

}  // namespace hitch_test
