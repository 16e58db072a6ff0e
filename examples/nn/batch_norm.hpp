#pragma once
// Batch normalisation over every channel of an NHWC batch (Ioffe & Szegedy 2015). With m = batch x h x w values
// per channel:
//   train   mu = mean(x), var = mean((x - mu)^2), xhat = (x - mu) / sqrt(var + eps), y = gamma xhat + beta;
//           running_mean += momentum (mu - running_mean), running_var likewise with the unbiased m/(m-1) var
//   eval    the same with the running statistics in place of mu and var
//   backward (train)  dx = gamma / (m sqrt(var + eps)) (m dy - sum dy - xhat sum(dy xhat))
//            (eval)   dx = gamma dy / sqrt(running_var + eps)
// Per-channel sums accumulate in double so that large batches of floats keep their precision.

#include <xtensor/xtensor.hpp>

#include <cmath>
#include <string>

#include "nn/layer.hpp"

namespace hitch_examples::nn {

struct batch_norm_options {
    double momentum = 0.1;  ///< weight of the newest batch in the running statistics, in (0, 1]
    double epsilon = 1e-5;
};

template <class T>
class batch_norm : public layer<T> {
public:
    explicit batch_norm(std::string name, batch_norm_options options = {})
        : name_(std::move(name)), options_(options) {
        if (!(options.momentum > 0.0 && options.momentum <= 1.0))
            throw std::invalid_argument("nn::batch_norm " + name_ + ": momentum = " +
                                        std::to_string(options.momentum) + " is outside (0, 1]");
        if (!(options.epsilon > 0.0))
            throw std::invalid_argument("nn::batch_norm " + name_ + ": epsilon must be positive");
    }

    shape setup(const shape& input, std::size_t max_batch) override {
        in_ = input;
        const std::size_t c = input.channels;
        gamma_ = xt::ones<T>({c});
        beta_ = xt::zeros<T>({c});
        gamma_grad_ = xt::zeros<T>({c});
        beta_grad_ = xt::zeros<T>({c});
        running_mean_ = xt::zeros<T>({c});
        running_var_ = xt::ones<T>({c});
        xhat_ = xt::xtensor<T, 1>::from_shape({max_batch * input.size()});
        inv_std_ = xt::zeros<T>({c});
        sum_ = xt::zeros<double>({c});
        sum2_ = xt::zeros<double>({c});
        mean_ = xt::zeros<double>({c});
        this->add_parameter(name_ + ".gamma", span_of(gamma_), span_of(gamma_grad_), true);
        this->add_parameter(name_ + ".beta", span_of(beta_), span_of(beta_grad_), true);
        this->add_buffer(name_ + ".running_mean", span_of(running_mean_));
        this->add_buffer(name_ + ".running_var", span_of(running_var_));
        return input;
    }

    void initialize(random_source& /*rng*/) override {
        gamma_.fill(T{1});
        beta_.fill(T{0});
        running_mean_.fill(T{0});
        running_var_.fill(T{1});
    }

    void forward(const T* x, T* y, const pass<T>& p) override {
        const std::size_t c = in_.channels, m = p.batch * in_.height * in_.width;
        if (p.mode == mode::train) {
            channel_sums(x, nullptr, m);
            const double n = static_cast<double>(m);
            for (std::size_t k = 0; k < c; ++k) {
                const double mean = sum_[k] / n;
                // E[x^2] - mean^2 in double: the cancellation costs nothing at the precision a float model keeps.
                const double var = std::max(0.0, sum2_[k] / n - mean * mean);
                inv_std_[k] = static_cast<T>(1.0 / std::sqrt(var + options_.epsilon));
                mean_[k] = mean;
                const double unbiased = m > 1 ? var * n / (n - 1.0) : var;
                running_mean_[k] = static_cast<T>((1.0 - options_.momentum) * running_mean_[k] + options_.momentum * mean);
                running_var_[k] = static_cast<T>((1.0 - options_.momentum) * running_var_[k] + options_.momentum * unbiased);
            }
        } else {
            for (std::size_t k = 0; k < c; ++k) {
                inv_std_[k] = static_cast<T>(1.0 / std::sqrt(static_cast<double>(running_var_[k]) + options_.epsilon));
                mean_[k] = static_cast<double>(running_mean_[k]);
            }
        }
        last_mode_ = p.mode;
        for (std::size_t r = 0; r < m; ++r)
            for (std::size_t k = 0; k < c; ++k) {
                const std::size_t i = r * c + k;
                const T xh = (x[i] - static_cast<T>(mean_[k])) * inv_std_[k];
                xhat_[i] = xh;
                y[i] = gamma_[k] * xh + beta_[k];
            }
    }

    void backward(const T* /*x*/, const T* /*y*/, const T* dy, T* dx, const pass<T>& p) override {
        const std::size_t c = in_.channels, m = p.batch * in_.height * in_.width;
        channel_sums(dy, xhat_.data(), m);  // sum_ = sum dy, sum2_ = sum dy xhat
        for (std::size_t k = 0; k < c; ++k) {
            beta_grad_[k] = static_cast<T>(sum_[k]);
            gamma_grad_[k] = static_cast<T>(sum2_[k]);
        }
        p.ready(1);
        p.ready(0);
        if (!dx) return;
        if (last_mode_ == mode::train) {
            const T inv_m = T{1} / static_cast<T>(m);
            for (std::size_t r = 0; r < m; ++r)
                for (std::size_t k = 0; k < c; ++k) {
                    const std::size_t i = r * c + k;
                    dx[i] = gamma_[k] * inv_std_[k] *
                            (dy[i] - inv_m * (beta_grad_[k] + xhat_[i] * gamma_grad_[k]));
                }
        } else {
            for (std::size_t r = 0; r < m; ++r)
                for (std::size_t k = 0; k < c; ++k) dx[r * c + k] = gamma_[k] * inv_std_[k] * dy[r * c + k];
        }
    }

    [[nodiscard]] std::string describe() const override { return "batch_norm " + name_ + ": " + in_.str(); }

private:
    /// sum_[k] = sum of a over channel k; sum2_[k] = sum of a * b (b given) or of a^2 (b null).
    void channel_sums(const T* a, const T* b, std::size_t rows) {
        const std::size_t c = in_.channels;
        sum_.fill(0.0);
        sum2_.fill(0.0);
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t k = 0; k < c; ++k) {
                const double v = static_cast<double>(a[r * c + k]);
                sum_[k] += v;
                sum2_[k] += v * (b ? static_cast<double>(b[r * c + k]) : v);
            }
    }

    std::string name_;
    batch_norm_options options_;
    shape in_;
    mode last_mode_ = mode::train;
    xt::xtensor<T, 1> gamma_, beta_, gamma_grad_, beta_grad_, running_mean_, running_var_, xhat_, inv_std_;
    xt::xtensor<double, 1> sum_, sum2_, mean_;
};

}  // namespace hitch_examples::nn
