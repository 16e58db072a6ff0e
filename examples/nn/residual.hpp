#pragma once
// A basic residual block (He et al. 2016, "Deep residual learning for image recognition"):
//   y = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))
// conv1 is 3x3 with the block's stride, conv2 3x3 with stride 1, neither with bias. The shortcut is the identity
// when shapes agree, else a 1x1 convolution with the stride followed by batch norm (the projection, option B).
// Parameters, in order: conv1.weight, bn1.gamma, bn1.beta, conv2.weight, bn2.gamma, bn2.beta and, with a
// projection, shortcut.weight, shortcut_bn.gamma, shortcut_bn.beta. Backward finishes them in reverse order.

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

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
        if (stride_ != 1 || input.channels != out_channels_) {
            shortcut_.emplace(name_ + ".shortcut", out_channels_, 1,
                              conv2d_options{.stride = stride_, .padding = 0, .bias = false});
            shortcut_bn_.emplace(name_ + ".shortcut_bn");
            shortcut_->setup(input, max_batch);
            shortcut_bn_->setup(out_, max_batch);
        }
        std::size_t first = 0;  // each child's first parameter among the block's
        for (auto* child : all_children()) {
            first_parameter_.push_back(first);
            first += child->parameters().size();
            this->adopt(*child);
            workspace_ = std::max(workspace_, child->workspace_size());
        }
        const auto buffer = [&] { return xt::xtensor<T, 1>::from_shape({max_batch * out_.size()}); };
        for (auto* b : {&a_, &h_, &d_, &g_, &t_, &u_}) *b = buffer();
        if (shortcut_) s1_ = buffer(), s2_ = buffer();
        w_ = xt::xtensor<T, 1>::from_shape({max_batch * in_.size()});
        return out_;
    }

    [[nodiscard]] std::size_t workspace_size() const override { return workspace_; }

    void initialize(random_source& rng) override {
        for (auto* child : all_children()) child->initialize(rng);
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
        if (shortcut_) {                     // the last parameters: finished first
            shortcut_bn_->backward(s1_.data(), s2_.data(), g_.data(), t_.data(), child_pass(p, 5));
            shortcut_->backward(x, s1_.data(), t_.data(), dx, child_pass(p, 4));
        }
        bn2_.backward(d_.data(), y, g_.data(), t_.data(), child_pass(p, 3));
        conv2_.backward(h_.data(), d_.data(), t_.data(), u_.data(), child_pass(p, 2));
        relu_backward(h_.data(), u_.data(), u_.data(), n);
        bn1_.backward(a_.data(), h_.data(), u_.data(), t_.data(), child_pass(p, 1));
        if (!dx) {
            conv1_.backward(x, a_.data(), t_.data(), nullptr, child_pass(p, 0));
            return;
        }
        // dx = conv1's dx + the skip's dx (already in dx with a projection, g itself with the identity).
        conv1_.backward(x, a_.data(), t_.data(), w_.data(), child_pass(p, 0));
        const T *main = w_.data(), *skip = shortcut_ ? dx : g_.data();
        for (std::size_t i = 0, m = p.batch * in_.size(); i < m; ++i) dx[i] = main[i] + skip[i];
    }

    [[nodiscard]] std::string describe() const override {
        return "residual_block " + name_ + ": " + in_.str() + " -> " + out_.str() +
               (shortcut_ ? " (projection shortcut)" : " (identity shortcut)");
    }

private:
    /// conv1, bn1, conv2, bn2 and, with a projection, shortcut and shortcut_bn: the order of the parameters.
    std::vector<layer<T>*> all_children() {
        std::vector<layer<T>*> c{&conv1_, &bn1_, &conv2_, &bn2_};
        if (shortcut_) c.insert(c.end(), {&*shortcut_, &*shortcut_bn_});
        return c;
    }
    /// The pass for child i of all_children(): its parameter indices shifted to the block's.
    pass<T> child_pass(const pass<T>& p, std::size_t child) const {
        pass<T> q = p;
        q.ready = p.ready.shifted(first_parameter_[child]);
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
    std::vector<std::size_t> first_parameter_;  // per child of all_children()
    std::size_t workspace_ = 0;                 // the largest child's (they run one at a time)
    // Forward: a = conv1 x, h = relu(bn1 a), d = conv2 h, s1 = shortcut x, s2 = shortcut_bn s1.
    // Backward scratch: g, t, u (output-sized) and w (input-sized).
    xt::xtensor<T, 1> a_, h_, d_, s1_, s2_, g_, t_, u_, w_;
};

}  // namespace hitch_examples::nn
