#pragma once
// How a layer's gradient enters data_parallel's step: unscaled (loss scaling) and converted to FP32 (mixed
// precision) into the FP32 gradient the exchange and the optimizer use, checked for non-finite values, zero for a
// layer the step did not use (find_unused_layers), and, under gradient accumulation, added up over the micro-batches
// of a window: the first K - 1 micro-batches go into an FP32 sum, the K-th takes the mean (sum + last) / K.
//
// A non-finite micro-batch marks its layer bad for the whole window, so the window's step is skipped (or reported)
// as one step on the concatenated batch would be; the sum itself is not trusted afterwards.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "hitch/amp/loss_scaler.hpp"
#include "hitch/amp/nonfinite.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/device.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/train/master_weights.hpp"

namespace hitch::train::detail {

/// What a layer's gradient looked like when it came in.
struct intake_verdict {
    bool bad = false;                        // overflow under loss scaling, or a non-finite element
    amp::detail::nonfinite_report report{};  // without loss scaling: the first non-finite element
};

template <floating_element Param, device D, communicator C>
class gradient_intake {
public:
    gradient_intake(master_weights<Param, D>& weights, std::optional<amp::loss_scaler<C>>& scaler, std::uint64_t window,
                    const parallel_options& exec)
        : weights_(weights), scaler_(scaler), window_(window), exec_(exec) {
        if (window_ > 1) {
            sums_.resize(weights_.layers().size());
            sticky_.resize(weights_.layers().size());
        }
    }

    /// Micro-batches per optimizer step.
    [[nodiscard]] std::uint64_t window() const noexcept { return window_; }
    /// Micro-batches of the present window already added up.
    [[nodiscard]] std::uint64_t taken() const noexcept { return taken_; }
    /// The next step() is the last micro-batch of its window: it exchanges and applies.
    [[nodiscard]] bool at_boundary() const noexcept { return taken_ + 1 >= window_; }
    /// Bytes of the accumulation sums.
    [[nodiscard]] std::size_t bytes() const noexcept {
        std::size_t n = 0;
        for (const auto& s : sums_) n += s.size() * sizeof(float);
        return n;
    }

    /// Layer k's gradient of this micro-batch, FP32 and unscaled, into the FP32 gradient; at the window's last
    /// micro-batch, the mean over the window. `unused`: the step did not produce it (zeros).
    intake_verdict take(std::size_t k, bool unused) {
        intake_verdict v = take_own(k, unused);
        if (window_ == 1) return v;
        const hitch::layer& l = weights_.layers()[k];
        const std::vector<float>& sum = sums_[k];
        if (taken_ > 0) {
            const float n = static_cast<float>(taken_ + 1);
            float* g = l.grads.data();
            for (std::size_t e = 0; e < l.size(); ++e) g[e] = (sum[e] + g[e]) / n;
        }
        merge(v, sticky_[k]);
        return v;
    }

    /// Adds layer k's gradient of a micro-batch that is not the window's last to the sum.
    void add(std::size_t k, bool unused) {
        const intake_verdict v = take_own(k, unused);
        const hitch::layer& l = weights_.layers()[k];
        std::vector<float>& sum = sums_[k];
        if (taken_ == 0) {
            sum.assign(l.grads.data(), l.grads.data() + l.size());
            sticky_[k] = v;
        } else {
            const float* g = l.grads.data();
            for (std::size_t e = 0; e < l.size(); ++e) sum[e] += g[e];
            merge(sticky_[k], v);
        }
    }

    /// One more micro-batch of the window is added up.
    void micro_batch_done() noexcept { ++taken_; }
    /// The window is over (its step applied or skipped): the next micro-batch starts a new one.
    void end_window() noexcept { taken_ = 0; }

private:
    static void merge(intake_verdict& into, const intake_verdict& from) {
        into.bad |= from.bad;
        if (into.report.layer < 0) into.report = from.report;
    }

    intake_verdict take_own(std::size_t k, bool unused) {
        const hitch::layer& l = weights_.layers()[k];
        intake_verdict v;
        if (unused) {
            std::fill(l.grads.data(), l.grads.data() + l.size(), 0.0f);
            return v;
        }
        if constexpr (master_weights<Param, D>::mixed_precision) {
            const auto& low = weights_.user_layers()[k];
            if (scaler_) {
                v.bad = scaler_->unscale(tensor_view<const Param>(low.grads.data(), low.grads.size()), l.grads);
            } else {
                for (std::size_t e = 0; e < l.size(); ++e) l.grads[e] = static_cast<float>(low.grads[e]);
            }
        } else if (scaler_) {
            v.bad = scaler_->unscale(l.grads);
        }
        if (!scaler_) {
            const std::size_t bad =
                amp::detail::first_nonfinite(tensor_view<const float>(l.grads.data(), l.size()), exec_);
            if (bad != amp::detail::npos) {
                v.bad = true;
                v.report = {static_cast<std::int64_t>(k), static_cast<std::int64_t>(bad), l.grads[bad]};
            }
        }
        return v;
    }

    master_weights<Param, D>& weights_;
    std::optional<amp::loss_scaler<C>>& scaler_;
    std::uint64_t window_;
    parallel_options exec_;
    std::uint64_t taken_ = 0;
    std::vector<std::vector<float>> sums_;  // per layer, the window's sum so far (accumulation only)
    std::vector<intake_verdict> sticky_;    // per layer, what the window's earlier micro-batches looked like
};

}  // namespace hitch::train::detail
