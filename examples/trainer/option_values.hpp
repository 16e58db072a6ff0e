#pragma once
// The trainers' option values read from text, with one short line for every value refused: the option, the value
// given and what is accepted ("--epochs must be a whole number from 1 to 1000000, got -1"). CLI11's own checks
// print their bounds in full (DBL_MAX in 309 digits) and let integers overflow, so the numbers are read here. The
// trainers and the benchmarks share it, with the exit statuses and the rule that the launcher's rank 0 alone prints
// a usage error (every rank finds the same one, before MPI starts).

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace hitch_examples {

/// Exit statuses: a usage error (the command line, or options that cannot work together), a failure of the run.
inline constexpr int exit_usage = 2, exit_failure = 1;

/// This process's rank as the launcher (MPICH's Hydra, Open MPI, PMIx, Slurm) tells it, before MPI starts; 0 when
/// it was not started by one.
inline int launcher_rank() {
    for (const char* name : {"PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"})
        if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return std::atoi(v);
    return 0;
}

/// "program: message" on stderr, flushed so that a launcher forwards it before the process ends.
inline void print_line(const std::string& program, const std::string& message) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), message.c_str());
    std::fflush(stderr);
}

/// A command-line mistake: the program prints what() as its one line and exits with status 2.
class usage_error : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

namespace detail {

/// The value as typed, cut so that a message stays one short line.
inline std::string shown(std::string_view text) {
    constexpr std::size_t most = 40;
    return text.size() <= most ? std::string(text) : std::string(text.substr(0, most)) + "...";
}

inline std::string_view trimmed(std::string_view text) {
    const auto first = text.find_first_not_of(" \t");
    if (first == std::string_view::npos) return {};
    return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

/// The shortest text that reads back as x (0.9999, 1e-06, 1024).
inline std::string number_text(double x) {
    char buffer[32];
    const auto end = std::to_chars(buffer, buffer + sizeof buffer, x).ptr;
    return {buffer, end};
}

/// strtod over the whole text; false when the text is not a number at all.
inline bool read_real(std::string_view text, double& out) {
    const std::string copy(text);
    if (copy.empty()) return false;
    char* end = nullptr;
    errno = 0;
    out = std::strtod(copy.c_str(), &end);
    return end == copy.c_str() + copy.size();
}

}  // namespace detail

/// "--optimizer: 'adamx' is not one of sgd, momentum, ..." (the text of every name refused by the trainers).
inline std::string not_one_of(std::string_view flag, std::string_view name, const std::vector<std::string>& valid) {
    std::string list;
    for (const auto& v : valid) list += (list.empty() ? "" : ", ") + v;
    return std::string(flag) + ": '" + detail::shown(name) + "' is not one of " + list;
}

/// A whole number in [min, max] for an option of type T (max at most T's largest value).
template <class T>
T parse_whole(std::string_view flag, std::string_view text, T min, T max) {
    static_assert(std::numeric_limits<T>::is_integer);
    const std::string_view t = detail::trimmed(text);
    const std::string range = "from " + std::to_string(min) + " to " + std::to_string(max);
    const auto refuse = [&](const std::string& accepted) {
        return usage_error(std::string(flag) + " must be a whole number " + accepted + ", got " + detail::shown(t));
    };
    const std::string accepted = max == std::numeric_limits<T>::max() ? ">= " + std::to_string(min) : range;
    double real = 0;
    if (!detail::read_real(t, real))
        throw usage_error(std::string(flag) + ": '" + detail::shown(t) + "' is not a number");
    const bool negative = t.front() == '-';
    const std::string_view digits = t.front() == '+' || negative ? t.substr(1) : t;
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos)
        throw refuse(accepted);  // 1.5, 1e3, inf: numbers, but not whole ones
    if (negative) {
        if (digits.find_first_not_of('0') == std::string_view::npos && min == 0) return 0;
        throw refuse(accepted);
    }
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    // A number past what the option can hold is refused with the whole range, so the user sees where it ends.
    if (ec == std::errc::result_out_of_range || value > static_cast<std::uint64_t>(max)) throw refuse(range);
    if (value < static_cast<std::uint64_t>(min)) throw refuse(accepted);
    return static_cast<T>(value);
}

/// What a real-valued option accepts: finite, above (or at) `min`, at most `max`.
struct real_range {
    double min = 0.0;
    bool min_open = false;  // true: the value must be > min
    double max = std::numeric_limits<double>::infinity();

    static constexpr real_range positive() { return {0.0, true}; }
    static constexpr real_range non_negative() { return {0.0, false}; }
    static constexpr real_range closed(double lo, double hi) { return {lo, false, hi}; }

    [[nodiscard]] std::string text() const {
        if (std::isinf(max)) return (min_open ? "> " : ">= ") + detail::number_text(min);
        return "from " + detail::number_text(min) + " to " + detail::number_text(max);
    }
};

/// A finite real number in `range`.
inline double parse_finite(std::string_view flag, std::string_view text, real_range range) {
    const std::string_view t = detail::trimmed(text);
    double value = 0;
    if (!detail::read_real(t, value))
        throw usage_error(std::string(flag) + ": '" + detail::shown(t) + "' is not a number");
    const bool inside =
        std::isfinite(value) && (range.min_open ? value > range.min : value >= range.min) && value <= range.max;
    if (!inside)
        throw usage_error(std::string(flag) + " must be a finite number " + range.text() + ", got " + detail::shown(t));
    return value;
}

/// The value after the option argv[i] of a command line read by hand (the benchmarks'); moves i onto it.
inline std::string_view next_value(int argc, char** argv, int& i) {
    if (i + 1 >= argc) throw usage_error(detail::shown(argv[i]) + " needs a value");
    return argv[++i];
}

}  // namespace hitch_examples
