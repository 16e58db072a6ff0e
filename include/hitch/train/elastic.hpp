#pragma once
// Elastic restarts: a checkpoint written by p ranks, loaded by q ranks (torchrun's elastic restarts do the same
// for PyTorch). What a load does with each part of the state:
//
//   parameters, optimizer state, loss scaler, step,      every one of the p files must hold the same bytes (rank
//   sync policy's position                               0's are loaded); they differ only under a policy that
//                                                        lets replicas drift (local_sgd between averages, async),
//                                                        which is refused
//   error-feedback residuals (error_feedback<X>'s, the   redistributed: every new rank gets the mean of the p
//   compressed ring's, powersgd's, dgc's momentum and    saved ones, so the pending correction the average carries
//   velocity)                                            is kept: (1/q) sum_j r'_j = (1/p) sum_i r_i
//   the rest of a codec's state (powersgd's Q, step      rank 0's (the ranks hold the same)
//   counters)
//   the all-reduce schedule's state                      not loaded: its decisions were for p ranks
//
// ZeRO (options.zero_stage), the parameter-server policies and device training refuse an elastic load. The global
// batch and the learning rate are the caller's: saved_ranks(prefix) says p, so a trainer can keep the global batch
// (per-rank batch times p / q) or keep the per-rank batch and scale the rate by q / p (Goyal et al. 2017).

#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "hitch/core/error.hpp"
#include "hitch/exchange/aggregation.hpp"

namespace hitch::compress {
class dgc;
class powersgd;
}  // namespace hitch::compress

namespace hitch::train {

/// How data_parallel::load reads a checkpoint.
struct load_options {
    /// Load a checkpoint written by another number of ranks (see the file comment for what happens to each part of
    /// the state). Off: the files of this run's rank count must be there.
    bool elastic = false;
    /// With elastic: the rank count whose files to load, where files of several rank counts share the prefix
    /// (0: the only one there is).
    int saved_ranks = 0;
};

/// "<prefix>.rank<r>-of-<p>", the file rank r of p writes.
[[nodiscard]] inline std::filesystem::path checkpoint_file(const std::filesystem::path& prefix, int rank, int ranks) {
    return prefix.string() + hitch::detail::concat(".rank", rank, "-of-", ranks);
}

/// For each rank count p with files under `prefix`, the ranks r whose "<prefix>.rank<r>-of-<p>" exists.
[[nodiscard]] inline std::map<int, std::set<int>> checkpoint_files(const std::filesystem::path& prefix) {
    std::map<int, std::set<int>> found;
    const std::string stem = prefix.filename().string() + ".rank";
    const std::filesystem::path dir = prefix.has_parent_path() ? prefix.parent_path() : ".";
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind(stem, 0) != 0) continue;
        int r = -1, p = -1;
        const std::string rest = name.substr(stem.size());
        if (std::sscanf(rest.c_str(), "%d-of-%d", &r, &p) != 2) continue;
        if (r >= 0 && p > 0 && r < p && std::to_string(r) + "-of-" + std::to_string(p) == rest) found[p].insert(r);
    }
    return found;
}

/// The number of ranks that wrote the checkpoint `prefix` (the rank count of its files); error when there are no
/// files, or files of several rank counts.
[[nodiscard]] inline int saved_ranks(const std::filesystem::path& prefix) {
    const auto found = checkpoint_files(prefix);
    if (found.empty())
        throw error(hitch::detail::concat("hitch::train::saved_ranks: no checkpoint files ", prefix.string(),
                                          ".rank<r>-of-<p>"));
    if (found.size() > 1) {
        std::string counts;
        for (const auto& [p, ranks] : found) counts += hitch::detail::concat(counts.empty() ? "" : ", ", p);
        throw mismatch_error(hitch::detail::concat("hitch::train::saved_ranks: ", prefix.string(),
                                                   " has files of several rank counts (", counts,
                                                   "); name one (load_options::saved_ranks)"));
    }
    return found.begin()->first;
}

}  // namespace hitch::train

namespace hitch::train::detail {

/// out[i] = the mean over `from` of each one's `field`[i], summed in double in rank order.
template <class State, class Field>
void mean_into(std::vector<float>& out, std::span<const State> from, Field field) {
    if (from.empty()) return;
    const std::size_t n = (from.front().*field).size();
    std::vector<double> sum(n, 0.0);
    for (const State& s : from)
        for (std::size_t i = 0; i < n; ++i) sum[i] += static_cast<double>((s.*field)[i]);
    out.resize(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(sum[i] / static_cast<double>(from.size()));
}

/// The codec state (not the aggregation's) a new rank takes from the p saved ones: rank 0's, with every residual
/// the mean of the saved ones.
template <class Codec>
[[nodiscard]] typename Codec::state redistribute_codec(std::span<const typename Codec::state> saved) {
    using state = typename Codec::state;
    state out = saved.front();
    if constexpr (compress::detail::is_error_feedback<Codec>::value) {
        mean_into(out.residual, saved, &state::residual);
    } else if constexpr (std::is_same_v<Codec, compress::dgc>) {
        mean_into(out.u, saved, &state::u);
        mean_into(out.v, saved, &state::v);
    } else if constexpr (std::is_same_v<Codec, compress::powersgd>) {
        mean_into(out.residual, saved, &state::residual);
    }
    return out;
}

/// A bucket's aggregation state for a new rank from the p saved ones (see redistribute_codec); the compressed
/// ring's residual is the mean too.
template <class Codec>
[[nodiscard]] compress::aggregation_state<Codec> redistribute(std::vector<compress::aggregation_state<Codec>> saved) {
    using agg = compress::aggregation_state<Codec>;
    std::vector<typename Codec::state> codecs;
    codecs.reserve(saved.size());
    for (const agg& s : saved) codecs.push_back(s.codec);
    std::vector<float> ring;
    mean_into(ring, std::span<const agg>(saved), &agg::ring_residual);
    agg out = std::move(saved.front());
    out.codec = redistribute_codec<Codec>(std::span<const typename Codec::state>(codecs));
    out.ring_residual = std::move(ring);
    return out;
}

}  // namespace hitch::train::detail
