#pragma once
// --plot: loss and test accuracy against time and against epochs, drawn by gnuplot into a PNG, for one run's
// metrics file or several side by side (one curve per file), so policies can be compared by looking.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hitch_examples {

/// Draws `png` from metrics files (JSON lines written by the trainers). Throws std::runtime_error with gnuplot's
/// exit status if drawing fails.
inline void plot_metrics(const std::vector<std::string>& metrics_files, const std::string& png) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("hitch-plot-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::vector<std::pair<std::string, std::string>> series;  // (title, data file)
    for (std::size_t f = 0; f < metrics_files.size(); ++f) {
        std::ifstream in(metrics_files[f]);
        if (!in) throw std::runtime_error("--plot: cannot read metrics file " + metrics_files[f]);
        // First pass: steps per epoch, to place each step at a fractional epoch.
        std::vector<nlohmann::json> rows;
        std::map<std::uint64_t, std::uint64_t> steps_in_epoch;
        for (std::string line; std::getline(in, line);) {
            if (line.empty()) continue;
            auto row = nlohmann::json::parse(line);
            if (!row.contains("step")) continue;  // the summary line that ends a run
            rows.push_back(std::move(row));
            ++steps_in_epoch[rows.back()["epoch"].get<std::uint64_t>()];
        }
        std::uint64_t per_epoch = 1;
        for (const auto& [e, n] : steps_in_epoch) per_epoch = std::max(per_epoch, n);
        const fs::path data = dir / ("series" + std::to_string(f) + ".dat");
        std::ofstream out(data);
        out << "# elapsed_s epoch loss accuracy smoothed_loss\n";
        double smoothed = 0.0;
        bool first = true;
        for (const auto& r : rows) {
            // An exponential moving average (over about 50 steps) makes the trend readable through batch noise.
            if (!r["loss"].is_null()) {
                const double l = r["loss"].get<double>();
                smoothed = first ? l : 0.98 * smoothed + 0.02 * l;
                first = false;
            }
            const double epoch =
                static_cast<double>(r["step"].get<std::uint64_t>() + 1) / static_cast<double>(per_epoch);
            out << r.value("elapsed_s", 0.0) << ' ' << epoch << ' '
                << (r["loss"].is_null() ? std::string("NaN") : std::to_string(r["loss"].get<double>())) << ' '
                << (r["accuracy"].is_null() ? std::string("NaN") : std::to_string(r["accuracy"].get<double>())) << ' '
                << (first ? std::string("NaN") : std::to_string(smoothed)) << '\n';
        }
        series.emplace_back(fs::path(metrics_files[f]).filename().string(), data.string());
    }
    const fs::path script = dir / "plot.gp";
    {
        std::ofstream gp(script);
        gp << "set terminal pngcairo size 1400,900 font ',10'\n"
           << "set output '" << png << "'\n"
           << "set datafile missing 'NaN'\nset grid\n"
           << "set multiplot layout 2,2 title 'hitch training curves'\n";
        const auto panel = [&](const char* title, const char* xlabel, int x, int y, const char* style) {
            gp << "set title '" << title << "'\nset xlabel '" << xlabel << "'\nset key " << (y == 4 ? "bottom" : "top")
               << " right\nplot ";
            for (std::size_t i = 0; i < series.size(); ++i)
                gp << (i ? ", " : "") << "'" << series[i].second << "' using " << x << ':' << y << " with " << style
                   << " title '" << series[i].first << "'";
            gp << '\n';
        };
        panel("training loss (moving average)", "seconds", 1, 5, "lines");
        panel("training loss (moving average)", "epochs", 2, 5, "lines");
        panel("test accuracy", "seconds", 1, 4, "linespoints");
        panel("test accuracy", "epochs", 2, 4, "linespoints");
        gp << "unset multiplot\n";
    }
    const std::string command = "gnuplot '" + script.string() + "' 2>&1";
    const int status = std::system(command.c_str());
    fs::remove_all(dir);
    if (status != 0)
        throw std::runtime_error("--plot: gnuplot failed (exit status " + std::to_string(status) +
                                 "); is gnuplot installed (Debian: gnuplot-nox)?");
}

}  // namespace hitch_examples
