// Serial training with the examples' toolkit and plain SGD with momentum, no hitch: it measures what the toolkit
// computes per second on one process and which recipes (epochs, batch, learning rate, momentum, weight decay) reach
// which accuracy, as the baseline the data-parallel trainers are compared with.
//
//   hitch-example-serial --model mlp --epochs 20 --batch-size 128 --lr 0.05 --schedule cosine
//   hitch-example-serial --model cnn --epochs 15
//   hitch-example-serial --model resnet --synthetic 10000 --epochs 1
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "data/cifar.hpp"
#include "data/mnist.hpp"
#include "data/sampler.hpp"
#include "data/synthetic.hpp"
#include "nn/evaluate.hpp"
#include "nn/nn.hpp"

namespace nn = hitch_examples::nn;
namespace data = hitch_examples::data;

namespace {

struct recipe {
    std::string model = "mlp";
    std::string data_dir;
    std::size_t synthetic = 0;
    std::size_t epochs = 10, batch = 128, threads = 1, resnet_blocks = 1;
    double lr = 0.05, momentum = 0.9, weight_decay = 5e-4;
    std::string schedule = "cosine";
    std::uint64_t seed = 1;
};

/// SGD with momentum (the form PyTorch uses): v = mu v + g + wd w; w -= lr v. Weight decay skips biases and
/// normalisation parameters.
class sgd_momentum {
public:
    sgd_momentum(const std::vector<nn::parameter<float>>& params, double momentum, double weight_decay)
        : params_(params), momentum_(static_cast<float>(momentum)), weight_decay_(static_cast<float>(weight_decay)) {
        for (const auto& p : params) velocity_.emplace_back(p.value.size(), 0.0f);
    }
    void step(double lr) {
        const auto rate = static_cast<float>(lr);
        for (std::size_t k = 0; k < params_.size(); ++k) {
            const auto& p = params_[k];
            const float decay = p.is_bias_or_norm ? 0.0f : weight_decay_;
            float* v = velocity_[k].data();
            for (std::size_t i = 0; i < p.value.size(); ++i) {
                v[i] = momentum_ * v[i] + p.gradient[i] + decay * p.value[i];
                p.value[i] -= rate * v[i];
            }
        }
    }

private:
    std::vector<nn::parameter<float>> params_;
    float momentum_, weight_decay_;
    std::vector<std::vector<float>> velocity_;
};

double learning_rate(const recipe& r, std::size_t step, std::size_t total) {
    const double progress = static_cast<double>(step) / static_cast<double>(total);
    if (r.schedule == "cosine") return r.lr * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
    if (r.schedule == "step") return r.lr * (progress < 0.5 ? 1.0 : progress < 0.75 ? 0.1 : 0.01);
    return r.lr;
}

nn::model<float> build(const recipe& r) {
    if (r.model == "mlp") return nn::mnist_mlp<float>(r.batch, r.seed);
    if (r.model == "cnn") return nn::mnist_cnn<float>(r.batch, r.seed);
    return nn::cifar_resnet<float>(r.batch, r.seed, r.resnet_blocks);
}

std::pair<data::dataset, data::dataset> load(const recipe& r) {
    const bool cifar = r.model == "resnet";
    if (r.synthetic > 0) {
        const std::size_t side = cifar ? 32 : 28, channels = cifar ? 3 : 1;
        return {data::make_synthetic(r.synthetic, side, side, channels, 10, r.seed),
                data::make_synthetic(std::max<std::size_t>(r.synthetic / 6, 1), side, side, channels, 10, r.seed, 1)};
    }
    if (cifar)
        return {data::load_cifar10(r.data_dir, data::split::train), data::load_cifar10(r.data_dir, data::split::test)};
    const auto dir = r.data_dir.empty() ? data::default_fashion_mnist_dir : std::filesystem::path(r.data_dir);
    return {data::load_mnist(dir, data::split::train), data::load_mnist(dir, data::split::test)};
}

}  // namespace

