// A policy written outside hitch, plugged into hitch::data_parallel: Signum (Bernstein et al. 2018, "signSGD:
// Compressed Optimisation for Non-Convex Problems"), SGD on the sign of the momentum,
//
//   m = beta * m + (1 - beta) * g;   w = w - lr * (sign(m) + wd * w)
//
// It models hitch::optimizer by offering what the concept asks (hitch/concepts/optimizer.hpp): an options type, an
// id for saved state, a per-layer state with its step count and tensors, make_state and step. Nothing in hitch
// knows about it. The program trains the Fashion-MNIST MLP with it on 2 ranks (threads) for one epoch.
//
//   build/examples/custom_policy/hitch-custom-policy [data directory]
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

#include "data/mnist.hpp"
#include "data/sampler.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/concepts/optimizer.hpp"
#include "hitch/device/buffer.hpp"
#include "hitch/optim/lr/cosine.hpp"
#include "hitch/train/data_parallel.hpp"
#include "nn/blas.hpp"
#include "nn/evaluate.hpp"
#include "nn/loss.hpp"
#include "nn/models.hpp"

namespace my_lab {

template <class D>
struct signum_state {
    hitch::device_buffer<float, D> momentum;
    std::uint64_t steps = 0;
    [[nodiscard]] std::array<hitch::tensor_view<float>, 1> buffers() const { return {momentum.view()}; }
};

class signum {
public:
    struct options_type {
        float beta = 0.9f;
        float weight_decay = 0.0f;
        void validate() const {
            hitch::option_validator("my_lab::signum")
                .half_open("beta", beta, 0.0f, 1.0f)
                .non_negative("weight_decay", weight_decay);
        }
    };
    template <class D>
    using state_type = signum_state<D>;

    signum() = default;
    explicit signum(const options_type& o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const { return options_; }
    static constexpr std::string_view name = "my_lab::signum";

    template <hitch::device D>
    [[nodiscard]] state_type<D> make_state(D& dev, std::size_t n) const {
        return {hitch::device_buffer<float, D>(dev, n), 0};
    }

    template <hitch::host_device D>
    void step(const hitch::layer& l, state_type<D>& s, float lr, const hitch::parallel_options&) const {
        const float beta = options_.beta, wd = l.flags.exclude_from_weight_decay ? 0.0f : options_.weight_decay;
        float* w = l.params.data();
        const float* g = l.grads.data();
        float* m = s.momentum.data();
        for (std::size_t i = 0; i < l.size(); ++i) {
            m[i] = beta * m[i] + (1.0f - beta) * g[i];
            const float direction = m[i] > 0.0f ? 1.0f : (m[i] < 0.0f ? -1.0f : 0.0f);
            w[i] -= lr * (direction + wd * w[i]);
        }
        ++s.steps;
    }

private:
    options_type options_{};
};

}  // namespace my_lab

static_assert(hitch::check_optimizer<my_lab::signum>() && hitch::optimizer<my_lab::signum>,
              "my_lab::signum must model hitch::optimizer");

int main(int argc, char** argv) {
    using namespace hitch_examples;
    const std::string dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
    const data::dataset train = data::load_mnist(dir, data::split::train);
    const data::dataset test = data::load_mnist(dir, data::split::test);
    const data::normalization norm = data::normalization::of(train);
    nn::set_blas_threads(1);

    const auto accuracy = hitch::comm::run_local(2, [&](hitch::comm::local& comm) {
        const std::size_t batch = 64;  // per rank
        nn::model<float> model = nn::mnist_mlp<float>(batch, 1);
        nn::softmax_cross_entropy<float> loss(batch, 10);
        data::batch_loader<float> loader(train, norm, batch);
        data::sharded_sampler sampler(train.size(), comm.rank(), comm.size(), 1);

        std::vector<hitch::layer> layers;
        for (const auto& p : model.parameters())
            layers.push_back({p.name, hitch::tensor_view<float>(p.value.data(), p.value.size()),
                              hitch::tensor_view<float>(p.gradient.data(), p.gradient.size()),
                              p.is_bias_or_norm ? hitch::layer_flags::bias_or_norm() : hitch::layer_flags{}});
        using dp_t = hitch::data_parallel<my_lab::signum>;
        dp_t::options options;
        options.optimizer.weight_decay = 1e-4f;
        options.steps_per_epoch = sampler.batches_per_epoch(batch);
        options.learning_rate = hitch::lr::cosine({.base = 1e-3, .total_epochs = 1.0});
        hitch::cpu device;
        dp_t dp(comm, device, layers, options);

        for (auto idx = sampler.next(batch); !idx.empty(); idx = sampler.next(batch)) {
            loader.load(idx);
            const auto logits = model.forward(loader.images(), loader.size(), nn::mode::train);
            const double l = loss.forward(logits, loader.labels());
            model.backward(loss.gradient(), [&](std::size_t i) { dp.gradient_ready(i); });
            dp.step(l);
        }
        return nn::evaluate(model, test, norm).accuracy;
    });
    std::printf("my_lab::signum through hitch::data_parallel on 2 ranks, 1 epoch: test accuracy %.4f\n", accuracy[0]);
    return accuracy[0] > 0.8 ? 0 : 1;
}
