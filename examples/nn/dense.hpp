#pragma once
// Fully connected layer: y = x W^T + b, one GEMM for the whole batch.

#include <xtensor/xtensor.hpp>

#include <string>

#include "nn/blas.hpp"
#include "nn/layer.hpp"

namespace hitch_examples::nn {

template <class T>
class dense : public layer<T> {
public:
    dense(std::string name, std::size_t outputs) : name_(std::move(name)), outputs_(outputs) {
        if (outputs == 0) throw std::invalid_argument("nn::dense " + name_ + ": outputs must be positive");
    }

    shape setup(const shape& input, std::size_t /*max_batch*/) override {
        inputs_ = input.size();
        weight_ = xt::xtensor<T, 2>::from_shape({outputs_, inputs_});
        weight_grad_ = xt::zeros<T>({outputs_, inputs_});
        bias_ = xt::zeros<T>({outputs_});
        bias_grad_ = xt::zeros<T>({outputs_});
        this->add_parameter(name_ + ".weight", span_of(weight_), span_of(weight_grad_), false, outputs_);
        this->add_parameter(name_ + ".bias", span_of(bias_), span_of(bias_grad_), true);
        return {1, 1, outputs_};
    }

    void initialize(random_source& rng) override {
        he_normal(span_of(weight_), inputs_, rng);
        bias_.fill(T{0});
    }

    void forward(const T* x, T* y, const pass<T>& p) override {
        gemm(false, true, p.batch, outputs_, inputs_, T{1}, x, inputs_, weight_.data(), inputs_, T{0}, y, outputs_);
        add_to_rows(y, p.batch, outputs_, bias_.data());
    }

    void backward(const T* x, const T* /*y*/, const T* dy, T* dx, const pass<T>& p) override {
        // db = sum over the batch of dy; dW = dy^T x; dx = dy W. The gradients are reported before dx is computed
        // so that their communication overlaps the rest of the backward pass.
        sum_rows(dy, p.batch, outputs_, bias_grad_.data());
        p.ready(1);
        gemm(true, false, outputs_, inputs_, p.batch, T{1}, dy, outputs_, x, inputs_, T{0}, weight_grad_.data(),
             inputs_);
        p.ready(0);
        if (dx)
            gemm(false, false, p.batch, inputs_, outputs_, T{1}, dy, outputs_, weight_.data(), inputs_, T{0}, dx,
                 inputs_);
    }

    [[nodiscard]] std::string describe() const override {
        return "dense " + name_ + ": " + std::to_string(inputs_) + " -> " + std::to_string(outputs_);
    }

private:
    std::string name_;
    std::size_t outputs_, inputs_ = 0;
    xt::xtensor<T, 2> weight_, weight_grad_;  // outputs x inputs
    xt::xtensor<T, 1> bias_, bias_grad_;
};

}  // namespace hitch_examples::nn
