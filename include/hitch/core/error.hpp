#pragma once
// hitch's exception hierarchy. The library never prints and never exits: every failure is one of these.

#include <chrono>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hitch {

/// Base of every exception hitch throws.
class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// An option or argument is outside its allowed range. The message names the field, the value and the range.
class config_error : public error {
public:
    using error::error;
};

/// Ranks disagree (sizes, element types, operations, layers, parameter hashes). The message names every
/// rank's value.
class mismatch_error : public error {
public:
    using error::error;
};

/// A blocking call reached its deadline. Names the operation, its peer/tag or sequence number, the ranks that
/// did not arrive where known, and how long it waited.
class timeout_error : public error {
public:
    /// `missing`, where known, says which ranks never came ("rank 3 did not arrive"): it ends the message and
    /// travels with the error when an outer call wraps it.
    timeout_error(std::string operation, std::string detail, std::chrono::duration<double> waited,
                  std::string missing = {})
        : error(format(operation, detail, missing, waited)),
          operation_(std::move(operation)),
          missing_(std::move(missing)),
          waited_(waited) {}

    [[nodiscard]] const std::string& operation() const noexcept { return operation_; }
    /// Which ranks never came, when a roll call found out ("" when not known).
    [[nodiscard]] const std::string& missing() const noexcept { return missing_; }
    [[nodiscard]] std::chrono::duration<double> waited() const noexcept { return waited_; }

private:
    static std::string format(const std::string& op, const std::string& detail, const std::string& missing,
                              std::chrono::duration<double> w) {
        std::ostringstream s;
        s.setf(std::ios::fixed);
        s.precision(3);
        s << "hitch: timed out after " << w.count() << " s waiting for " << op;
        if (!detail.empty() || !missing.empty())
            s << " (" << detail << (!detail.empty() && !missing.empty() ? ": " : "") << missing << ")";
        return s.str();
    }
    std::string operation_;
    std::string missing_;
    std::chrono::duration<double> waited_;
};

/// The transport failed (an MPI error, an aborted world, a message of the wrong size).
class comm_error : public error {
public:
    using error::error;
};

/// A received message failed validation (bad magic, version, codec, checksum, truncated payload, index out of range).
class corrupt_message_error : public error {
public:
    using error::error;
};

/// A CUDA runtime or driver call failed.
class cuda_error : public error {
public:
    using error::error;
};

namespace detail {

/// Joins the streamable arguments into one string.
template <class... Args>
[[nodiscard]] std::string concat(const Args&... args) {
    std::ostringstream s;
    (s << ... << args);
    return s.str();
}

}  // namespace detail
}  // namespace hitch
