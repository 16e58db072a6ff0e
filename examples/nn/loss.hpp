#pragma once
// Softmax cross-entropy, fused and numerically stable. For logits z of one sample and its label t:
//   loss = log sum_j exp(z_j - max z) - (z_t - max z),     dloss/dz_j = softmax(z)_j - [j == t]
// The batch loss is the mean over samples, so the gradient is divided by the batch size.

#include <xtensor/xtensor.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

namespace hitch_examples::nn {

template <class T>
class softmax_cross_entropy {
public:
    softmax_cross_entropy(std::size_t max_batch, std::size_t classes)
        : classes_(classes), gradient_(xt::xtensor<T, 1>::from_shape({max_batch * classes})) {
        if (classes < 2) throw std::invalid_argument("nn::softmax_cross_entropy: at least 2 classes are needed");
    }

    /// Mean loss of the batch (labels.size() samples); leaves dloss/dlogits in gradient() and the number of
    /// samples whose largest logit is their label in correct().
    T forward(std::span<const T> logits, std::span<const std::int32_t> labels) {
        const std::size_t batch = labels.size();
        if (batch == 0 || batch * classes_ > gradient_.size() || logits.size() < batch * classes_)
            throw std::invalid_argument("nn::softmax_cross_entropy: " + std::to_string(batch) + " labels for " +
                                        std::to_string(logits.size()) + " logits of " + std::to_string(classes_) +
                                        " classes (capacity " + std::to_string(gradient_.size() / classes_) +
                                        " samples)");
        batch_ = batch;
        correct_ = 0;
        double total = 0.0;
        const T inv_batch = T{1} / static_cast<T>(batch);
        for (std::size_t b = 0; b < batch; ++b) {
            const std::int32_t label = labels[b];
            if (label < 0 || static_cast<std::size_t>(label) >= classes_)
                throw std::out_of_range("nn::softmax_cross_entropy: label " + std::to_string(label) + " of sample " +
                                        std::to_string(b) + " is outside [0, " + std::to_string(classes_) + ")");
            const T* z = logits.data() + b * classes_;
            T* g = gradient_.data() + b * classes_;
            std::size_t best = 0;
            for (std::size_t j = 1; j < classes_; ++j)
                if (z[j] > z[best]) best = j;
            const T top = z[best];
            T sum{0};
            for (std::size_t j = 0; j < classes_; ++j) sum += (g[j] = std::exp(z[j] - top));
            for (std::size_t j = 0; j < classes_; ++j) g[j] *= inv_batch / sum;
            g[label] -= inv_batch;
            total += static_cast<double>(std::log(sum) - (z[label] - top));
            correct_ += best == static_cast<std::size_t>(label);
        }
        return static_cast<T>(total / static_cast<double>(batch));
    }

    /// dloss/dlogits of the last forward, batch x classes.
    [[nodiscard]] std::span<const T> gradient() const { return {gradient_.data(), batch_ * classes_}; }
    [[nodiscard]] std::size_t correct() const { return correct_; }
    [[nodiscard]] std::size_t classes() const { return classes_; }

private:
    std::size_t classes_;
    xt::xtensor<T, 1> gradient_;
    std::size_t batch_ = 0, correct_ = 0;
};

}  // namespace hitch_examples::nn
