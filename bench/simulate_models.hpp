#pragma once
// The parameter tensors of the models the scaling study simulates, in forward order, each with its share of the
// forward pass's multiply-adds per image: ResNet-50 and ResNet-101 (He et al. 2016, torchvision's layout: 224x224
// inputs, the stride on the 3x3 convolution) and Inception V3 (Szegedy et al. 2016, torchvision's layout with the
// auxiliary classifier: 299x299 inputs). A convolution's multiply-adds are its weights times its output positions; a
// batch norm's two vectors are costed as one multiply-add per element and position. hitch-simulate spreads a step's
// backward pass over the tensors in proportion to these, so the last layers' gradients are ready first.
#include <cstddef>
#include <string>
#include <vector>

namespace hitch_bench {

struct model_tensor {
    std::string name;
    std::size_t size;  // elements
    double flops;      // forward multiply-adds per image that this tensor takes part in
};

struct model_description {
    std::string name;
    std::vector<model_tensor> tensors;

    [[nodiscard]] std::size_t parameters() const {
        std::size_t n = 0;
        for (const auto& t : tensors) n += t.size;
        return n;
    }
    [[nodiscard]] double flops() const {
        double f = 0;
        for (const auto& t : tensors) f += t.flops;
        return f;
    }
};

namespace detail {

class model_builder {
public:
    explicit model_builder(std::string name) { m_.name = std::move(name); }
    /// A convolution without bias of `in` to `out` channels, kernel kh x kw, producing a side x side map; then its
    /// batch norm (weight and bias of `out`).
    void conv_bn(const std::string& name, std::size_t in, std::size_t out, std::size_t kh, std::size_t kw,
                 std::size_t side, const std::string& bn_name) {
        const double positions = static_cast<double>(side * side);
        const std::size_t weights = in * out * kh * kw;
        m_.tensors.push_back({name + ".weight", weights, static_cast<double>(weights) * positions});
        m_.tensors.push_back({bn_name + ".weight", out, static_cast<double>(out) * positions});
        m_.tensors.push_back({bn_name + ".bias", out, static_cast<double>(out) * positions});
    }
    void linear(const std::string& name, std::size_t in, std::size_t out) {
        m_.tensors.push_back({name + ".weight", in * out, static_cast<double>(in * out)});
        m_.tensors.push_back({name + ".bias", out, static_cast<double>(out)});
    }
    [[nodiscard]] model_description done() { return std::move(m_); }

private:
    model_description m_;
};

inline model_description resnet(const std::string& name, const int (&blocks)[4]) {
    model_builder b(name);
    b.conv_bn("conv1", 3, 64, 7, 7, 112, "bn1");
    std::size_t in = 64;
    const std::size_t widths[] = {64, 128, 256, 512};
    const std::size_t sides[] = {56, 28, 14, 7};
    for (int s = 0; s < 4; ++s) {
        const std::size_t width = widths[s], out = width * 4, side = sides[s];
        for (int k = 0; k < blocks[s]; ++k) {
            const std::string p = "layer" + std::to_string(s + 1) + "." + std::to_string(k);
            // The first block of stages 2-4 strides in its 3x3 convolution: its 1x1 reduction sees the larger map.
            const std::size_t before = (k == 0 && s > 0) ? side * 2 : side;
            b.conv_bn(p + ".conv1", in, width, 1, 1, before, p + ".bn1");
            b.conv_bn(p + ".conv2", width, width, 3, 3, side, p + ".bn2");
            b.conv_bn(p + ".conv3", width, out, 1, 1, side, p + ".bn3");
            if (k == 0) b.conv_bn(p + ".downsample.0", in, out, 1, 1, side, p + ".downsample.1");
            in = out;
        }
    }
    b.linear("fc", 2048, 1000);
    return b.done();
}

}  // namespace detail

/// ResNet-50: 161 tensors, 25,557,032 parameters (bench/resnet50.hpp has the same tensors).
inline model_description resnet50() { return detail::resnet("resnet50", {3, 4, 6, 3}); }
/// ResNet-101: 314 tensors, 44,549,160 parameters.
inline model_description resnet101() { return detail::resnet("resnet101", {3, 4, 23, 3}); }

/// Inception V3 with its auxiliary classifier (trained with it, as in the TensorFlow benchmarks): 27,161,264
/// parameters.
inline model_description inception_v3() {
    detail::model_builder b("inception_v3");
    const auto c = [&](const std::string& n, std::size_t in, std::size_t out, std::size_t kh, std::size_t kw,
                       std::size_t side) { b.conv_bn(n + ".conv", in, out, kh, kw, side, n + ".bn"); };
    c("Conv2d_1a_3x3", 3, 32, 3, 3, 149);
    c("Conv2d_2a_3x3", 32, 32, 3, 3, 147);
    c("Conv2d_2b_3x3", 32, 64, 3, 3, 147);
    c("Conv2d_3b_1x1", 64, 80, 1, 1, 73);
    c("Conv2d_4a_3x3", 80, 192, 3, 3, 71);
    const auto inception_a = [&](const std::string& p, std::size_t in, std::size_t pool) {
        c(p + ".branch1x1", in, 64, 1, 1, 35);
        c(p + ".branch5x5_1", in, 48, 1, 1, 35);
        c(p + ".branch5x5_2", 48, 64, 5, 5, 35);
        c(p + ".branch3x3dbl_1", in, 64, 1, 1, 35);
        c(p + ".branch3x3dbl_2", 64, 96, 3, 3, 35);
        c(p + ".branch3x3dbl_3", 96, 96, 3, 3, 35);
        c(p + ".branch_pool", in, pool, 1, 1, 35);
    };
    inception_a("Mixed_5b", 192, 32);
    inception_a("Mixed_5c", 256, 64);
    inception_a("Mixed_5d", 288, 64);
    c("Mixed_6a.branch3x3", 288, 384, 3, 3, 17);
    c("Mixed_6a.branch3x3dbl_1", 288, 64, 1, 1, 35);
    c("Mixed_6a.branch3x3dbl_2", 64, 96, 3, 3, 35);
    c("Mixed_6a.branch3x3dbl_3", 96, 96, 3, 3, 17);
    const auto inception_c = [&](const std::string& p, std::size_t c7) {
        c(p + ".branch1x1", 768, 192, 1, 1, 17);
        c(p + ".branch7x7_1", 768, c7, 1, 1, 17);
        c(p + ".branch7x7_2", c7, c7, 1, 7, 17);
        c(p + ".branch7x7_3", c7, 192, 7, 1, 17);
        c(p + ".branch7x7dbl_1", 768, c7, 1, 1, 17);
        c(p + ".branch7x7dbl_2", c7, c7, 7, 1, 17);
        c(p + ".branch7x7dbl_3", c7, c7, 1, 7, 17);
        c(p + ".branch7x7dbl_4", c7, c7, 7, 1, 17);
        c(p + ".branch7x7dbl_5", c7, 192, 1, 7, 17);
        c(p + ".branch_pool", 768, 192, 1, 1, 17);
    };
    inception_c("Mixed_6b", 128);
    inception_c("Mixed_6c", 160);
    inception_c("Mixed_6d", 160);
    inception_c("Mixed_6e", 192);
    c("AuxLogits.conv0", 768, 128, 1, 1, 5);
    c("AuxLogits.conv1", 128, 768, 5, 5, 1);
    b.linear("AuxLogits.fc", 768, 1000);
    c("Mixed_7a.branch3x3_1", 768, 192, 1, 1, 17);
    c("Mixed_7a.branch3x3_2", 192, 320, 3, 3, 8);
    c("Mixed_7a.branch7x7x3_1", 768, 192, 1, 1, 17);
    c("Mixed_7a.branch7x7x3_2", 192, 192, 1, 7, 17);
    c("Mixed_7a.branch7x7x3_3", 192, 192, 7, 1, 17);
    c("Mixed_7a.branch7x7x3_4", 192, 192, 3, 3, 8);
    const auto inception_e = [&](const std::string& p, std::size_t in) {
        c(p + ".branch1x1", in, 320, 1, 1, 8);
        c(p + ".branch3x3_1", in, 384, 1, 1, 8);
        c(p + ".branch3x3_2a", 384, 384, 1, 3, 8);
        c(p + ".branch3x3_2b", 384, 384, 3, 1, 8);
        c(p + ".branch3x3dbl_1", in, 448, 1, 1, 8);
        c(p + ".branch3x3dbl_2", 448, 384, 3, 3, 8);
        c(p + ".branch3x3dbl_3a", 384, 384, 1, 3, 8);
        c(p + ".branch3x3dbl_3b", 384, 384, 3, 1, 8);
        c(p + ".branch_pool", in, 192, 1, 1, 8);
    };
    inception_e("Mixed_7b", 1280);
    inception_e("Mixed_7c", 2048);
    b.linear("fc", 2048, 1000);
    return b.done();
}

/// A model of `layers` tensors of `parameters` / layers elements each, equal in cost: a stand-in of a given size.
inline model_description uniform_model(std::size_t parameters, std::size_t layers) {
    model_description m;
    m.name = "uniform";
    for (std::size_t k = 0; k < layers; ++k) {
        const std::size_t n = parameters / layers + (k < parameters % layers ? 1 : 0);
        m.tensors.push_back({"layer" + std::to_string(k), n, 1.0});
    }
    return m;
}

/// The model called `name` (resnet50, resnet101, inception_v3, or uniform:N: N parameters in 16 equal layers);
/// empty tensors for any other name.
inline model_description model_named(const std::string& name) {
    if (name.rfind("uniform:", 0) == 0) return uniform_model(std::stoull(name.substr(8)), 16);
    if (name == "resnet50") return resnet50();
    if (name == "resnet101") return resnet101();
    if (name == "inception_v3") return inception_v3();
    return {};
}

}  // namespace hitch_bench
