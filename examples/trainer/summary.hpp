#pragma once
// The trainers' last line: one JSON object describing the run and its result, also the last line of rank 0's
// --metrics file. Every key, its type, unit and meaning is listed in docs/metrics.md, in this order;
// tests/trainers checks the two agree.

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "hitch/compress/detail/simd.hpp"
#include "registry.hpp"
#include "train.hpp"

namespace hitch_examples {

/// The tier of instruction set that hitch's run-time dispatch picked for the codec kernels on this processor.
inline std::string_view kernel_isa() {
    switch (hitch::compress::detail::best_isa()) {
        case hitch::compress::detail::isa::avx512:
            return "avx512";
        case hitch::compress::detail::isa::avx2:
            return "avx2";
        case hitch::compress::detail::isa::baseline:
            break;
    }
    return "baseline";
}

/// The summary line (no newline).
inline std::string summary_line(const std::string& example, const train_config& config, int ranks, int nodes,
                                const std::vector<int>& ranks_per_node, const train_result& result) {
    nlohmann::ordered_json j;
    j["example"] = example;
    j["model"] = config.model;
    j["ranks"] = ranks;
    j["nodes"] = nodes;
    j["ranks_per_node"] = ranks_per_node;
    j["optimizer"] = config.optimizer;
    j["compressor"] = config.compressor;
    j["sync"] = config.sync;
    j["sync_options"] = sync_options_json(config);
    j["allreduce"] = config.allreduce;
    j["exchange"] = result.exchange;
    j["bucket_exchanges"] = result.bucket_exchanges;
    j["kernel_isa"] = std::string(kernel_isa());
    j["epochs"] = result.epochs_run;
    j["batch_size"] = config.batch_size;
    j["accumulate"] = config.accumulate;
    j["clip_grad_norm"] = config.clip_grad_norm;
    j["zero"] = config.zero;
    j["slow_rank"] = config.slow_rank;
    j["slow_ms"] = config.slow_ms;
    j["test_accuracy"] = result.test_accuracy;
    j["train_seconds"] = result.train_seconds;
    j["samples_per_s"] = result.samples_per_s;
    j["staleness_mean"] = result.staleness_mean;
    j["staleness_max"] = result.staleness_max;
    j["dropped_gradients"] = result.dropped_gradients;
    j["optimizer_state_bytes"] = result.optimizer_state_bytes;
    return j.dump();
}

}  // namespace hitch_examples
