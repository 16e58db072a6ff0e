#pragma once
// lr::batch_size_schedule: grow the batch instead of decaying the rate (Smith, Kindermans, Ying and Le 2017,
// "Don't Decay the Learning Rate, Increase the Batch Size"). SGD's noise scale is about lr * N / B (N the data
// set size, B the batch), so multiplying B by k at a milestone has the effect of dividing lr by k, with k times
// fewer (and larger, better parallelised) steps. Once the batch would exceed max_batch, the rate decays instead.
//
//   at epoch e, with j = the number of milestones m <= e:
//     grows = the largest i <= j with base_batch * factor^i <= max_batch
//     B(e)  = base_batch * factor^grows
//     lr(e) = base_lr / factor^(j - grows)
//
// Milestones are whole epochs, so the batch is constant through an epoch and an epoch has
// ceil(N / B(e)) steps. Every function is pure: step -> epoch walks the milestone segments.

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hitch/core/options.hpp"
#include "hitch/optim/lr/schedule.hpp"

namespace hitch::lr {

class batch_size_schedule {
public:
    struct options_type {
        std::uint64_t base_batch = 128;
        double base_lr = 0.1;
        /// Whole epochs, strictly increasing, >= 1.
        std::vector<std::uint64_t> milestones = {60, 120, 160};
        /// The factor the batch grows by (or the rate shrinks by), an integer >= 2 (Smith et al. use 5).
        std::uint64_t factor = 5;
        /// The largest batch the hardware allows, >= base_batch.
        std::uint64_t max_batch = 128 * 125;

        void validate() const {
            const option_validator v("hitch::lr::batch_size_schedule");
            v.at_least("base_batch", base_batch, std::uint64_t{1})
                .positive("base_lr", base_lr)
                .at_least("factor", factor, std::uint64_t{2})
                .at_least("max_batch", max_batch, base_batch);
            for (std::size_t i = 0; i < milestones.size(); ++i) {
                v.at_least("milestones[" + std::to_string(i) + "]", milestones[i], std::uint64_t{1});
                if (i > 0)
                    v.require(milestones[i] > milestones[i - 1], "milestones[" + std::to_string(i) + "]", milestones[i],
                              "(milestones[i-1], inf): milestones must increase");
            }
        }
    };

    explicit batch_size_schedule(options_type o) : o_(std::move(o)) { o_.validate(); }

    /// The batch size during (whole) epoch `epoch`.
    [[nodiscard]] std::uint64_t batch_size(std::uint64_t epoch) const { return batch_after(passed(epoch)); }
    /// The learning rate during epoch `epoch`.
    [[nodiscard]] double learning_rate(std::uint64_t epoch) const {
        const std::uint64_t j = passed(epoch);
        return o_.base_lr / std::pow(static_cast<double>(o_.factor), static_cast<double>(j - grows(j)));
    }
    /// Steps in epoch `epoch` over a data set of `dataset_size` examples: ceil(N / B).
    [[nodiscard]] std::uint64_t steps_in_epoch(std::uint64_t epoch, std::uint64_t dataset_size) const {
        check_dataset(dataset_size);
        const std::uint64_t b = batch_size(epoch);
        return (dataset_size + b - 1) / b;
    }
    /// The epoch that global step `step` (from 0) falls in.
    [[nodiscard]] std::uint64_t epoch_at_step(std::uint64_t step, std::uint64_t dataset_size) const {
        check_dataset(dataset_size);
        std::uint64_t epoch = 0;  // start of the current segment
        for (std::size_t i = 0; i <= o_.milestones.size(); ++i) {
            const std::uint64_t per_epoch = steps_in_epoch(epoch, dataset_size);
            if (i == o_.milestones.size()) return epoch + step / per_epoch;
            const std::uint64_t span = o_.milestones[i] - epoch;
            if (step < span * per_epoch) return epoch + step / per_epoch;
            step -= span * per_epoch;
            epoch = o_.milestones[i];
        }
        return epoch;
    }
    [[nodiscard]] std::uint64_t batch_size_at_step(std::uint64_t step, std::uint64_t dataset_size) const {
        return batch_size(epoch_at_step(step, dataset_size));
    }
    [[nodiscard]] double learning_rate_at_step(std::uint64_t step, std::uint64_t dataset_size) const {
        return learning_rate(epoch_at_step(step, dataset_size));
    }

private:
    [[nodiscard]] std::uint64_t passed(std::uint64_t epoch) const {
        std::uint64_t j = 0;
        for (std::uint64_t m : o_.milestones)
            if (epoch >= m) ++j;
        return j;
    }
    [[nodiscard]] std::uint64_t grows(std::uint64_t j) const {
        std::uint64_t b = o_.base_batch, i = 0;
        while (i < j && b <= o_.max_batch / o_.factor) {
            b *= o_.factor;
            ++i;
        }
        return i;
    }
    [[nodiscard]] std::uint64_t batch_after(std::uint64_t j) const {
        std::uint64_t b = o_.base_batch;
        for (std::uint64_t i = grows(j); i > 0; --i) b *= o_.factor;
        return b;
    }
    static void check_dataset(std::uint64_t n) {
        option_validator("hitch::lr::batch_size_schedule").at_least("dataset_size", n, std::uint64_t{1});
    }

    options_type o_;
};

}  // namespace hitch::lr
