#pragma once
// The layer interface of the examples' neural-network toolkit, and what a layer exposes to a trainer.
//
// Activations are batches of images in NHWC order (sample, row, column, channel), so a convolution is one GEMM
// over the whole batch and a fully connected layer sees each sample as one row. Every buffer a layer needs is
// allocated in setup() for the largest batch, so training steps allocate nothing.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "nn/random.hpp"

namespace hitch_examples::nn {

/// The shape of one sample: height x width x channels (a flat vector is 1 x 1 x n).
struct shape {
    std::size_t height = 1, width = 1, channels = 1;

    [[nodiscard]] std::size_t size() const { return height * width * channels; }
    friend bool operator==(const shape&, const shape&) = default;
    [[nodiscard]] std::string str() const {
        return std::to_string(height) + "x" + std::to_string(width) + "x" + std::to_string(channels);
    }
};

/// Training uses batch statistics in batch norm; evaluation uses the running statistics.
enum class mode : std::uint8_t { train, eval };

/// One trainable tensor. `value` and `gradient` are contiguous and keep their addresses for the layer's life,
/// so a trainer may take views of them once.
template <class T>
struct parameter {
    std::string name;  ///< e.g. "fc1.weight", "bn1.gamma"
    std::span<T> value;
    std::span<T> gradient;         ///< overwritten by every backward pass (not accumulated)
    bool is_bias_or_norm = false;  ///< biases and normalisation scales/shifts: LARS and weight decay skip them
    std::size_t rows = 0;          ///< a weight as a matrix: its outputs (rows) x the rest, row-major; 0: a vector
};

/// Non-trainable state that a checkpoint must carry (batch norm's running mean and variance).
template <class T>
struct buffer {
    std::string name;
    std::span<T> value;
};

/// The callback a backward pass reports finished gradients through: index = the parameter's position in the
/// model's parameter list. Composite layers hand their children a shifted copy, so indices stay global.
class gradient_ready {
public:
    gradient_ready() = default;
    explicit gradient_ready(const std::function<void(std::size_t)>& fn) : fn_(fn ? &fn : nullptr) {}

    void operator()(std::size_t index) const {
        if (fn_) (*fn_)(offset_ + index);
    }
    [[nodiscard]] gradient_ready shifted(std::size_t by) const {
        gradient_ready r = *this;
        r.offset_ += by;
        return r;
    }

private:
    const std::function<void(std::size_t)>* fn_ = nullptr;
    std::size_t offset_ = 0;
};

/// What one forward or backward call needs besides its tensors.
template <class T>
struct pass {
    std::size_t batch = 0;
    nn::mode mode = nn::mode::train;
    std::span<T> workspace;  ///< scratch shared by all layers, at least workspace_size() elements
    gradient_ready ready;    ///< backward only; indices are the layer's own (0 = its first parameter)
};

/// A layer: y = f(x; parameters) on a batch. Layers are built unconfigured, then a model calls setup() once
/// with the input shape; after that they stay where they are (they are not copyable).
template <class T>
class layer {
public:
    layer() = default;
    layer(const layer&) = delete;
    layer& operator=(const layer&) = delete;
    layer(layer&&) noexcept = default;
    layer& operator=(layer&&) noexcept = default;
    virtual ~layer() = default;

    /// Fixes the input shape, allocates parameters and buffers for up to `max_batch` samples, returns the output
    /// shape. Throws std::invalid_argument for a shape the layer cannot take.
    virtual shape setup(const shape& input, std::size_t max_batch) = 0;

    /// Scratch elements forward/backward need (shared between layers; valid only during one call).
    [[nodiscard]] virtual std::size_t workspace_size() const { return 0; }

    virtual void forward(const T* x, T* y, const pass<T>& p) = 0;

    /// Given dy = dL/dy (and the x, y of the last forward), writes every parameter gradient, calling p.ready(i)
    /// as soon as parameter i's gradient is final, last parameter first, and writes dx = dL/dx unless dx is null.
    virtual void backward(const T* x, const T* y, const T* dy, T* dx, const pass<T>& p) = 0;

    /// Draws the initial parameter values (He normal weights, zero biases, unit scales).
    virtual void initialize(random_source& /*rng*/) {}

    /// e.g. "dense fc1: 784 -> 512"
    [[nodiscard]] virtual std::string describe() const = 0;

    [[nodiscard]] const std::vector<parameter<T>>& parameters() const { return parameters_; }
    [[nodiscard]] const std::vector<buffer<T>>& buffers() const { return buffers_; }

protected:
    void add_parameter(std::string name, std::span<T> value, std::span<T> gradient, bool is_bias_or_norm,
                       std::size_t rows = 0) {
        parameters_.push_back({std::move(name), value, gradient, is_bias_or_norm, rows});
    }
    void add_buffer(std::string name, std::span<T> value) { buffers_.push_back({std::move(name), value}); }
    /// A composite layer lists its children's parameters and buffers as its own, in the children's order.
    void adopt(const layer& child) {
        parameters_.insert(parameters_.end(), child.parameters_.begin(), child.parameters_.end());
        buffers_.insert(buffers_.end(), child.buffers_.begin(), child.buffers_.end());
    }

private:
    std::vector<parameter<T>> parameters_;
    std::vector<buffer<T>> buffers_;
};

/// He (Kaiming) normal initialisation for a ReLU network: N(0, 2 / fan_in) (He et al. 2015, "Delving deep into
/// rectifiers").
template <class T>
void he_normal(std::span<T> weights, std::size_t fan_in, random_source& rng) {
    const double stddev = std::sqrt(2.0 / static_cast<double>(fan_in));
    for (T& w : weights) w = static_cast<T>(stddev * rng.normal());
}

/// y[r, :] += b for each of the `rows` rows of the row-major rows x cols matrix y (a bias on every sample/pixel).
template <class T>
void add_to_rows(T* y, std::size_t rows, std::size_t cols, const T* b) {
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t k = 0; k < cols; ++k) y[r * cols + k] += b[k];
}

/// out = sum over rows of the row-major rows x cols matrix dy (a bias gradient).
template <class T>
void sum_rows(const T* dy, std::size_t rows, std::size_t cols, T* out) {
    std::fill_n(out, cols, T{0});
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t k = 0; k < cols; ++k) out[k] += dy[r * cols + k];
}

/// A span over an xtensor container's storage.
template <class Container>
auto span_of(Container& c) {
    return std::span(c.data(), c.size());
}

}  // namespace hitch_examples::nn
