#pragma once
// The example models: an MLP and a small CNN for 28x28 grey images (MNIST, Fashion-MNIST), and a small residual
// network for 32x32 colour images (CIFAR-10). Each is initialised from a seed.

#include <cstdint>
#include <string>
#include <vector>

#include "nn/batch_norm.hpp"
#include "nn/conv2d.hpp"
#include "nn/dense.hpp"
#include "nn/flatten.hpp"
#include "nn/model.hpp"
#include "nn/pooling.hpp"
#include "nn/relu.hpp"
#include "nn/residual.hpp"

namespace hitch_examples::nn {

/// flatten -> (dense -> relu) per hidden width -> dense(classes). Layers are named fc1, fc2, ...
template <class T>
model<T> mlp(shape input, std::vector<std::size_t> hidden, std::size_t classes, std::size_t max_batch,
             std::uint64_t seed) {
    model<T> m(input, max_batch);
    m.add(flatten<T>());
    std::size_t n = 0;
    for (std::size_t width : hidden) {
        m.add(dense<T>("fc" + std::to_string(++n), width));
        m.add(relu<T>());
    }
    m.add(dense<T>("fc" + std::to_string(++n), classes));
    m.initialize(seed);
    return m;
}

/// The MNIST / Fashion-MNIST MLP: 784-512-256-10.
template <class T>
model<T> mnist_mlp(std::size_t max_batch, std::uint64_t seed) {
    return mlp<T>({28, 28, 1}, {512, 256}, 10, max_batch, seed);
}

/// The MNIST / Fashion-MNIST CNN: two 3x3 convolution stages (32 and 64 channels, batch norm, ReLU, 2x2 max pool)
/// and a 256-wide hidden dense layer.
template <class T>
model<T> mnist_cnn(std::size_t max_batch, std::uint64_t seed) {
    model<T> m({28, 28, 1}, max_batch);
    const conv2d_options same{.stride = 1, .padding = 1, .bias = false};
    m.add(conv2d<T>("conv1", 32, 3, same));
    m.add(batch_norm<T>("bn1"));
    m.add(relu<T>());
    m.add(max_pool2d<T>(2));
    m.add(conv2d<T>("conv2", 64, 3, same));
    m.add(batch_norm<T>("bn2"));
    m.add(relu<T>());
    m.add(max_pool2d<T>(2));
    m.add(flatten<T>());
    m.add(dense<T>("fc1", 256));
    m.add(relu<T>());
    m.add(dense<T>("fc2", 10));
    m.initialize(seed);
    return m;
}

/// A CIFAR-10 ResNet (He et al. 2016, section 4.2): a 3x3 16-channel stem, three stages of `blocks_per_stage`
/// residual blocks with 16, 32 and 64 channels (stride 2 between stages), global average pooling and a dense
/// classifier. blocks_per_stage = 3 is ResNet-20; 1 gives a quick 8-layer network.
template <class T>
model<T> cifar_resnet(std::size_t max_batch, std::uint64_t seed, std::size_t blocks_per_stage = 1) {
    model<T> m({32, 32, 3}, max_batch);
    m.add(conv2d<T>("stem", 16, 3, {.stride = 1, .padding = 1, .bias = false}));
    m.add(batch_norm<T>("stem_bn"));
    m.add(relu<T>());
    const std::size_t widths[] = {16, 32, 64};
    for (std::size_t stage = 0; stage < 3; ++stage)
        for (std::size_t b = 0; b < blocks_per_stage; ++b)
            m.add(residual_block<T>("stage" + std::to_string(stage + 1) + ".block" + std::to_string(b + 1),
                                    widths[stage], stage > 0 && b == 0 ? 2 : 1));
    m.add(global_avg_pool<T>());
    m.add(dense<T>("fc", 10));
    m.initialize(seed);
    return m;
}

}  // namespace hitch_examples::nn
