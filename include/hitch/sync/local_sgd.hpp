#pragma once
// sync::local_sgd: periodic parameter averaging (model averaging; Zinkevich et al. 2010, "Parallelized Stochastic
// Gradient Descent"; local SGD, Stich 2019, Lin et al. 2020 "Don't Use Large Mini-Batches, Use Local SGD"). Each
// replica steps on its own gradients; every k steps the parameters — and, optionally, the optimizer state such as
// momentum — are averaged across ranks. Communication drops by a factor of k; between averages replicas drift
// apart, so staleness is the number of local steps since the last average. k = 1 without optimizer-state
// averaging equals hard sync for plain SGD (the average of p updated replicas is one update by the mean gradient).
//
// With block_momentum > 0 each average is filtered by block-wise model-update filtering (BMUF; Chen and Huo 2016,
// "Scalable training of deep learning machines by incremental block training with intra-block parallel
// optimization and blockwise model-update filtering"). With x the global model after the previous average:
//   G = mean over ranks of the parameters - x      the block's update
//   D = eta * D + zeta * G                         filtered with block momentum eta and block learning rate zeta
//   x = x + D
//   parameters = x + eta * D (Nesterov, the default) or x
// Each replica keeps x and D (two copies of the parameters, saved with the policy's state). eta = 0, zeta = 1 is
// plain model averaging; block_momentum = 0 takes the plain path itself, bit for bit. The global model starts as the
// mean of the parameters at the first step; data_parallel users start every rank from the same parameters.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/concepts/sync_policy.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/options.hpp"
#include "hitch/sync/detail/state.hpp"

namespace hitch::sync {

class local_sgd {
public:
    struct options_type {
        /// Local steps between parameter averages, >= 1.
        std::uint64_t period = 8;
        /// Also average the optimizer state (momentum, Adam's moments) at each average.
        bool average_optimizer_state = false;
        /// BMUF's block momentum eta, in [0, 1); 0: plain model averaging. Needs a step context with parameters
        /// (hitch::parameter_context: data_parallel's).
        double block_momentum = 0.0;
        /// BMUF's block learning rate zeta, > 0 (used when block_momentum > 0).
        double block_learning_rate = 1.0;
        /// Start each block from the global model plus eta times the filtered update (Nesterov-like) rather than
        /// from the global model (used when block_momentum > 0).
        bool nesterov = true;

        void validate() const {
            option_validator("hitch::sync::local_sgd")
                .closed("period", period, std::uint64_t{1}, std::uint64_t{1} << 32)
                .half_open("block_momentum", block_momentum, 0.0, 1.0)
                .positive("block_learning_rate", block_learning_rate);
        }
    };
    static constexpr std::string_view name = "local_sgd";
    static constexpr bool exchanges_gradients = false;

    local_sgd() = default;
    explicit local_sgd(const options_type& options) : options_(options) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    template <step_context Ctx>
    step_result step(Ctx& ctx);

    [[nodiscard]] std::uint64_t staleness() const noexcept { return since_average_; }
    void save_state(std::vector<std::byte>& blob) const;
    void load_state(std::span<const std::byte> blob);

private:
    [[nodiscard]] bool block_momentum() const noexcept { return options_.block_momentum > 0.0; }
    template <parameter_context Ctx>
    void start_blocks(Ctx& ctx);
    template <parameter_context Ctx>
    void filter_block(Ctx& ctx);
    static std::size_t parameter_count(std::span<const layer> layers);

