#pragma once
// amp::loss_scaler<C>: loss scaling for mixed-precision training (Micikevicius et al. 2018, "Mixed Precision
// Training"). The loss is multiplied by S before the backward pass so small FP16 gradients do not flush to zero;
// the gradients are multiplied by 1/S (rounded to float once) before the optimizer sees them. If any gradient on
// any rank is inf or NaN, the step is skipped — parameters and optimizer state are left bitwise unchanged — and
// the scale backs off. The overflow flag is reduced across the communicator (comm::any_of), so every replica makes
// the same decision and replicas never diverge.
//
// Dynamic scaling (as torch.cuda.amp.GradScaler, with a floor and a ceiling):
//   overflow:  S = max(S * backoff_factor, min_scale);  good = 0
//   otherwise: good = good + 1;  if good == growth_interval: S = min(S * growth_factor, max_scale), good = 0
// Static scaling keeps S fixed and still skips steps that overflow.
//
//   hitch::amp::loss_scaler scaler(comm, {.initial_scale = 65536.0f});
//   loss *= scaler.scale();  backward();
//   bool applied = scaler.step(opt, lr);        // unscale, agree, step or skip, update the scale
//
// With a model_optimizer on a device the host cannot read (a GPU), step() unscales and checks there, by the
// device's kernels (amp/device_amp.hpp; hitch/cuda/amp/mixed_precision.cuh for CUDA).

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "hitch/amp/device_amp.hpp"
#include "hitch/amp/nonfinite.hpp"
#include "hitch/concepts/optimizer.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/options.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/optim/model_optimizer.hpp"

namespace hitch::amp {

enum class scaling { dynamic, fixed };

struct loss_scaler_options {
    scaling mode = scaling::dynamic;
    /// S at the start, in [min_scale, max_scale]. Powers of two keep unscaling exact.
    float initial_scale = 65536.0f;
    /// > 1.
    float growth_factor = 2.0f;
    /// In (0, 1).
    float backoff_factor = 0.5f;
    /// Finite steps in a row before S grows, >= 1.
    std::uint64_t growth_interval = 2000;
    /// > 0.
    float min_scale = 1.0f;
    float max_scale = 16777216.0f;  // 2^24
    parallel_options execution{};

    void validate() const {
        option_validator("hitch::amp::loss_scaler")
            .positive("min_scale", min_scale)
            .at_least("max_scale", max_scale, min_scale)
            .closed("initial_scale", initial_scale, min_scale, max_scale)
            .require(growth_factor > 1.0f && std::isfinite(growth_factor), "growth_factor", growth_factor, "(1, inf)")
            .open("backoff_factor", backoff_factor, 0.0f, 1.0f)
            .at_least("growth_interval", growth_interval, std::uint64_t{1});
        execution.validate();
    }
};

/// The part of a loss scaler's state a checkpoint must keep.
struct loss_scaler_state {
    float scale = 0.0f;
    std::uint64_t good_steps = 0;
    std::uint64_t skipped_steps = 0;
};

template <agreement_group C = single_process>
class loss_scaler {
public:
    using options_type = loss_scaler_options;

    loss_scaler(C& group, const options_type& options) : group_(&group), options_(options) { init(); }
    explicit loss_scaler(const options_type& options = {})
        requires std::same_as<C, single_process>
        : group_(&own_), options_(options) {
        init();
    }
    loss_scaler(const loss_scaler&) = delete;
    loss_scaler& operator=(const loss_scaler&) = delete;

    /// S: multiply the loss by it before the backward pass.
    [[nodiscard]] float scale() const noexcept { return state_.scale; }
    /// 1/S rounded to float, the factor unscale() applies.
    [[nodiscard]] float inverse_scale() const noexcept { return 1.0f / state_.scale; }
    [[nodiscard]] const loss_scaler_state& state() const noexcept { return state_; }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }
    /// Restores a state saved from state() (e.g. from a checkpoint).
    void set_state(const loss_scaler_state& s) {
        option_validator("hitch::amp::loss_scaler::set_state")
            .closed("scale", s.scale, options_.min_scale, options_.max_scale)
            .half_open("good_steps", s.good_steps, std::uint64_t{0}, options_.growth_interval);
        state_ = s;
    }

