// Training a model you already have with hitch: an 8-32-1 MLP whose weights and gradients live in plain
// std::vectors, with its own forward and backward. hitch sees the model as a list of named (parameters,
// gradients) views; each rank trains on its own samples and data_parallel averages the gradients.
//
//   hitch-integrate            2 ranks as threads of this process (comm::local)
//   mpiexec -n 2 hitch-integrate --mpi    one rank per MPI process (comm::mpi)
//
// Adam, top-k compression with error feedback (a quarter of each bucket's elements sent) and the ring all-reduce,
// each a template argument; the exit code is 0 when the loss fell to a tenth of its start.
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <hitch/comm/mpi.hpp>  // comm::mpi; link hitch::mpi
#include <hitch/hitch.hpp>

namespace {

constexpr std::size_t in = 8, hidden = 32;

struct mlp {
    // Parameters and their gradients: your model's own storage.
    std::vector<float> w1 = std::vector<float>(hidden * in), b1 = std::vector<float>(hidden);
    std::vector<float> w2 = std::vector<float>(hidden), b2 = std::vector<float>(1);
    std::vector<float> gw1 = w1, gb1 = b1, gw2 = w2, gb2 = b2;

    explicit mlp(unsigned seed) {
        std::mt19937 rng(seed);
        std::normal_distribution<float> init(0.0f, 0.3f);
        for (float& v : w1) v = init(rng);
        for (float& v : w2) v = init(rng);
    }
    /// hitch's view of the model: names, parameters, gradients. Every rank lists the same layers.
    std::vector<hitch::layer> layers() {
        return {{"fc1.weight", hitch::view(w1), hitch::view(gw1)},
                {"fc1.bias", hitch::view(b1), hitch::view(gb1)},
                {"fc2.weight", hitch::view(w2), hitch::view(gw2)},
                {"fc2.bias", hitch::view(b2), hitch::view(gb2)}};
    }
    /// Mean squared error over the batch; fills the gradients and reports each layer as its gradient is final
    /// (the output layer first, as backward runs), so hitch can start exchanging while backward goes on.
    template <class Ready>
    float forward_backward(const std::vector<float>& x, const std::vector<float>& y, Ready&& ready) {
        const std::size_t n = y.size();
        std::vector<float> h(n * hidden), err(n);
        float loss = 0.0f;
        for (std::size_t s = 0; s < n; ++s) {
            float out = b2[0];
            for (std::size_t j = 0; j < hidden; ++j) {
                float a = b1[j];
                for (std::size_t i = 0; i < in; ++i) a += w1[j * in + i] * x[s * in + i];
                h[s * hidden + j] = std::tanh(a);
                out += w2[j] * h[s * hidden + j];
            }
            err[s] = out - y[s];
            loss += err[s] * err[s] / static_cast<float>(n);
        }
        std::fill(gw2.begin(), gw2.end(), 0.0f);
        gb2[0] = 0.0f;
        for (std::size_t s = 0; s < n; ++s) {
            const float d = 2.0f * err[s] / static_cast<float>(n);
            gb2[0] += d;
            for (std::size_t j = 0; j < hidden; ++j) gw2[j] += d * h[s * hidden + j];
        }
        ready(3);  // fc2.bias
        ready(2);  // fc2.weight
        std::fill(gw1.begin(), gw1.end(), 0.0f);
        std::fill(gb1.begin(), gb1.end(), 0.0f);
        for (std::size_t s = 0; s < n; ++s) {
            const float d = 2.0f * err[s] / static_cast<float>(n);
            for (std::size_t j = 0; j < hidden; ++j) {
                const float dh = d * w2[j] * (1.0f - h[s * hidden + j] * h[s * hidden + j]);
                gb1[j] += dh;
                for (std::size_t i = 0; i < in; ++i) gw1[j * in + i] += dh * x[s * in + i];
            }
        }
        ready(1);  // fc1.bias
        ready(0);  // fc1.weight
        return loss;
    }
};

/// The task: y = sum of sin(x_i) / 2, on this rank's own samples.
void batch(std::mt19937& rng, std::size_t n, std::vector<float>& x, std::vector<float>& y) {
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    x.resize(n * in);
    y.assign(n, 0.0f);
    for (std::size_t s = 0; s < n; ++s)
        for (std::size_t i = 0; i < in; ++i) {
            x[s * in + i] = u(rng);
            y[s] += 0.5f * std::sin(x[s * in + i]);
        }
}

/// One rank's training: the same code over threads and over MPI.
template <class Comm>
bool train(Comm& comm) {
    using dp_t = hitch::data_parallel<hitch::optim::adam, hitch::compress::error_feedback<hitch::compress::topk>,
                                      hitch::sync::hard, hitch::allreduce::ring>;
    dp_t::options o;
    o.learning_rate = hitch::lr::constant({.value = 0.01});
    o.compressor = decltype(o.compressor)({.density = 0.25});  // the codec's options, its type named once
    mlp model(1234);                                           // the same initial weights on every rank
    hitch::cpu device;
    dp_t dp(comm, device, model.layers(), o);

    std::mt19937 rng(static_cast<unsigned>(100 + comm.rank()));  // each rank its own samples
    std::vector<float> x, y;
    float first = 0.0f, last = 0.0f;
    for (int step = 0; step < 600; ++step) {
        batch(rng, 64, x, y);
        const float loss = model.forward_backward(x, y, [&](std::size_t layer) { dp.gradient_ready(layer); });
        dp.step(loss);
        if (step == 0) first = loss;
        last = 0.9f * last + 0.1f * loss;
        if (comm.rank() == 0 && step % 100 == 0) std::printf("step %3d  loss %.4f\n", step, static_cast<double>(loss));
    }
    if (comm.rank() == 0)
        std::printf("rank 0: loss %.4f -> %.4f (smoothed), parameters hash %016llx\n", static_cast<double>(first),
                    static_cast<double>(last), static_cast<unsigned long long>(dp.parameter_hash()));
    return last < 0.1f * first;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::strcmp(argv[1], "--mpi") == 0) {
        hitch::comm::mpi_environment env(argc, argv);
        hitch::comm::mpi comm;
        return train(comm) ? 0 : 1;
    }
    const auto fell = hitch::comm::run_local(2, [](hitch::comm::local& comm) { return train(comm); });
    return fell[0] && fell[1] ? 0 : 1;
}
