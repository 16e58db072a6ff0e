// hitch-cifar: a small residual network (ResNet-8 by default, ResNet-20 with --model resnet20) on the CIFAR-10
// binary format (data_batch_1.bin ... data_batch_5.bin and test_batch.bin in --data), data-parallel over MPI ranks
// or threads. The data set is not shipped: --synthetic trains on random data of CIFAR's shape to measure
// throughput.
//
//   mpiexec -n 2 hitch-cifar --data ~/cifar-10-batches-bin --epochs 30
//   hitch-cifar --threads 2 --synthetic --epochs 1
#include <memory>
#include <utility>

#include "data/cifar.hpp"
#include "data/synthetic.hpp"
#include "nn/models.hpp"
#include "trainer/cli.hpp"

int main(int argc, char** argv) {
    using namespace hitch_examples;
    example_info info;
    info.program = "hitch-cifar";
    info.example = "cifar";
    info.models = {"resnet8", "resnet20"};
    info.defaults.model = "resnet8";
    info.defaults.data = "cifar-10-batches-bin";
    info.defaults.optimizer = "momentum";
    info.defaults.lr = 0.1;
    info.defaults.batch_size = 128;
    info.defaults.epochs = 30;
    info.defaults.lr_schedule = "cosine";
    info.defaults.synthetic_samples = 2048;
    return run_main(argc, argv, info, [](const train_config& c, std::shared_ptr<void>& keep) {
        auto sets = std::make_shared<std::pair<data::dataset, data::dataset>>();
        if (c.synthetic) {
            sets->first = data::make_synthetic(c.synthetic_samples, 32, 32, 3, 10, c.seed, 0);
            sets->second = data::make_synthetic(512, 32, 32, 3, 10, c.seed, 1);
        } else {
            sets->first = data::load_cifar10(c.data, data::split::train);
            sets->second = data::load_cifar10(c.data, data::split::test);
        }
        keep = sets;
        task t;
        t.train = &sets->first;
        t.test = &sets->second;
        t.norm = data::normalization::of(sets->first);
        const std::size_t blocks = c.model == "resnet20" ? 3 : 1;
        t.build = [blocks](std::size_t batch, std::uint64_t seed) {
            return nn::cifar_resnet<float>(batch, seed, blocks);
        };
        return t;
    });
}
