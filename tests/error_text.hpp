#pragma once
// What a call threw, as text: rank threads collect their errors with it and the test's own thread checks them
// (Catch's assertions are for one thread at a time).
#include <exception>
#include <string>
#include <utility>

namespace hitch_test {

/// e.what() of the E that f threw, or "no error" when it returned; an exception of another type propagates.
template <class E = std::exception, class F>
[[nodiscard]] std::string error_text(F&& f) {
    try {
        std::forward<F>(f)();
    } catch (const E& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace hitch_test
