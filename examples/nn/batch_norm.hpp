#pragma once
// Batch normalisation over every channel of an NHWC batch (Ioffe & Szegedy 2015). With m = batch x h x w values
// per channel:
//   train   mu = mean(x), var = mean((x - mu)^2), xhat = (x - mu) / sqrt(var + eps), y = gamma xhat + beta;
//           running_mean += momentum (mu - running_mean), running_var likewise with the unbiased m/(m-1) var
//   eval    the same with the running statistics in place of mu and var
//   backward (train)  dx = gamma / (m sqrt(var + eps)) (m dy - sum dy - xhat sum(dy xhat))
//            (eval)   dx = gamma dy / sqrt(running_var + eps)
// Per-channel sums accumulate in double so that large batches of floats keep their precision. xhat is not stored:
// backward recomputes what it needs from x, so both passes are per-channel affine maps that vectorise.

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
    explicit batch_norm(std::string name, batch_norm_options options = {}) : name_(std::move(name)), options_(options) {
        if (!(options.momentum > 0.0 && options.momentum <= 1.0))
            throw std::invalid_argument("nn::batch_norm " + name_ + ": momentum = " + std::to_string(options.momentum) +
                                        " is outside (0, 1]");
        if (!(options.epsilon > 0.0))
            throw std::invalid_argument("nn::batch_norm " + name_ + ": epsilon must be positive");
    }

    shape setup(const shape& input, std::size_t /*max_batch*/) override {
        in_ = input;
        const std::size_t c = input.channels;
        gamma_ = xt::ones<T>({c});
        beta_ = xt::zeros<T>({c});
        gamma_grad_ = xt::zeros<T>({c});
        beta_grad_ = xt::zeros<T>({c});
        running_mean_ = xt::zeros<T>({c});
        running_var_ = xt::ones<T>({c});
        for (auto* v : {&mean_, &inv_std_, &a_, &b_, &c_}) *v = xt::zeros<T>({c});
        sum_ = xt::zeros<double>({c});
        sum2_ = xt::zeros<double>({c});
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
            channel_sums(x, x, m);
            const double n = static_cast<double>(m);
            for (std::size_t k = 0; k < c; ++k) {
                const double mean = sum_[k] / n;
                // E[x^2] - mean^2 from double sums of exact float products: one pass over x, and accurate unless
                // |mean| exceeds the standard deviation by many orders of magnitude, which batch-norm inputs do not.
                const double var = std::max(0.0, sum2_[k] / n - mean * mean);
                const double unbiased = m > 1 ? var * n / (n - 1.0) : var;
                mean_[k] = static_cast<T>(mean);
                inv_std_[k] = static_cast<T>(1.0 / std::sqrt(var + options_.epsilon));
                const double keep = 1.0 - options_.momentum;
                running_mean_[k] = static_cast<T>(keep * running_mean_[k] + options_.momentum * mean);
                running_var_[k] = static_cast<T>(keep * running_var_[k] + options_.momentum * unbiased);
            }
        } else {
            for (std::size_t k = 0; k < c; ++k) {
                mean_[k] = running_mean_[k];
                inv_std_[k] = static_cast<T>(1.0 / std::sqrt(static_cast<double>(running_var_[k]) + options_.epsilon));
            }
        }
        last_mode_ = p.mode;
        // y = gamma xhat + beta = a x + b per channel.
        for (std::size_t k = 0; k < c; ++k) {
            a_[k] = gamma_[k] * inv_std_[k];
            b_[k] = beta_[k] - mean_[k] * a_[k];
        }
        affine(x, nullptr, y, m);
    }

    void backward(const T* x, const T* /*y*/, const T* dy, T* dx, const pass<T>& p) override {
        // With xhat = (x - mean) inv_std:  dbeta = sum dy,  dgamma = sum dy xhat = inv_std (sum dy x - mean sum dy).
        const std::size_t c = in_.channels, m = p.batch * in_.height * in_.width;
        channel_sums(dy, x, m);
        for (std::size_t k = 0; k < c; ++k) {
            beta_grad_[k] = static_cast<T>(sum_[k]);
            const double mean = mean_[k];
            gamma_grad_[k] = static_cast<T>(static_cast<double>(inv_std_[k]) * (sum2_[k] - mean * sum_[k]));
        }
        p.ready(1);
        p.ready(0);
        if (!dx) return;
        // Training: dx = s (dy - (dbeta + xhat dgamma) / m) with s = gamma inv_std, which is a dy + b x + c with
        //   a = s, b = -s inv_std dgamma / m, c = -s dbeta / m - b mean.   Evaluation: dx = s dy.
        const T inv_m = last_mode_ == mode::train ? T{1} / static_cast<T>(m) : T{0};
        for (std::size_t k = 0; k < c; ++k) {
            a_[k] = gamma_[k] * inv_std_[k];
            b_[k] = -a_[k] * inv_std_[k] * gamma_grad_[k] * inv_m;
            c_[k] = -a_[k] * beta_grad_[k] * inv_m - b_[k] * mean_[k];
        }
        affine(dy, x, dx, m);
    }

    [[nodiscard]] std::string describe() const override { return "batch_norm " + name_ + ": " + in_.str(); }

private:
    /// out = a u + b (v null), or out = a u + b v + c, per channel. Few pointers, so the channel loop vectorises.
    void affine(const T* u, const T* v, T* out, std::size_t rows) const {
        const std::size_t c = in_.channels;
        const T *a = a_.data(), *b = b_.data(), *cc = c_.data();
        for (std::size_t r = 0; r < rows; ++r) {
            const T* ur = u + r * c;
            T* o = out + r * c;
            if (v) {
                const T* vr = v + r * c;
                for (std::size_t k = 0; k < c; ++k) o[k] = a[k] * ur[k] + b[k] * vr[k] + cc[k];
            } else {
                for (std::size_t k = 0; k < c; ++k) o[k] = a[k] * ur[k] + b[k];
            }
        }
    }

    /// sum_[k] = sum of u over channel k, sum2_[k] = sum of u v, both in double.
    void channel_sums(const T* u, const T* v, std::size_t rows) {
        const std::size_t c = in_.channels;
        double *sum = sum_.data(), *sum2 = sum2_.data();
        std::fill_n(sum, c, 0.0);
        std::fill_n(sum2, c, 0.0);
        for (std::size_t r = 0; r < rows; ++r) {
            const T *ur = u + r * c, *vr = v + r * c;
            for (std::size_t k = 0; k < c; ++k) {
                sum[k] += static_cast<double>(ur[k]);
                sum2[k] += static_cast<double>(ur[k]) * static_cast<double>(vr[k]);
            }
        }
    }

    std::string name_;
    batch_norm_options options_;
    shape in_;
    mode last_mode_ = mode::train;
    xt::xtensor<T, 1> gamma_, beta_, gamma_grad_, beta_grad_, running_mean_, running_var_;
    xt::xtensor<T, 1> mean_, inv_std_;  // of the last forward: batch statistics (train) or running ones (eval)
    xt::xtensor<T, 1> a_, b_, c_;       // per-channel coefficients of the affine pass
    xt::xtensor<double, 1> sum_, sum2_;
};

}  // namespace hitch_examples::nn
