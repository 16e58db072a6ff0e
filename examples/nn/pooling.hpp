#pragma once
// Max pooling over non-overlapping windows (2x2 by default) and global average pooling, on NHWC batches.

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "nn/layer.hpp"

namespace hitch_examples::nn {

/// y = max over each window x window block (stride = window; a ragged last row/column is dropped). Backward sends
/// dy to the element that was the maximum, remembered in forward.
template <class T>
class max_pool2d : public layer<T> {
public:
    explicit max_pool2d(std::size_t window = 2) : window_(window) {
        if (window == 0) throw std::invalid_argument("nn::max_pool2d: window must be positive");
    }

    shape setup(const shape& input, std::size_t max_batch) override {
        in_ = input;
        out_ = {input.height / window_, input.width / window_, input.channels};
        if (out_.height == 0 || out_.width == 0)
            throw std::invalid_argument("nn::max_pool2d: the input " + in_.str() + " is smaller than the " +
                                        std::to_string(window_) + "x" + std::to_string(window_) + " window");
        if (max_batch * in_.size() > std::numeric_limits<std::uint32_t>::max())
            throw std::invalid_argument("nn::max_pool2d: the batch is too large for 32-bit argmax indices");
        argmax_ = xt::xtensor<std::uint32_t, 1>::from_shape({max_batch * out_.size()});
        return out_;
    }

    void forward(const T* x, T* y, const pass<T>& p) override {
        const std::size_t c = in_.channels;
        std::size_t o = 0;  // first element of the current output pixel
        for (std::size_t b = 0; b < p.batch; ++b)
            for (std::size_t oh = 0; oh < out_.height; ++oh)
                for (std::size_t ow = 0; ow < out_.width; ++ow, o += c) {
                    T* out = y + o;
                    std::uint32_t* arg = argmax_.data() + o;
                    for (std::size_t i = 0; i < window_; ++i)
                        for (std::size_t j = 0; j < window_; ++j) {
                            const std::size_t at = ((b * in_.height + oh * window_ + i) * in_.width +
                                                    ow * window_ + j) * c;
                            const bool first = i == 0 && j == 0;
                            for (std::size_t k = 0; k < c; ++k)
                                if (first || x[at + k] > out[k]) {
                                    out[k] = x[at + k];
                                    arg[k] = static_cast<std::uint32_t>(at + k);
                                }
                        }
                }
    }

    void backward(const T* /*x*/, const T* /*y*/, const T* dy, T* dx, const pass<T>& p) override {
        if (!dx) return;
        std::fill_n(dx, p.batch * in_.size(), T{0});
        const std::size_t n = p.batch * out_.size();
        for (std::size_t i = 0; i < n; ++i) dx[argmax_[i]] += dy[i];
    }

    [[nodiscard]] std::string describe() const override {
        return "max_pool2d " + std::to_string(window_) + "x" + std::to_string(window_) + ": " + in_.str() + " -> " +
               out_.str();
    }

private:
    std::size_t window_;
    shape in_, out_;
    xt::xtensor<std::uint32_t, 1> argmax_;  // per output element: its input element within the batch
};

/// y[c] = mean over all h x w positions of x[., ., c].
template <class T>
class global_avg_pool : public layer<T> {
public:
    shape setup(const shape& input, std::size_t /*max_batch*/) override {
        in_ = input;
        return {1, 1, input.channels};
    }

    void forward(const T* x, T* y, const pass<T>& p) override {
        const std::size_t c = in_.channels, pixels = in_.height * in_.width;
        const T scale = T{1} / static_cast<T>(pixels);
        for (std::size_t b = 0; b < p.batch; ++b) {
            T* out = y + b * c;
            std::fill_n(out, c, T{0});
            const T* in = x + b * in_.size();
            for (std::size_t q = 0; q < pixels; ++q)
                for (std::size_t k = 0; k < c; ++k) out[k] += in[q * c + k];
            for (std::size_t k = 0; k < c; ++k) out[k] *= scale;
        }
    }

    void backward(const T* /*x*/, const T* /*y*/, const T* dy, T* dx, const pass<T>& p) override {
        if (!dx) return;
        const std::size_t c = in_.channels, pixels = in_.height * in_.width;
        const T scale = T{1} / static_cast<T>(pixels);
        for (std::size_t b = 0; b < p.batch; ++b)
            for (std::size_t q = 0; q < pixels; ++q)
                for (std::size_t k = 0; k < c; ++k) dx[(b * pixels + q) * c + k] = dy[b * c + k] * scale;
    }

    [[nodiscard]] std::string describe() const override {
        return "global_avg_pool: " + in_.str() + " -> " + std::to_string(in_.channels);
    }

private:
    shape in_;
};

}  // namespace hitch_examples::nn
