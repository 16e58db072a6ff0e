#pragma once
// Flatten: h x w x c -> 1 x 1 x (h w c). NHWC batches are already flat per sample, so this only relabels the
// shape (and copies, because every layer of a model has its own output buffer).

#include <algorithm>
#include <string>

#include "nn/layer.hpp"

namespace hitch_examples::nn {

template <class T>
class flatten : public layer<T> {
public:
    shape setup(const shape& input, std::size_t /*max_batch*/) override {
        in_ = input;
        return {1, 1, input.size()};
    }
    void forward(const T* x, T* y, const pass<T>& p) override { std::copy_n(x, p.batch * in_.size(), y); }
    void backward(const T* /*x*/, const T* /*y*/, const T* dy, T* dx, const pass<T>& p) override {
        if (dx) std::copy_n(dy, p.batch * in_.size(), dx);
    }
    [[nodiscard]] std::string describe() const override {
        return "flatten: " + in_.str() + " -> " + std::to_string(in_.size());
    }

private:
    shape in_;
};

}  // namespace hitch_examples::nn
