#pragma once
// 2-D convolution by im2col + GEMM on NHWC batches (Chellapilla et al. 2006, "High performance convolutional
// neural networks for document processing"). With rows = batch x out_h x out_w and CRS = kernel x kernel x
// in_channels:
//   forward   col (rows x CRS) = im2col(x);   y (rows x K) = col W^T + b
//   backward  dW (K x CRS) = dy^T col;   dcol = dy W;   dx = col2im(dcol)
// col is built and multiplied a block of rows at a time in the model's shared workspace, and rebuilt in backward,
// so it never leaves the cache and a deep network needs one small buffer, not a column matrix per layer. A 1x1
// convolution with stride 1 and no padding uses x itself as col.

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <string>

#include "nn/blas.hpp"
#include "nn/layer.hpp"

namespace hitch_examples::nn {

struct conv2d_options {
    std::size_t stride = 1;
    std::size_t padding = 0;
    bool bias = true;  ///< off when a batch norm follows (its shift makes the bias redundant)
};

template <class T>
class conv2d : public layer<T> {
public:
    conv2d(std::string name, std::size_t out_channels, std::size_t kernel, conv2d_options options = {})
        : name_(std::move(name)), out_channels_(out_channels), kernel_(kernel), options_(options) {
        if (out_channels == 0 || kernel == 0 || options.stride == 0)
            throw std::invalid_argument("nn::conv2d " + name_ + ": out_channels, kernel and stride must be positive");
    }

    shape setup(const shape& input, std::size_t max_batch) override {
        in_ = input;
        if (in_.height + 2 * options_.padding < kernel_ || in_.width + 2 * options_.padding < kernel_)
            throw std::invalid_argument("nn::conv2d " + name_ + ": a " + std::to_string(kernel_) + "x" +
                                        std::to_string(kernel_) + " kernel does not fit the input " + in_.str());
        out_ = {(in_.height + 2 * options_.padding - kernel_) / options_.stride + 1,
                (in_.width + 2 * options_.padding - kernel_) / options_.stride + 1, out_channels_};
        patch_ = kernel_ * kernel_ * in_.channels;
        block_rows_ = std::max<std::size_t>(1, block_bytes / (patch_ * sizeof(T)));
        direct_ = kernel_ == 1 && options_.stride == 1 && options_.padding == 0;
        max_batch_ = max_batch;
        weight_ = xt::xtensor<T, 4>::from_shape({out_channels_, kernel_, kernel_, in_.channels});
        weight_grad_ = xt::zeros<T>(weight_.shape());
        this->add_parameter(name_ + ".weight", span_of(weight_), span_of(weight_grad_), false, out_channels_);
        if (options_.bias) {
            bias_ = xt::zeros<T>({out_channels_});
            bias_grad_ = xt::zeros<T>({out_channels_});
            this->add_parameter(name_ + ".bias", span_of(bias_), span_of(bias_grad_), true);
        }
        return out_;
    }

    [[nodiscard]] std::size_t workspace_size() const override {
        return direct_ ? 0 : std::min(block_rows_, max_batch_ * out_.height * out_.width) * patch_;
    }

    void initialize(random_source& rng) override {
        he_normal(span_of(weight_), patch_, rng);
        bias_.fill(T{0});
    }

    void forward(const T* x, T* y, const pass<T>& p) override {
        const std::size_t rows = p.batch * out_.height * out_.width, k = out_channels_;
        if (direct_) {
            gemm(false, true, rows, k, patch_, T{1}, x, patch_, weight_.data(), patch_, T{0}, y, k);
        } else {
            for_each_block(rows, [&](std::size_t first, std::size_t n) {
                const T* col = im2col(x, first, n, p.workspace.data());
                gemm(false, true, n, k, patch_, T{1}, col, patch_, weight_.data(), patch_, T{0}, y + first * k, k);
            });
        }
        if (options_.bias) add_to_rows(y, rows, k, bias_.data());
    }

    void backward(const T* x, const T* /*y*/, const T* dy, T* dx, const pass<T>& p) override {
        const std::size_t rows = p.batch * out_.height * out_.width, k = out_channels_;
        if (options_.bias) {
            sum_rows(dy, rows, k, bias_grad_.data());
            p.ready(1);
        }
        if (direct_) {
            gemm(true, false, k, patch_, rows, T{1}, dy, k, x, patch_, T{0}, weight_grad_.data(), patch_);
            p.ready(0);
            if (dx) gemm(false, false, rows, patch_, k, T{1}, dy, k, weight_.data(), patch_, T{0}, dx, patch_);
            return;
        }
        for_each_block(rows, [&](std::size_t first, std::size_t n) {  // dW = sum over blocks of dy^T col
            const T* col = im2col(x, first, n, p.workspace.data());
            gemm(true, false, k, patch_, n, T{1}, dy + first * k, k, col, patch_, first == 0 ? T{0} : T{1},
                 weight_grad_.data(), patch_);
        });
        p.ready(0);
        if (!dx) return;
        std::fill_n(dx, p.batch * in_.size(), T{0});
        for_each_block(rows, [&](std::size_t first, std::size_t n) {  // dx += col2im(dy W), block by block
            T* dcol = p.workspace.data();
            gemm(false, false, n, patch_, k, T{1}, dy + first * k, k, weight_.data(), patch_, T{0}, dcol, patch_);
            col2im(dcol, first, n, dx);
        });
    }

