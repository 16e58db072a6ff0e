#pragma once
// Max pooling over non-overlapping windows (2x2 by default) and global average pooling, on NHWC batches.

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "nn/layer.hpp"

namespace hitch_examples::nn {

/// y = max over each window x window block (stride = window; a ragged last row/column is dropped). Backward sends
/// dy to the first element of the window that equals the maximum, found again from x and y: no indices are stored,
/// and both passes are element-wise selects that vectorise.
template <class T>
class max_pool2d : public layer<T> {
public:
    explicit max_pool2d(std::size_t window = 2) : window_(window) {
        if (window == 0) throw std::invalid_argument("nn::max_pool2d: window must be positive");
    }

    shape setup(const shape& input, std::size_t /*max_batch*/) override {
        in_ = input;
        out_ = {input.height / window_, input.width / window_, input.channels};
        if (out_.height == 0 || out_.width == 0)
            throw std::invalid_argument("nn::max_pool2d: the input " + in_.str() + " is smaller than the " +
                                        std::to_string(window_) + "x" + std::to_string(window_) + " window");
        open_.assign(input.channels, T{1});
        return out_;
    }

    void forward(const T* x, T* y, const pass<T>& p) override {
        const std::size_t c = in_.channels;
        for_each_window(p.batch, [&](std::size_t o, std::size_t corner) {
            T* out = y + o;
            std::copy_n(x + corner, c, out);
            for_each_other_position(corner, [&](std::size_t at) {
                const T* in = x + at;
                for (std::size_t k = 0; k < c; ++k) out[k] = std::max(out[k], in[k]);
            });
        });
    }

    void backward(const T* x, const T* y, const T* dy, T* dx, const pass<T>& p) override {
        if (!dx) return;
        if (in_.height % window_ != 0 || in_.width % window_ != 0) std::fill_n(dx, p.batch * in_.size(), T{0});
        const std::size_t c = in_.channels;
        T* open = open_.data();
        for_each_window(p.batch, [&](std::size_t o, std::size_t corner) {
            std::fill_n(open, c, T{1});
            const T *max = y + o, *g = dy + o;
            const auto visit = [&](std::size_t at) {
                const T* in = x + at;
                T* d = dx + at;
                for (std::size_t k = 0; k < c; ++k) {  // arithmetic rather than branches, so this vectorises
                    const T gk = g[k], is_max = in[k] == max[k] ? T{1} : T{0};
                    const T first = is_max * open[k];  // 1 for the first maximum of the window, else 0
                    d[k] = first > T{0} ? gk : T{0};
                    open[k] -= first;
                }
            };
            visit(corner);
            for_each_other_position(corner, visit);
        });
    }

    [[nodiscard]] std::string describe() const override {
        return "max_pool2d " + std::to_string(window_) + "x" + std::to_string(window_) + ": " + in_.str() + " -> " +
               out_.str();
    }

private:
    /// fn(first element of the output pixel, first element of its window's top-left input pixel).
    template <class Fn>
    void for_each_window(std::size_t batch, Fn&& fn) const {
        std::size_t o = 0;
        for (std::size_t b = 0; b < batch; ++b)
            for (std::size_t oh = 0; oh < out_.height; ++oh)
                for (std::size_t ow = 0; ow < out_.width; ++ow, o += in_.channels)
                    fn(o, ((b * in_.height + oh * window_) * in_.width + ow * window_) * in_.channels);
    }

    /// fn(first element of each input pixel of the window but the top-left one).
    template <class Fn>
    void for_each_other_position(std::size_t corner, Fn&& fn) const {
        for (std::size_t i = 0; i < window_; ++i)
            for (std::size_t j = i == 0 ? 1 : 0; j < window_; ++j) fn(corner + (i * in_.width + j) * in_.channels);
    }

    std::size_t window_;
    shape in_, out_;
    std::vector<T> open_;  // backward: per channel, 1 until the window's maximum has received its dy
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
