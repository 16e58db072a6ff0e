#pragma once
// Which layers a step's backward reported with gradient_ready: the per-layer bookkeeping data_parallel needs to
// launch buckets in order, to name a layer that was never reported, and, under find_unused_layers (DDP's
// find_unused_parameters), to treat such a layer as a zero gradient and to leave a layer no rank used out of the
// optimizer step. "Used" spans an accumulation window: a layer used in any of its micro-batches is used.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"

namespace hitch::train::detail {

class layer_reports {
public:
    layer_reports(std::span<const hitch::layer> layers, bool find_unused)
        : layers_(layers),
          find_unused_(find_unused),
          ready_(layers.size(), 0),
          crc_(layers.size(), 0),
          unused_(layers.size(), 0),
          used_in_window_(layers.size(), 0) {}

    /// gradient_ready(k): checks k and that it is its first report this micro-batch.
    void report(std::size_t k, std::uint64_t step) {
        using hitch::detail::concat;
        if (k >= ready_.size())
            throw config_error(concat("hitch::data_parallel::gradient_ready: layer ", k,
                                      " is outside the allowed range [0, ", ready_.size(), ")"));
        if (ready_[k] != 0)
            throw config_error(concat("hitch::data_parallel::gradient_ready: layer ", k, " ('", layers_[k].name,
                                      "') was reported twice in step ", step));
        reported_ = true;
    }
    /// gradient_ready was called in this micro-batch.
    [[nodiscard]] bool reported() const noexcept { return reported_; }
    /// Marks k ready; false if it already was.
    bool mark(std::size_t k) noexcept {
        if (ready_[k] != 0) return false;
        ready_[k] = 1;
        return true;
    }
    [[nodiscard]] bool unused(std::size_t k) const noexcept { return unused_[k] != 0; }
    /// check_gradient_contract: the CRC32C of k's gradient when it was reported.
    [[nodiscard]] std::uint32_t& crc(std::size_t k) { return crc_[k]; }

    /// At step(): a layer not reported in a micro-batch that reported others is unused (find_unused) or
    /// config_error naming every such layer; records which layers the window used.
    void settle(std::uint64_t step, int rank) {
        if (reported_) {
            if (!find_unused_) {
                std::string missing;
                for (std::size_t k = 0; k < ready_.size(); ++k)
                    if (ready_[k] == 0)
                        missing += hitch::detail::concat(missing.empty() ? "" : ", ", k, " ('", layers_[k].name, "')");
                if (!missing.empty())
                    throw config_error(hitch::detail::concat(
                        "hitch::data_parallel::step: step ", step, " on rank ", rank,
                        ": gradient_ready was called for some layers but never for layer(s) ", missing));
            }
            // reset() cleared every flag; only the unreported layers' flags are written, since the buckets of the
            // reported ones may be packing on the overlap thread now, reading theirs.
            for (std::size_t k = 0; k < ready_.size(); ++k)
                if (ready_[k] == 0) unused_[k] = 1;
        }
        for (std::size_t k = 0; k < unused_.size(); ++k)
            if (unused_[k] == 0) used_in_window_[k] = 1;
    }

    /// The layers none of the ranks used in this window, as a mask (empty when there are none): `used_anywhere`
    /// turns this rank's flags (1.0 used, 0.0 not) into the maximum over the ranks it agrees with.
    template <class MaxOverRanks>
    std::span<const unsigned char> unused_everywhere(MaxOverRanks&& used_anywhere) {
        if (!find_unused_) return {};
        std::vector<float> used(used_in_window_.size());
        for (std::size_t k = 0; k < used.size(); ++k) used[k] = used_in_window_[k] != 0 ? 1.0f : 0.0f;
        used_anywhere(std::span<float>(used));
        skip_.assign(used.size(), 0);
        for (std::size_t k = 0; k < used.size(); ++k) skip_[k] = used[k] == 0.0f ? 1 : 0;
        if (std::none_of(skip_.begin(), skip_.end(), [](unsigned char x) { return x != 0; })) return {};
        return skip_;
    }

    /// The micro-batch is over.
    void reset() {
        std::fill(ready_.begin(), ready_.end(), 0);
        std::fill(unused_.begin(), unused_.end(), 0);
        reported_ = false;
    }
    /// The accumulation window is over.
    void end_window() { std::fill(used_in_window_.begin(), used_in_window_.end(), 0); }

private:
    std::span<const hitch::layer> layers_;
    bool find_unused_;
    bool reported_ = false;
    std::vector<unsigned char> ready_;
    std::vector<std::uint32_t> crc_;             // check_gradient_contract: each reported gradient's CRC32C
    std::vector<unsigned char> unused_;          // not reported in this micro-batch (find_unused)
    std::vector<unsigned char> used_in_window_;  // used in some micro-batch of the accumulation window
    std::vector<unsigned char> skip_;            // no rank used it: left out of the optimizer step
};

}  // namespace hitch::train::detail
