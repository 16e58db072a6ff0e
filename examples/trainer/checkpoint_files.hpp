#pragma once
// What a --resume prefix holds on disk, read before any data is loaded: data_parallel writes one file per rank,
// "<prefix>.rank<r>-of-<p>", and reads only the files of the rank count it runs on, so a checkpoint written by
// another number of ranks is refused here with what is on disk, instead of as a file that cannot be opened. Also the
// sets --checkpoint-every writes, "<prefix>.step<S>", which --resume auto chooses from.

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "hitch/train/elastic.hpp"

namespace hitch_examples {

/// Empty when `prefix` has a file for each of the ranks `mine` (this node's ranks: on per-node disks a node sees only
/// its own ranks' files) that is one of the first `workers` of `ranks` ranks (dedicated parameter servers, the last
/// ranks, write "<prefix>.shard<s>" instead); else one line saying what is on disk and what this run has (`flag`
/// names the option, "--resume").
inline std::string resume_problem(std::string_view flag, const std::filesystem::path& prefix, int ranks, int workers,
                                  const std::vector<int>& mine) {
    const auto found = hitch::train::checkpoint_files(prefix);
    const std::string head = std::string(flag) + " " + prefix.string() + ": ";
    const auto plural = [](int n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); };
    if (found.empty()) return head + "no checkpoint files " + prefix.filename().string() + ".rank<r>-of-<p> found";
    if (const auto it = found.find(ranks); it != found.end()) {
        for (const int r : mine)
            if (r < workers && !it->second.contains(r))
                return head + "the file of rank " + std::to_string(r) + " (" + prefix.filename().string() + ".rank" +
                       std::to_string(r) + "-of-" + std::to_string(ranks) + ") is missing; " +
                       std::to_string(it->second.size()) + " of " + std::to_string(workers) + " are there";
        return {};
    }
    std::string counts, choices;
    for (auto it = found.begin(); it != found.end(); ++it) {
        const bool last = std::next(it) == found.end();
        counts += (it == found.begin() ? "" : last ? " and " : ", ") + std::to_string(it->first);
        choices += (it == found.begin() ? "" : last ? " or " : ", ") + std::to_string(it->first);
    }
    const char* unit = found.size() == 1 && found.begin()->first == 1 ? " rank" : " ranks";
    return head + "the checkpoint was written by " + counts + unit + ", this run has " + plural(ranks, "rank") +
           "; resume it on " + choices + unit;
}

/// The sets --checkpoint-every writes: "<prefix>.step<S>".
inline std::string step_prefix(const std::string& prefix, std::uint64_t step) {
    return prefix + ".step" + std::to_string(step);
}

/// The steps S for which `file_of(step_prefix(prefix, S))` (this rank's file of that set) exists, ascending.
template <class FileOf>
std::vector<std::uint64_t> own_checkpoint_steps(const std::string& prefix, FileOf&& file_of) {
    const std::filesystem::path base(prefix);
    const std::string stem = base.filename().string() + ".step";
    const std::filesystem::path dir = base.has_parent_path() ? base.parent_path() : ".";
    std::set<std::uint64_t> steps;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (!name.starts_with(stem)) continue;
        unsigned long long s = 0;
        if (std::sscanf(name.c_str() + stem.size(), "%llu", &s) != 1) continue;
        if (std::filesystem::path(file_of(step_prefix(prefix, s))).filename() == name) steps.insert(s);
    }
    return {steps.begin(), steps.end()};
}

/// Removes this rank's files of every set but the `keep` newest.
template <class FileOf>
void prune_own_checkpoints(const std::string& prefix, std::size_t keep, FileOf&& file_of) {
    const auto steps = own_checkpoint_steps(prefix, file_of);
    std::error_code ec;
    for (std::size_t i = 0; i + keep < steps.size(); ++i)
        std::filesystem::remove(file_of(step_prefix(prefix, steps[i])), ec);
}

}  // namespace hitch_examples
