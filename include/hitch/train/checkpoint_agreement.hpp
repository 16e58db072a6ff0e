#pragma once
// Ranks agree on a checkpoint before they trust it. Each rank writes and reads its own file, so a job killed
// between two ranks' saves leaves files of two saves side by side, and a resume from them would restore ranks at
// different steps without a word. A save therefore records a generation that every rank of that save shares (rank
// 0's draw), and a load compares every rank's step and generation, and whether every rank could read its file at
// all, before any rank changes anything: on a difference every rank throws, naming the ranks and what each holds.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "hitch/comm/agree.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/error.hpp"
#include "hitch/train/engine_checkpoint.hpp"

namespace hitch::train {

/// A load refused because another rank could not read its checkpoint file (that rank throws its own error).
class checkpoint_set_error : public error {
public:
    using error::error;
};

}  // namespace hitch::train

namespace hitch::train::detail {

/// Collective: the generation of a save every rank takes part in (rank 0's draw; never 0, which marks files
/// written before generations).
template <communicator C>
[[nodiscard]] std::uint64_t agree_on_generation(C& comm) {
    std::uint64_t mine = 0;
    if (comm.rank() == 0) {
        std::random_device entropy;
        const auto now = static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
        std::mt19937_64 draw((static_cast<std::uint64_t>(entropy()) << 32) ^ entropy() ^ now);
        do mine = draw();
        while (mine == 0);
    }
    return comm::allgather_value(comm, mine).front();
}

/// What a rank found in its file before loading it.
struct file_verdict {
    checkpoint_position position;
    std::uint8_t readable = 0;
};

/// "rank 0 and 2: step 200 (save 9f3c...)" for each distinct position, in rank order of first appearance.
[[nodiscard]] inline std::string describe_positions(const std::vector<file_verdict>& all) {
    std::vector<std::pair<checkpoint_position, std::vector<int>>> groups;
    for (std::size_t r = 0; r < all.size(); ++r) {
        auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == all[r].position; });
        if (it == groups.end()) it = groups.insert(groups.end(), {all[r].position, {}});
        it->second.push_back(static_cast<int>(r));
    }
    std::string out;
    for (const auto& [position, ranks] : groups) {
        if (!out.empty()) out += "; ";
        out += ranks.size() == 1 ? "rank " : "ranks ";
        for (std::size_t i = 0; i < ranks.size(); ++i) out += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
        char generation[24];
        std::snprintf(generation, sizeof generation, "%016llx", static_cast<unsigned long long>(position.generation));
        out += concat(": step ", position.step, " (save ", position.generation == 0 ? "unrecorded" : generation, ")");
    }
    return out;
}

/// Collective: every rank reports whether it could read and check its file (`own` holds why not) and what the file
/// holds. Throws on every rank before anything is loaded when some rank could not read its file (that rank its own
/// error, the others checkpoint_set_error naming it) or when the files are from different saves (mismatch_error naming
/// the ranks and the step and save each holds).
template <communicator C>
void agree_on_files(C& comm, const std::string& prefix, const checkpoint_position& mine, std::exception_ptr own) {
    const std::vector<file_verdict> all =
        comm::allgather_value(comm, file_verdict{mine, static_cast<std::uint8_t>(own ? 0 : 1)});
    if (own) std::rethrow_exception(own);
    std::string unreadable;
    int count = 0;
    for (std::size_t r = 0; r < all.size(); ++r)
        if (all[r].readable == 0) unreadable += (count++ == 0 ? "" : ", ") + std::to_string(r);
    if (count > 0)
        throw checkpoint_set_error(concat("hitch::data_parallel::load: ", prefix, ": rank", count > 1 ? "s " : " ",
                                          unreadable, " could not load ",
                                          count > 1 ? "their files (see their" : "its file (see its",
                                          " own message); nothing was loaded on any rank"));
    for (const file_verdict& v : all)
        if (!(v.position == all.front().position))
            throw mismatch_error(concat("hitch::data_parallel::load: ", prefix,
                                        ": the ranks' files are from different saves (a save that did not finish "
                                        "on every rank?): ",
                                        describe_positions(all), "; nothing was loaded on any rank"));
}

}  // namespace hitch::train::detail
