// hitch-mnist: an MLP or a CNN on MNIST-format data (Fashion-MNIST from Debian's dataset-fashion-mnist package by
// default; point --data at real MNIST files to use them), data-parallel over MPI ranks or threads.
//
//   mpiexec -n 2 hitch-mnist --epochs 5                    two MPI ranks, default policies
//   hitch-mnist --threads 2 --model cnn --optimizer lars   two ranks as threads
#include <memory>
#include <utility>

#include "data/mnist.hpp"
#include "data/synthetic.hpp"
#include "nn/models.hpp"
#include "trainer/cli.hpp"

int main(int argc, char** argv) {
    using namespace hitch_examples;
    example_info info;
    info.program = "hitch-mnist";
    info.example = "mnist";
    info.models = {"mlp", "cnn"};
    info.defaults.model = "mlp";
    info.defaults.data = "/usr/share/datasets/fashion-mnist";
    info.defaults.optimizer = "momentum";
    info.defaults.lr = 0.1;
    info.defaults.batch_size = 128;
    info.defaults.epochs = 10;
    info.defaults.lr_schedule = "cosine";
    return run_main(argc, argv, info, [](const train_config& c, std::shared_ptr<void>& keep) {
        auto sets = std::make_shared<std::pair<data::dataset, data::dataset>>();
        if (c.synthetic) {
            sets->first = data::make_synthetic(c.synthetic_samples, 28, 28, 1, 10, c.seed, 0);
            sets->second = data::make_synthetic(2000, 28, 28, 1, 10, c.seed, 1);
        } else {
            sets->first = data::load_mnist(c.data, data::split::train);
            sets->second = data::load_mnist(c.data, data::split::test);
        }
        keep = sets;
        task t;
        t.train = &sets->first;
        t.test = &sets->second;
        t.norm = data::normalization::of(sets->first);
        const std::string model = c.model;
        t.build = [model](std::size_t batch, std::uint64_t seed) {
            return model == "cnn" ? nn::mnist_cnn<float>(batch, seed) : nn::mnist_mlp<float>(batch, seed);
        };
        return t;
    });
}
