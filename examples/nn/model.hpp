#pragma once
// A model: an ordered list of layers trained by backpropagation. It owns every activation buffer (sized for the
// largest batch at construction), so forward and backward allocate nothing, and it exposes each trainable tensor
// once, in a list whose storage never moves: a trainer may take views of it once and keep them.
//
//   nn::model<float> m({28, 28, 1}, 256);
//   m.add(nn::flatten<float>());
//   m.add(nn::dense<float>("fc1", 10));
//   m.initialize(seed);
//   auto logits = m.forward(x, batch, nn::mode::train);
//   loss.forward(logits, labels);
//   m.backward(loss.gradient(), [&](std::size_t i) { /* parameter i's gradient is final */ });

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "nn/layer.hpp"
#include "nn/random.hpp"

namespace hitch_examples::nn {

template <class T>
class model {
public:
    using value_type = T;

    model(shape input, std::size_t max_batch) : input_(input), output_(input), max_batch_(max_batch) {
        if (max_batch == 0 || input.size() == 0)
            throw std::invalid_argument("nn::model: the input shape and max_batch must be non-empty");
    }

    /// Appends a layer, fixing its input shape to the current output shape. Returns the layer, now in its final
    /// place (its parameters are registered and keep their addresses).
    template <class Layer>
        requires std::derived_from<Layer, layer<T>>
    Layer& add(Layer new_layer) {
        auto owned = std::make_unique<Layer>(std::move(new_layer));
        Layer& added = *owned;
        output_ = added.setup(output_, max_batch_);
        first_parameter_.push_back(parameters_.size());
        for (const auto& p : added.parameters()) {
            for (const auto& q : parameters_)
                if (q.name == p.name) throw std::invalid_argument("nn::model: two parameters are named " + p.name);
            parameters_.push_back(p);
        }
        buffers_.insert(buffers_.end(), added.buffers().begin(), added.buffers().end());
        outputs_.push_back(xt::xtensor<T, 1>::from_shape({max_batch_ * output_.size()}));
        largest_activation_ = std::max(largest_activation_, output_.size());
        for (auto* g : {&gradient_a_, &gradient_b_})
            if (g->size() < max_batch_ * largest_activation_)
                *g = xt::xtensor<T, 1>::from_shape({max_batch_ * largest_activation_});
        if (added.workspace_size() > workspace_.size())
            workspace_ = xt::xtensor<T, 1>::from_shape({added.workspace_size()});
        layers_.push_back(std::move(owned));
        return added;
    }

    /// Draws every parameter from `seed`: the same seed gives the same model on every rank and every run.
    void initialize(std::uint64_t seed) {
        random_source rng(seed);
        for (auto& l : layers_) l->initialize(rng);
    }

    /// Runs the batch x (batch x input_shape().size() values, NHWC) through the model and returns the output
    /// (batch x output_shape().size()). x must stay valid until backward() has returned.
    std::span<const T> forward(std::span<const T> x, std::size_t batch, mode m) {
        if (batch == 0 || batch > max_batch_ || x.size() < batch * input_.size())
            throw std::invalid_argument("nn::model::forward: a batch of " + std::to_string(batch) + " samples (" +
                                        std::to_string(x.size()) + " values of " + input_.str() +
                                        " samples) does not fit a model built for batches up to " +
                                        std::to_string(max_batch_));
        if (layers_.empty()) throw std::logic_error("nn::model::forward: the model has no layers");
        input_data_ = x.data();
        batch_ = batch;
        mode_ = m;
        const T* in = x.data();
        for (std::size_t i = 0; i < layers_.size(); ++i) {
            layers_[i]->forward(in, outputs_[i].data(), make_pass(gradient_ready{}));
            in = outputs_[i].data();
        }
        return {in, batch * output_.size()};
    }

    /// Backpropagates dL/d(output) of the last forward batch into every parameter's gradient (overwriting it).
    /// on_gradient_ready(i) is called once per parameter i as soon as its gradient is final, last parameter first,
    /// so communication can overlap the rest of the pass. input_gradient, when given, receives dL/dx.
    void backward(std::span<const T> output_gradient, const std::function<void(std::size_t)>& on_gradient_ready = {},
                  T* input_gradient = nullptr) {
        if (!input_data_) throw std::logic_error("nn::model::backward: no forward pass to go back through");
        if (output_gradient.size() < batch_ * output_.size())
            throw std::invalid_argument("nn::model::backward: the output gradient has " +
                                        std::to_string(output_gradient.size()) + " values, the batch needs " +
                                        std::to_string(batch_ * output_.size()));
        const gradient_ready ready(on_gradient_ready);
        // Below the first layer with parameters nothing needs a gradient, unless the caller asked for dL/dx.
        const std::size_t last = input_gradient ? 0 : first_trainable_layer();
        const T* dy = output_gradient.data();
        for (std::size_t i = layers_.size(); i-- > last;) {
            // Gradients alternate between two buffers: layer i reads what layer i + 1 wrote into the other one.
            T* dx = i > last ? (i % 2 ? gradient_a_.data() : gradient_b_.data()) : input_gradient;
            const T* x = i > 0 ? outputs_[i - 1].data() : input_data_;
            layers_[i]->backward(x, outputs_[i].data(), dy, dx, make_pass(ready.shifted(first_parameter_[i])));
            dy = dx;
        }
    }

    [[nodiscard]] const std::vector<parameter<T>>& parameters() const { return parameters_; }
    [[nodiscard]] const std::vector<buffer<T>>& buffers() const { return buffers_; }
    [[nodiscard]] std::size_t parameter_count() const {
        std::size_t n = 0;
        for (const auto& p : parameters_) n += p.value.size();
        return n;
    }
    [[nodiscard]] shape input_shape() const { return input_; }
    [[nodiscard]] shape output_shape() const { return output_; }
    [[nodiscard]] std::size_t max_batch() const { return max_batch_; }
    [[nodiscard]] std::size_t layer_count() const { return layers_.size(); }

    /// One line per layer, then the parameter count.
    [[nodiscard]] std::string summary() const {
        std::string s;
        for (const auto& l : layers_) s += "  " + l->describe() + "\n";
        return s + "  " + std::to_string(parameter_count()) + " parameters in " + std::to_string(parameters_.size()) +
               " tensors\n";
    }

private:
    [[nodiscard]] std::size_t first_trainable_layer() const {
        std::size_t i = 0;
        while (i + 1 < layers_.size() && layers_[i]->parameters().empty()) ++i;
        return i;
    }

    pass<T> make_pass(gradient_ready ready) {
        return {batch_, mode_, std::span<T>(workspace_.data(), workspace_.size()), ready};
    }

    shape input_, output_;
    std::size_t max_batch_;
    std::vector<std::unique_ptr<layer<T>>> layers_;
    std::vector<std::size_t> first_parameter_;  // per layer: its first parameter's index in parameters_
    std::vector<parameter<T>> parameters_;
    std::vector<buffer<T>> buffers_;
    std::vector<xt::xtensor<T, 1>> outputs_;  // per layer: its output for max_batch samples
    xt::xtensor<T, 1> gradient_a_, gradient_b_, workspace_;
    std::size_t largest_activation_ = 0;
    const T* input_data_ = nullptr;
    std::size_t batch_ = 0;
    mode mode_ = mode::train;
};

}  // namespace hitch_examples::nn
