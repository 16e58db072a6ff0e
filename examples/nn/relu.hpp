#pragma once
// Rectified linear unit: y = max(x, 0), dx = dy where y > 0.

#include <cstddef>
#include <string>

#include "nn/layer.hpp"

namespace hitch_examples::nn {

template <class T>
void relu_forward(const T* x, T* y, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) y[i] = x[i] > T{0} ? x[i] : T{0};
}

/// dx = dy masked by y > 0 (dx may be dy itself).
template <class T>
void relu_backward(const T* y, const T* dy, T* dx, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        const T g = dy[i];  // read unconditionally, so the loop vectorises into a compare and a mask
        dx[i] = y[i] > T{0} ? g : T{0};
    }
}

template <class T>
class relu : public layer<T> {
public:
    shape setup(const shape& input, std::size_t /*max_batch*/) override {
        shape_ = input;
        return input;
    }
    void forward(const T* x, T* y, const pass<T>& p) override { relu_forward(x, y, p.batch * shape_.size()); }
    void backward(const T* /*x*/, const T* y, const T* dy, T* dx, const pass<T>& p) override {
        if (dx) relu_backward(y, dy, dx, p.batch * shape_.size());
    }
    [[nodiscard]] std::string describe() const override { return "relu: " + shape_.str(); }

private:
    shape shape_;
};

}  // namespace hitch_examples::nn
