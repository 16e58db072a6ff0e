#pragma once
// Uneven inputs (options.uneven_inputs; PyTorch DDP's Join): ranks whose data runs out before the others' call
// join(), which runs steps with zero gradients until every rank has joined. Each such step is a whole step on that
// rank (the same exchanges, the same optimizer update on the same averaged gradient), so replicas and optimizer
// states stay identical and every rank ends at the same step. Every synchronised step counts the ranks that still
// train with one small gather on the control communicator, before the policy's step; a joined rank takes part in
// that count before each of its zero steps, and a count of 0 (every rank has joined) ends join() on every rank at
// once, with no step.
//
// The mean: a joined rank adds zeros to the exchange's average over all p ranks. By default the average is then
// scaled by p / (ranks that trained), the mean over the samples of the step as one global batch would have it;
// join_averages_over_all_ranks keeps the zeros in (DDP's default, divide_by_initial_world_size).

#include <algorithm>
#include <cstddef>
#include <span>

#include "hitch/comm/agree.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/train/engine.hpp"

namespace hitch::train::detail {

template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
void engine<O, X, P, S, C, D, Param>::count_training_ranks() {
    training_ranks_ = 0;
    if (!options_.uneven_inputs) return;
    auto span = trace("count training ranks", "comm");
    const auto flags = comm::allgather_value(control_, static_cast<unsigned char>(joined_ ? 0 : 1));
    training_ranks_ = static_cast<int>(std::count(flags.begin(), flags.end(), static_cast<unsigned char>(1)));
}

template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
void engine<O, X, P, S, C, D, Param>::rescale_for_joined_ranks(std::span<const unsigned char> skip) {
    const int p = control_.size();
    if (training_ranks_ <= 0 || training_ranks_ == p || options_.join_averages_over_all_ranks) return;
    auto span = trace("rescale for joined ranks", "compute");
    const float factor = static_cast<float>(p) / static_cast<float>(training_ranks_);
    // Under ZeRO-2 a rank holds only its pieces of the average; they are what the optimizer reads.
    const auto scale = [&](float* g, std::size_t n) {
        if constexpr (on_host) {
            parallel_for(
                n,
                [&](std::size_t b, std::size_t e) {
                    for (std::size_t i = b; i < e; ++i) g[i] *= factor;
                },
                options_.execution);
        } else {
            buckets_.scale(g, n, factor);  // the same product per element, on the device
        }
    };
    if (options_.zero_stage == 2) {
        for (const optim::piece& pc : own_pieces_)
            if (skip.empty() || skip[pc.layer] == 0) scale(layers32()[pc.layer].grads.data() + pc.begin, pc.size());
    } else {
        for (std::size_t k = 0; k < layers32().size(); ++k)
            if (skip.empty() || skip[k] == 0) scale(layers32()[k].grads.data(), layers32()[k].size());
    }
}

template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
void engine<O, X, P, S, C, D, Param>::join() {
    if (!options_.uneven_inputs)
        throw config_error(
            "hitch::data_parallel::join: set options.uneven_inputs = true on every rank to let ranks join (without "
            "it every rank must take the same steps)");
    require_idle("join");
    joined_ = true;
    try {
        for (;;) {
            count_training_ranks();           // this rank's 0 meets the count at the start of the others' step
            if (training_ranks_ == 0) break;  // every rank has joined: no step, on any rank
            if constexpr (on_host) {
                for (const user_layer& l : weights_.user_layers())
                    std::fill(l.grads.data(), l.grads.data() + l.grads.size(),
                              typename decltype(l.grads)::value_type{});
            } else {
                buckets_.zero_user_gradients();  // on the model's stream, before the step's shared event
            }
            (void)step(std::nullopt);  // a whole step with zero gradients
        }
    } catch (...) {
        joined_ = false;
        throw;
    }
    joined_ = false;
}

}  // namespace hitch::train::detail