    options_type options_{};
    std::uint64_t since_average_ = 0;
    // Block momentum only: the global model after the last average, and the filtered update D.
    std::vector<float> global_;
    std::vector<float> delta_;
    bool started_ = false;
};

static_assert(check_sync_policy<local_sgd>() && sync_policy<local_sgd>,
              "hitch::sync::local_sgd must model hitch::sync_policy");

// ---- implementation --------------------------------------------------------------------------------------------

template <step_context Ctx>
step_result local_sgd::step(Ctx& ctx) {
    if constexpr (parameter_context<Ctx>) {
        if (block_momentum() && !started_) start_blocks(ctx);
    } else if (block_momentum()) {
        throw config_error(hitch::detail::concat(
            "hitch::sync::local_sgd: option block_momentum = ", options_.block_momentum,
            " needs a step context that exposes the parameters (hitch::parameter_context, as data_parallel's)"));
    }
    if (!ctx.check_local_gradients()) return {false, false, since_average_};
    ctx.apply_optimizer();
    if (++since_average_ < options_.period) return {true, false, since_average_};
    ctx.average_parameters(options_.average_optimizer_state);
    if constexpr (parameter_context<Ctx>)
        if (block_momentum()) filter_block(ctx);
    since_average_ = 0;
    return {true, true, 0};
}

/// The global model starts as the mean of the parameters (collective: every rank's first step), D as zero.
template <parameter_context Ctx>
void local_sgd::start_blocks(Ctx& ctx) {
    const std::span<const layer> layers = ctx.parameters();
    global_.clear();
    global_.reserve(parameter_count(layers));
    for (const layer& l : layers) global_.insert(global_.end(), l.params.data(), l.params.data() + l.size());
    ctx.average(std::span<float>(global_));
    delta_.assign(global_.size(), 0.0f);
    started_ = true;
}

/// The parameters hold their mean over the ranks; filters the block's update into the global model (see the file
/// comment) and writes the start of the next block into the parameters. Every rank computes the same values.
template <parameter_context Ctx>
void local_sgd::filter_block(Ctx& ctx) {
    const std::span<const layer> layers = ctx.parameters();
    if (parameter_count(layers) != global_.size())
        throw mismatch_error(hitch::detail::concat("hitch::sync::local_sgd: the block-momentum state holds ",
                                                   global_.size(), " parameters, the model has ",
                                                   parameter_count(layers)));
    const auto eta = static_cast<float>(options_.block_momentum);
    const auto zeta = static_cast<float>(options_.block_learning_rate);
    std::size_t at = 0;
    for (const layer& l : layers)
        for (std::size_t i = 0; i < l.size(); ++i, ++at) {
            const float g = l.params[i] - global_[at];
            const float d = eta * delta_[at] + zeta * g;
            const float x = global_[at] + d;
            delta_[at] = d;
            global_[at] = x;
            l.params[i] = options_.nesterov ? x + eta * d : x;
        }
    ctx.parameters_changed();
}

inline std::size_t local_sgd::parameter_count(std::span<const layer> layers) {
    std::size_t n = 0;
    for (const layer& l : layers) n += l.size();
    return n;
}

/// Plain averaging writes the counter alone (state format 2, as before block momentum); block momentum adds the
/// global model and D (format 3; both empty before the first step).
inline void local_sgd::save_state(std::vector<std::byte>& blob) const {
    const std::array<std::uint64_t, 1> v{since_average_};
    if (!block_momentum()) {
        detail::save_counters(blob, name, v);
        return;
    }
    const std::array<std::span<const float>, 2> buffers{std::span<const float>(global_),
                                                        std::span<const float>(delta_)};
    detail::save_counters_and_buffers(blob, name, v, buffers);
}

inline void local_sgd::load_state(std::span<const std::byte> blob) {
    std::array<std::uint64_t, 1> v{};
    auto buffers = detail::load_counters_and_buffers(blob, name, v);
    if (v[0] >= options_.period)
        throw mismatch_error(hitch::detail::concat("hitch::sync::local_sgd: the saved state is ", v[0],
                                                   " steps into a period of ", options_.period));
    if (!block_momentum() && !buffers.empty())
        throw mismatch_error(
            "hitch::sync::local_sgd: the saved state has block-momentum buffers (it was saved with "
            "block_momentum > 0); this policy has block_momentum = 0");
    if (block_momentum() && buffers.size() != 2)
        throw mismatch_error(hitch::detail::concat(
            "hitch::sync::local_sgd: the saved state has no block-momentum buffers (it was saved with "
            "block_momentum = 0); this policy has block_momentum = ",
            options_.block_momentum));
    if (block_momentum() && buffers[0].size() != buffers[1].size())
        throw corrupt_message_error(
            hitch::detail::concat("hitch::sync::local_sgd: saved state: corrupt: the global model has ",
                                  buffers[0].size(), " parameters, the block momentum ", buffers[1].size()));
    since_average_ = v[0];
    if (block_momentum()) {
        global_ = std::move(buffers[0]);
        delta_ = std::move(buffers[1]);
        // Saved before the first step of a model with parameters: the first step starts the blocks.
        started_ = !global_.empty();
    }
}

}  // namespace hitch::sync
