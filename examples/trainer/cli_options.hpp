#pragma once
// CLI11 options whose values are read by option_values.hpp, shared by the trainers and the benchmarks: a refused
// value throws usage_error with its one line.

#include <limits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "option_values.hpp"

namespace hitch_examples {

namespace detail {

template <class T>
CLI::Option* add_whole(CLI::App& app, const std::string& flag, T& target, const std::string& help, T min,
                       T max = std::numeric_limits<T>::max()) {
    return app
        .add_option_function<std::string>(
            flag, [&target, flag, min, max](const std::string& v) { target = parse_whole<T>(flag, v, min, max); }, help)
        ->type_name("INT")
        ->default_str(std::to_string(target));
}

inline CLI::Option* add_real(CLI::App& app, const std::string& flag, double& target, const std::string& help,
                             real_range range) {
    return app
        .add_option_function<std::string>(
            flag, [&target, flag, range](const std::string& v) { target = parse_finite(flag, v, range); }, help)
        ->type_name("FLOAT")
        ->default_str(number_text(target));
}

inline CLI::Option* add_name(CLI::App& app, const std::string& flag, std::string& target, const std::string& help,
                             std::vector<std::string> valid) {
    return app
        .add_option_function<std::string>(
            flag,
            [&target, flag, valid](const std::string& v) {
                for (const auto& name : valid)
                    if (name == v) {
                        target = v;
                        return;
                    }
                throw usage_error(not_one_of(flag, v, valid));
            },
            help)
        ->type_name("NAME")
        ->default_str(target);
}

}  // namespace detail

}  // namespace hitch_examples