    /// g = g * (1/S) in place. Returns true when some element is (or became) inf or NaN on this rank.
    bool unscale(tensor_view<float> grads) const;
    /// out = float(in) * (1/S), from FP16/BF16 gradients into FP32 ones. Returns this rank's overflow flag.
    template <floating_element Low>
    bool unscale(tensor_view<const Low> in, tensor_view<float> out) const;

    /// Collective when C is a communicator: agrees on whether any rank overflowed, updates S, and returns true
    /// when the step should be applied (no rank overflowed).
    bool update(bool local_overflow) { return apply_agreed(detail::any_rank(*group_, local_overflow)); }
    /// update() for a caller that has already agreed with the other ranks on whether any overflowed (data_parallel
    /// runs that agreement as a call of its group): updates S and returns true when the step should be applied.
    bool apply_agreed(bool overflow) {
        if (overflow) {
            ++state_.skipped_steps;
            if (options_.mode == scaling::dynamic) {
                state_.scale = std::max(state_.scale * options_.backoff_factor, options_.min_scale);
                state_.good_steps = 0;
            }
            return false;
        }
        if (options_.mode == scaling::dynamic && ++state_.good_steps == options_.growth_interval) {
            state_.scale = std::min(state_.scale * options_.growth_factor, options_.max_scale);
            state_.good_steps = 0;
        }
        return true;
    }

    /// Unscales every layer's gradient in place, agrees with the other ranks, steps `opt` with rate `lr` if no
    /// rank overflowed, and updates S. Returns whether the step was applied. Collective.
    template <optimizer O, device D>
    bool step(optim::model_optimizer<O, D>& opt, float lr) {
        bool overflow = false;
        if constexpr (host_device<D>) {
            for (const hitch::layer& l : opt.layers()) overflow |= unscale(l.grads);
        } else {
            overflow = device_amp<D>::unscale(opt.device(), opt.layers(), inverse_scale());  // one pass, one flag
        }
        const bool apply = update(overflow);
        if (apply) opt.step(lr);
        return apply;
    }

private:
    void init() {
        options_.validate();
        state_.scale = options_.initial_scale;
    }

    single_process own_{};
    C* group_;
    options_type options_;
    loss_scaler_state state_{};
};

// ================================================ implementation ================================================

namespace detail {

/// out[i] = float(in[i]) * inv over static chunks; true when any result is inf or NaN.
template <class In>
bool scale_and_check(const In* in, float* out, std::size_t n, float inv, const parallel_options& exec) {
    const std::size_t chunks = n == 0 ? 0 : chunk_count(n, exec);
    std::vector<unsigned char> bad(chunks, 0);
    thread_pool& pool = exec.pool != nullptr ? *exec.pool : thread_pool::shared();
    pool.run(chunks, [&](std::size_t c) {
        const auto [b, e] = static_chunk(n, chunks, c, exec.align);
        bool flag = false;
        for (std::size_t i = b; i < e; ++i) {
            const float x = static_cast<float>(in[i]) * inv;
            out[i] = x;
            flag |= !(std::abs(x) <= std::numeric_limits<float>::max());  // inf or NaN
        }
        bad[c] = flag ? 1 : 0;
    });
    return std::any_of(bad.begin(), bad.end(), [](unsigned char b) { return b != 0; });
}

}  // namespace detail

template <agreement_group C>
bool loss_scaler<C>::unscale(tensor_view<float> grads) const {
    if (!grads.on_host()) throw config_error("hitch::amp::loss_scaler::unscale: gradients must be in host memory");
    return detail::scale_and_check(grads.data(), grads.data(), grads.size(), inverse_scale(), options_.execution);
}

template <agreement_group C>
template <floating_element Low>
bool loss_scaler<C>::unscale(tensor_view<const Low> in, tensor_view<float> out) const {
    if (in.size() != out.size())
        throw config_error(hitch::detail::concat("hitch::amp::loss_scaler::unscale: ", in.size(),
                                                 " low-precision gradients but ", out.size(), " outputs"));
    if (!in.on_host() || !out.on_host())
        throw config_error("hitch::amp::loss_scaler::unscale: gradients must be in host memory");
    return detail::scale_and_check(in.data(), out.data(), in.size(), inverse_scale(), options_.execution);
}

}  // namespace hitch::amp
