#pragma once
// ResNet-50's parameter tensors (He et al. 2016, torchvision's layout), in order: 161 tensors, 25,557,032 floats.
// The optimizer and compressor benchmarks run on these sizes.
#include <cstddef>
#include <string>
#include <vector>

namespace hitch_bench {

struct resnet50_tensor {
    std::string name;
    std::size_t rows;   // output channels (classes for the classifier); the length of a vector
    std::size_t cols;   // fan-in (in x k x k for a convolution); 1 for a vector
    bool bias_or_norm;  // a batch-norm parameter or the classifier bias
    [[nodiscard]] std::size_t size() const { return rows * cols; }
};

inline std::vector<resnet50_tensor> resnet50_tensors() {
    std::vector<resnet50_tensor> t;
    auto conv = [&](const std::string& name, std::size_t in, std::size_t out, std::size_t k) {
        t.push_back({name + ".weight", out, in * k * k, false});
    };
    auto bn = [&](const std::string& name, std::size_t c) {
        t.push_back({name + ".weight", c, 1, true});
        t.push_back({name + ".bias", c, 1, true});
    };
    conv("conv1", 3, 64, 7);
    bn("bn1", 64);
    std::size_t in = 64;
    const std::size_t widths[] = {64, 128, 256, 512};
    const int blocks[] = {3, 4, 6, 3};
    for (int s = 0; s < 4; ++s) {
        const std::size_t width = widths[s], out = width * 4;
        for (int b = 0; b < blocks[s]; ++b) {
            const std::string p = "layer" + std::to_string(s + 1) + "." + std::to_string(b);
            conv(p + ".conv1", in, width, 1);
            bn(p + ".bn1", width);
            conv(p + ".conv2", width, width, 3);
            bn(p + ".bn2", width);
            conv(p + ".conv3", width, out, 1);
            bn(p + ".bn3", out);
            if (b == 0) {
                conv(p + ".downsample.0", in, out, 1);
                bn(p + ".downsample.1", out);
            }
            in = out;
        }
    }
    t.push_back({"fc.weight", 1000, 2048, false});
    t.push_back({"fc.bias", 1000, 1, true});
    return t;
}

}  // namespace hitch_bench
