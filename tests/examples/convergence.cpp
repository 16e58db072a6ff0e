// The MLP learns Fashion-MNIST: a fraction of an epoch of plain SGD, written here, must beat 80% test accuracy
// (chance is 10%; the full recipe reaches about 90%). A correctness check of the whole training path (data,
// normalisation, forward, loss, backward), not a speed test.
#include <catch2/catch.hpp>

#include "data/dataset.hpp"
#include "data/mnist.hpp"
#include "data/sampler.hpp"
#include "nn/nn.hpp"

namespace nn = hitch_examples::nn;
namespace data = hitch_examples::data;

TEST_CASE("the Fashion-MNIST MLP beats 80% test accuracy after half an epoch of SGD", "[examples][convergence]") {
    nn::set_blas_threads(1);
    const auto train = data::load_mnist(data::default_fashion_mnist_dir, data::split::train);
    const auto test = data::load_mnist(data::default_fashion_mnist_dir, data::split::test);
    const auto norm = data::normalization::of(train);
    const std::size_t batch = 100, steps = 300;  // 30000 samples: half an epoch
    auto m = nn::mnist_mlp<float>(batch, 1);
    nn::softmax_cross_entropy<float> loss(batch, 10);
    data::batch_loader<float> loader(train, norm, batch);
    data::sharded_sampler sampler(train.size(), 0, 1, 1);

    float first_loss = 0, last_loss = 0;
    for (std::size_t step = 0; step < steps; ++step) {
        loader.load(sampler.next(batch));
        const float value = loss.forward(m.forward(loader.images(), batch, nn::mode::train), loader.labels());
        (step == 0 ? first_loss : last_loss) = value;
        m.backward(loss.gradient());
        for (const auto& p : m.parameters())  // plain SGD: w -= lr g
            for (std::size_t i = 0; i < p.value.size(); ++i) p.value[i] -= 0.1f * p.gradient[i];
    }
    CHECK(first_loss > 1.5f);  // about log(10) = 2.3 at the start
    CHECK(last_loss < 0.8f);

    data::batch_loader<float> eval(test, norm, batch);
    std::size_t correct = 0;
    for (std::size_t first = 0; first < test.size(); first += batch) {
        eval.load_range(first, batch);
        loss.forward(m.forward(eval.images(), batch, nn::mode::eval), eval.labels());
        correct += loss.correct();
    }
    const double accuracy = static_cast<double>(correct) / static_cast<double>(test.size());
    INFO("test accuracy " << accuracy);
    CHECK(accuracy > 0.80);
}