int main(int argc, char** argv) {
    recipe r;
    CLI::App app("Serial SGD training with the examples' neural-network toolkit");
    app.add_option("--model", r.model, "mlp, cnn (28x28 grey) or resnet (32x32 colour)")
        ->check(CLI::IsMember({"mlp", "cnn", "resnet"}));
    app.add_option("--data", r.data_dir, "MNIST-format or CIFAR-10 binary directory (default: Fashion-MNIST)");
    app.add_option("--synthetic", r.synthetic, "train on this many synthetic samples instead of files");
    app.add_option("--epochs", r.epochs)->check(CLI::PositiveNumber);
    app.add_option("--batch-size", r.batch)->check(CLI::PositiveNumber);
    app.add_option("--lr", r.lr)->check(CLI::PositiveNumber);
    app.add_option("--momentum", r.momentum)->check(CLI::Range(0.0, 0.999));
    app.add_option("--weight-decay", r.weight_decay)->check(CLI::NonNegativeNumber);
    app.add_option("--schedule", r.schedule, "constant, step (x0.1 at 50% and 75%) or cosine")
        ->check(CLI::IsMember({"constant", "step", "cosine"}));
    app.add_option("--resnet-blocks", r.resnet_blocks, "residual blocks per stage (3 = ResNet-20)")
        ->check(CLI::PositiveNumber);
    app.add_option("--blas-threads", r.threads, "OpenBLAS threads")->check(CLI::PositiveNumber);
    app.add_option("--seed", r.seed);
    CLI11_PARSE(app, argc, argv);

    try {
        nn::set_blas_threads(static_cast<int>(r.threads));
        std::printf("BLAS: OpenBLAS %s kernels, %zu thread(s)\n", nn::blas_core().c_str(), r.threads);
        if (const auto faster = nn::faster_blas_core())
            std::printf("note: this CPU has AVX-512; OPENBLAS_CORETYPE=%s would make the GEMMs faster\n",
                        faster->c_str());
        const auto [train, test] = load(r);
        const auto norm = data::normalization::of(train);
        auto m = build(r);
        std::printf("%s: %zu training and %zu test samples\n%s", r.model.c_str(), train.size(), test.size(),
                    m.summary().c_str());
        sgd_momentum optimizer(m.parameters(), r.momentum, r.weight_decay);
        nn::softmax_cross_entropy<float> loss(r.batch, train.classes);
        data::batch_loader<float> loader(train, norm, r.batch);
        data::sharded_sampler sampler(train.size(), 0, 1, r.seed);
        const std::size_t total_steps = r.epochs * sampler.batches_per_epoch(r.batch);
        std::size_t step = 0;
        double train_seconds = 0, train_cpu_seconds = 0, trained = 0;
        nn::evaluation last;
        for (std::size_t epoch = 0; epoch < r.epochs; ++epoch, sampler.next_epoch()) {
            const auto start = std::chrono::steady_clock::now();
            const std::clock_t cpu_start = std::clock();  // CPU time too: on a shared machine it is the steadier one
            double loss_sum = 0, correct = 0, seen = 0;
            for (auto indices = sampler.next(r.batch); !indices.empty(); indices = sampler.next(r.batch), ++step) {
                loader.load(indices);
                const auto logits = m.forward(loader.images(), loader.size(), nn::mode::train);
                const auto n = static_cast<double>(loader.size());
                loss_sum += loss.forward(logits, loader.labels()) * n;
                correct += static_cast<double>(loss.correct());
                seen += n;
                m.backward(loss.gradient());
                optimizer.step(learning_rate(r, step, total_steps));
            }
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            const double cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
            train_seconds += seconds;
            train_cpu_seconds += cpu_seconds;
            trained += seen;
            last = nn::evaluate(m, test, norm);
            std::printf(
                "epoch %zu: train loss %.4f acc %.4f | test loss %.4f acc %.4f | %.1f s, %.0f samples/s, "
                "%.0f samples/cpu-s\n",
                epoch + 1, loss_sum / seen, correct / seen, last.loss, last.accuracy, seconds, seen / seconds,
                seen / cpu_seconds);
            std::fflush(stdout);
        }
        std::printf(
            "{\"model\": \"%s\", \"epochs\": %zu, \"batch_size\": %zu, \"lr\": %g, \"momentum\": %g, "
            "\"weight_decay\": %g, \"schedule\": \"%s\", \"blas_threads\": %zu, \"test_accuracy\": %.4f, "
            "\"train_seconds\": %.2f, \"samples_per_s\": %.0f, \"samples_per_cpu_s\": %.0f}\n",
            r.model.c_str(), r.epochs, r.batch, r.lr, r.momentum, r.weight_decay, r.schedule.c_str(), r.threads,
            last.accuracy, train_seconds, trained / train_seconds, trained / train_cpu_seconds);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "hitch-example-serial: %s\n", e.what());
        return 1;
    }
}