    [[nodiscard]] std::string describe() const override {
        return "conv2d " + name_ + ": " + in_.str() + " -> " + out_.str() + " (" + std::to_string(kernel_) + "x" +
               std::to_string(kernel_) + ", stride " + std::to_string(options_.stride) + ", padding " +
               std::to_string(options_.padding) + ")";
    }

private:
    /// fn(first row, rows) for consecutive blocks of at most block_rows_ rows of col, covering [0, rows).
    template <class Fn>
    void for_each_block(std::size_t rows, Fn&& fn) const {
        for (std::size_t first = 0; first < rows; first += block_rows_) fn(first, std::min(block_rows_, rows - first));
    }

    /// Calls fn(row within the block, kernel row r, input offset of the first valid element, valid kernel columns
    /// [s0, s1)) for rows [first, first + count) of col and every kernel row; s0 == s1 when the kernel row lies
    /// entirely in the padding. One kernel row of a patch covers consecutive input columns, which in NHWC are one
    /// contiguous run of the input.
    template <class Fn>
    void for_each_patch_row(std::size_t first, std::size_t count, Fn&& fn) const {
        const auto pad = static_cast<std::ptrdiff_t>(options_.padding);
        const auto h = static_cast<std::ptrdiff_t>(in_.height), w = static_cast<std::ptrdiff_t>(in_.width);
        const auto k = static_cast<std::ptrdiff_t>(kernel_);
        // Output pixel (b, oh, ow) of row `first`, then stepped along without dividing per row.
        std::size_t ow = first % out_.width, oh = first / out_.width % out_.height;
        std::size_t b = first / (out_.width * out_.height);
        for (std::size_t row = 0; row < count; ++row) {
            const std::ptrdiff_t top = static_cast<std::ptrdiff_t>(oh * options_.stride) - pad;
            const std::ptrdiff_t left = static_cast<std::ptrdiff_t>(ow * options_.stride) - pad;
            const std::ptrdiff_t s0 = std::max<std::ptrdiff_t>(0, -left);
            const std::ptrdiff_t s1 = std::max(s0, std::min<std::ptrdiff_t>(k, w - left));
            for (std::ptrdiff_t r = 0; r < k; ++r) {
                const std::ptrdiff_t ih = top + r;
                if (ih < 0 || ih >= h || s0 == s1) {
                    fn(row, static_cast<std::size_t>(r), std::size_t{0}, std::size_t{0}, std::size_t{0});
                    continue;
                }
                const std::size_t offset = ((b * in_.height + static_cast<std::size_t>(ih)) * in_.width +
                                            static_cast<std::size_t>(left + s0)) *
                                           in_.channels;
                fn(row, static_cast<std::size_t>(r), offset, static_cast<std::size_t>(s0),
                   static_cast<std::size_t>(s1));
            }
            if (++ow == out_.width) {
                ow = 0;
                if (++oh == out_.height) oh = 0, ++b;
            }
        }
    }

    T* im2col(const T* x, std::size_t first, std::size_t count, T* col) const {
        const std::size_t c = in_.channels, run = kernel_ * c;
        for_each_patch_row(first, count,
                           [&](std::size_t row, std::size_t r, std::size_t in, std::size_t s0, std::size_t s1) {
                               T* dst = col + row * patch_ + r * run;
                               std::fill(dst, dst + s0 * c, T{0});
                               std::copy(x + in, x + in + (s1 - s0) * c, dst + s0 * c);
                               std::fill(dst + s1 * c, dst + run, T{0});
                           });
        return col;
    }

    /// dx += the patches of rows [first, first + count) scattered back to where im2col took them from.
    void col2im(const T* dcol, std::size_t first, std::size_t count, T* dx) const {
        const std::size_t c = in_.channels;
        for_each_patch_row(first, count,
                           [&](std::size_t row, std::size_t r, std::size_t in, std::size_t s0, std::size_t s1) {
                               const T* src = dcol + row * patch_ + (r * kernel_ + s0) * c;
                               T* dst = dx + in;
                               for (std::size_t i = 0; i < (s1 - s0) * c; ++i) dst[i] += src[i];
                           });
    }

    std::string name_;
    std::size_t out_channels_, kernel_;
    conv2d_options options_;
    shape in_, out_;
    // Rows of col built and multiplied at a time: a block this size stays in cache between im2col and the GEMM,
    // where the whole column matrix (k^2 times the input) would stream through memory twice.
    static constexpr std::size_t block_bytes = 256 * 1024;
    std::size_t patch_ = 0, max_batch_ = 0, block_rows_ = 1;
    bool direct_ = false;
    xt::xtensor<T, 4> weight_, weight_grad_;  // out_channels x kernel x kernel x in_channels
    xt::xtensor<T, 1> bias_, bias_grad_;
};

}  // namespace hitch_examples::nn
