#pragma once
// A basic residual block (He et al. 2016, "Deep residual learning for image recognition"):
//   y = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))
// conv1 is 3x3 with the block's stride, conv2 3x3 with stride 1, neither with bias. The shortcut is the identity
// when shapes agree, else a 1x1 convolution with the stride followed by batch norm (the projection, option B).
// Parameters, in order: conv1.weight, bn1.gamma, bn1.beta, conv2.weight, bn2.gamma, bn2.beta and, with a
// projection, shortcut.weight, shortcut_bn.gamma, shortcut_bn.beta. Backward finishes them in reverse order.

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <array>
#include <optional>
#include <string>

#include "nn/batch_norm.hpp"
#include "nn/conv2d.hpp"
#include "nn/layer.hpp"
#include "nn/relu.hpp"

namespace hitch_examples::nn {

template <class T>
class residual_block : public layer<T> {
public:
    residual_block(std::string name, std::size_t out_channels, std::size_t stride = 1)
        : name_(std::move(name)),
          out_channels_(out_channels),
          stride_(stride),
          conv1_(name_ + ".conv1", out_channels, 3, {.stride = stride, .padding = 1, .bias = false}),
          bn1_(name_ + ".bn1"),
          conv2_(name_ + ".conv2", out_channels, 3, {.stride = 1, .padding = 1, .bias = false}),
          bn2_(name_ + ".bn2") {}

    shape setup(const shape& input, std::size_t max_batch) override {
        in_ = input;
        out_ = conv1_.setup(input, max_batch);
        bn1_.setup(out_, max_batch);
        conv2_.setup(out_, max_batch);
        bn2_.setup(out_, max_batch);
        for (auto* child : children()) this->adopt(*child);
        if (stride_ != 1 || input.channels != out_channels_) {
            shortcut_.emplace(name_ + ".shortcut", out_channels_, 1,
                              conv2d_options{.stride = stride_, .padding = 0, .bias = false});
            shortcut_bn_.emplace(name_ + ".shortcut_bn");
            shortcut_->setup(input, max_batch);
            shortcut_bn_->setup(out_, max_batch);
            this->adopt(*shortcut_);
            this->adopt(*shortcut_bn_);
        }
        const auto buffer = [&] { return xt::xtensor<T, 1>::from_shape({max_batch * out_.size()}); };
        for (auto* b : {&a_, &h_, &d_, &g_, &t_, &u_}) *b = buffer();
        if (shortcut_) s1_ = buffer(), s2_ = buffer();
        w_ = xt::xtensor<T, 1>::from_shape({max_batch * in_.size()});
        return out_;
    }

    [[nodiscard]] std::size_t workspace_size() const override {
        std::size_t n = 0;
        for (auto* child : children()) n = std::max(n, child->workspace_size());
        if (shortcut_) n = std::max(n, shortcut_->workspace_size());
        return n;
    }

    void initialize(random_source& rng) override {
        for (auto* child : children()) child->initialize(rng);
        if (shortcut_) {
            shortcut_->initialize(rng);
            shortcut_bn_->initialize(rng);
        }
    }

    void forward(const T* x, T* y, const pass<T>& p) override {
        const std::size_t n = p.batch * out_.size();
        conv1_.forward(x, a_.data(), p);
        bn1_.forward(a_.data(), h_.data(), p);
        relu_forward(h_.data(), h_.data(), n);
        conv2_.forward(h_.data(), d_.data(), p);
        bn2_.forward(d_.data(), y, p);
        const T* skip = x;
        if (shortcut_) {
            shortcut_->forward(x, s1_.data(), p);
            shortcut_bn_->forward(s1_.data(), s2_.data(), p);
            skip = s2_.data();
        }
        for (std::size_t i = 0; i < n; ++i) y[i] = std::max(y[i] + skip[i], T{0});
    }

    void backward(const T* x, const T* y, const T* dy, T* dx, const pass<T>& p) override {
        const std::size_t n = p.batch * out_.size();
        relu_backward(y, dy, g_.data(), n);  // g = dL/d(main + skip), shared by both branches
        const pass<T> conv1_pass = shifted(p, 0), bn1_pass = shifted(p, 1), conv2_pass = shifted(p, 3),
                      bn2_pass = shifted(p, 4);
        if (shortcut_) {  // the last parameters: finished first
            shortcut_bn_->backward(s1_.data(), s2_.data(), g_.data(), t_.data(), shifted(p, 7));
            shortcut_->backward(x, s1_.data(), t_.data(), dx, shifted(p, 6));
        }
        bn2_.backward(d_.data(), y, g_.data(), t_.data(), bn2_pass);
        conv2_.backward(h_.data(), d_.data(), t_.data(), u_.data(), conv2_pass);
        relu_backward(h_.data(), u_.data(), u_.data(), n);
        bn1_.backward(a_.data(), h_.data(), u_.data(), t_.data(), bn1_pass);
        if (!dx) {
            conv1_.backward(x, a_.data(), t_.data(), nullptr, conv1_pass);
            return;
        }
        // dx = conv1's dx + the skip's dx (already in dx with a projection, g itself with the identity).
        conv1_.backward(x, a_.data(), t_.data(), w_.data(), conv1_pass);
        const T* other = shortcut_ ? dx : g_.data();
        for (std::size_t i = 0, m = p.batch * in_.size(); i < m; ++i) dx[i] = w_[i] + other[i];
    }

    [[nodiscard]] std::string describe() const override {
        return "residual_block " + name_ + ": " + in_.str() + " -> " + out_.str() +
               (shortcut_ ? " (projection shortcut)" : " (identity shortcut)");
    }

private:
    std::array<layer<T>*, 4> children() { return {&conv1_, &bn1_, &conv2_, &bn2_}; }
    std::array<const layer<T>*, 4> children() const { return {&conv1_, &bn1_, &conv2_, &bn2_}; }
    static pass<T> shifted(const pass<T>& p, std::size_t by) {
        pass<T> q = p;
        q.ready = p.ready.shifted(by);
        return q;
    }

    std::string name_;
    std::size_t out_channels_, stride_;
    shape in_, out_;
    conv2d<T> conv1_;
    batch_norm<T> bn1_;
    conv2d<T> conv2_;
    batch_norm<T> bn2_;
    std::optional<conv2d<T>> shortcut_;
    std::optional<batch_norm<T>> shortcut_bn_;
    // Forward: a = conv1 x, h = relu(bn1 a), d = conv2 h, s1 = shortcut x, s2 = shortcut_bn s1.
    // Backward scratch: g, t, u (output-sized) and w (input-sized).
    xt::xtensor<T, 1> a_, h_, d_, s1_, s2_, g_, t_, u_, w_;
};

}  // namespace hitch_examples::nn
