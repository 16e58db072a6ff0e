#pragma once
// optim::model_optimizer<O, D>: an optimizer bound to a model's layers, holding one typed state per layer on
// device D. Data-parallel training calls step(lr) (or step(i, lr) per layer as soon as layer i's gradient is
// reduced); a parameter-server shard holding some whole layers uses the same type on just those layers.
//
//   std::vector<hitch::layer> layers = ...;
//   hitch::optim::model_optimizer<hitch::optim::lars_sgd> opt({.base = {.momentum = 0.9f}, .weight_decay = 5e-4f},
//                                                             layers);
//   for (step ...) { backward(); opt.step(schedule(step, steps_per_epoch)); }
//   opt.save(file);  ...  opt.load(file);   // resumes bit for bit
//
// On a device the host cannot read (a GPU), step(lr) runs the rule's plan from optim::device_step<O, D>, which
// steps every layer in one fused launch where the device has such a kernel (hitch/cuda/optim/); step(i, lr) is the
// rule's per-layer device step.

#include <cstddef>
#include <istream>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hitch/concepts/optimizer.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/device/cpu.hpp"
#include "hitch/optim/detail/device_step.hpp"
#include "hitch/optim/state_io.hpp"

namespace hitch::optim {

namespace detail {
/// The host device object used when none is given.
inline cpu& default_cpu() {
    static cpu c;
    return c;
}
}  // namespace detail

template <class O, class D = cpu>
class model_optimizer {
    static_assert(check_optimizer<O, D>());

public:
    using optimizer_type = O;
    using options_type = typename O::options_type;
    using state_type = typename O::template state_type<D>;

    /// Validates the options and the layers, and makes zeroed state for every layer on `dev`.
    model_optimizer(const options_type& options, std::vector<layer> layers, D& dev, const parallel_options& exec = {})
        : optimizer_(options), layers_(std::move(layers)), device_(&dev), exec_(exec) {
        exec_.validate();
        states_.reserve(layers_.size());
        for (const layer& l : layers_) {
            check_layer(l, D::space, "hitch::optim::model_optimizer");
            states_.push_back(optimizer_.make_state(dev, l.size()));
        }
        if constexpr (!host_device<D>)
            plan_ = plan_type(optimizer_, std::span<const layer>(layers_), std::span<state_type>(states_), dev);
    }
    /// On the host.
    model_optimizer(const options_type& options, std::vector<layer> layers, const parallel_options& exec = {})
        requires std::same_as<D, cpu>
        : model_optimizer(options, std::move(layers), detail::default_cpu(), exec) {}

    model_optimizer(const model_optimizer&) = delete;
    model_optimizer& operator=(const model_optimizer&) = delete;
    model_optimizer(model_optimizer&&) noexcept = default;
    model_optimizer& operator=(model_optimizer&&) noexcept = default;

    [[nodiscard]] std::size_t size() const noexcept { return layers_.size(); }
    [[nodiscard]] std::span<const layer> layers() const noexcept { return layers_; }
    [[nodiscard]] const layer& layer_at(std::size_t i) const { return layers_.at(i); }
    [[nodiscard]] const state_type& state(std::size_t i) const { return states_.at(i); }
    [[nodiscard]] state_type& state(std::size_t i) { return states_.at(i); }
    [[nodiscard]] const O& optimizer() const noexcept { return optimizer_; }
    [[nodiscard]] const parallel_options& execution() const noexcept { return exec_; }
    /// The device the state lives on.
    [[nodiscard]] D& device() const noexcept { return *device_; }
    void set_execution(const parallel_options& exec) {
        exec.validate();
        exec_ = exec;
    }

    /// Points layer i at new views (e.g. after the caller reallocated them); the size must not change.
    void rebind(std::size_t i, tensor_view<float> params, tensor_view<float> grads) {
        layer& l = layers_.at(i);
        layer next = l;
        next.params = params;
        next.grads = grads;
        check_layer(next, D::space, "hitch::optim::model_optimizer::rebind");
        if (next.size() != l.size())
            throw config_error(detail::concat("hitch::optim::model_optimizer::rebind: layer '", l.name, "' has ",
                                              l.size(), " parameters; the new view has ", next.size()));
        l = next;
        if constexpr (!host_device<D>) plan_.rebind(i, l, states_[i]);
    }

    /// One step of layer i.
    void step(std::size_t i, float lr) {
        if (i >= layers_.size())
            throw config_error(detail::concat("hitch::optim::model_optimizer::step: layer index ", i,
                                              " is outside [0, ", layers_.size(), ")"));
        optimizer_.step(layers_[i], states_[i], lr, exec_);
    }
    /// One step of every layer, in order.
    void step(float lr) {
        if constexpr (host_device<D>) {
            for (std::size_t i = 0; i < layers_.size(); ++i) optimizer_.step(layers_[i], states_[i], lr, exec_);
        } else {
            plan_.step(optimizer_, std::span<const layer>(layers_), std::span<state_type>(states_), lr, exec_);
        }
    }

    /// Writes every layer's state (see hitch/optim/state_io.hpp for the form).
    void save(std::ostream& out) const {
        save_state(out, optimizer_name(optimizer_), std::span<const layer>(layers_),
                   std::span<const state_type>(states_), *device_);
    }
    /// Reads a state written by save(); throws and changes nothing when it is corrupt or of another layout.
    void load(std::istream& in) {
        load_state(in, optimizer_name(optimizer_), std::span<const layer>(layers_), std::span<state_type>(states_),
                   *device_);
    }

private:
    using plan_type = detail::plan_t<O, D>;

    O optimizer_;
    std::vector<layer> layers_;
    std::vector<state_type> states_;
    D* device_;
    parallel_options exec_;
    [[no_unique_address]] plan_type plan_{};
};

}  // namespace hitch::optim
