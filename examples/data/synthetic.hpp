#pragma once
// A synthetic data set for throughput runs where no data is at hand: each class has a random prototype image and
// each sample is its class's prototype plus noise, so a model can learn it and a run exercises the same paths as
// real data. The same seed gives the same data on every rank.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "nn/random.hpp"

namespace hitch_examples::data {

/// `samples` images of height x width x channels in `classes` classes. The prototypes come from `seed`, the samples
/// from (seed, stream): a training and a test set are the same seed with streams 0 and 1.
inline dataset make_synthetic(std::size_t samples, std::size_t height, std::size_t width, std::size_t channels,
                              std::size_t classes, std::uint64_t seed, std::uint64_t stream = 0) {
    if (samples == 0 || height == 0 || width == 0 || channels == 0 || classes < 2 || classes > 256)
        throw std::invalid_argument(
            "data::make_synthetic: samples, height, width and channels must be positive "
            "and classes within [2, 256]");
    const std::size_t n = height * width * channels;
    std::vector<double> prototypes(classes * n);
    nn::random_source prototype_rng(seed);
    for (double& v : prototypes) v = 64.0 + 128.0 * prototype_rng.uniform();
    nn::random_source rng(nn::random_source::derive(seed, stream));
    dataset d;
    d.name = "synthetic";
    d.classes = classes;
    d.images = xt::xtensor<std::uint8_t, 4>::from_shape({samples, height, width, channels});
    d.labels = xt::xtensor<std::uint8_t, 1>::from_shape({samples});
    for (std::size_t s = 0; s < samples; ++s) {
        const std::size_t label = rng.below(classes);
        d.labels[s] = static_cast<std::uint8_t>(label);
        std::uint8_t* image = d.images.data() + s * n;
        for (std::size_t i = 0; i < n; ++i) {
            const double noisy = prototypes[label * n + i] + 128.0 * (rng.uniform() - 0.5);
            image[i] = static_cast<std::uint8_t>(std::clamp(noisy, 0.0, 255.0));
        }
    }
    return d;
}

}  // namespace hitch_examples::data
