// Every layer of the examples' toolkit: forward against a direct (loop-by-loop) reference, backward against finite
// differences (gradient_check.hpp states the bound), in double precision.
#include "gradient_check.hpp"

#include "nn/nn.hpp"

namespace nn = hitch_examples::nn;
using hitch_test::check_layer;

TEST_CASE("dense gradients", "[examples][nn][gradient]") {
    check_layer(nn::dense<double>("fc", 5), {1, 1, 7}, 3);
    check_layer(nn::dense<double>("fc", 4), {3, 2, 2}, 2);  // a non-flat input is read as one row per sample
}

TEST_CASE("conv2d gradients for each kind of stride, padding and kernel", "[examples][nn][gradient]") {
    check_layer(nn::conv2d<double>("c", 3, 3, {.stride = 1, .padding = 1, .bias = true}), {5, 4, 2}, 2);
    check_layer(nn::conv2d<double>("c", 4, 3, {.stride = 2, .padding = 1, .bias = false}), {7, 6, 3}, 2);
    check_layer(nn::conv2d<double>("c", 3, 1, {.stride = 1, .padding = 0, .bias = true}), {4, 3, 5}, 2);  // direct
    check_layer(nn::conv2d<double>("c", 2, 1, {.stride = 2, .padding = 0, .bias = false}), {5, 5, 3}, 2);
    check_layer(nn::conv2d<double>("c", 2, 2, {.stride = 2, .padding = 0, .bias = true}), {5, 4, 1}, 3);
    check_layer(nn::conv2d<double>("c", 2, 5, {.stride = 1, .padding = 2, .bias = true}), {3, 6, 2}, 1);
    // 360-value patches: col is built in blocks of 91 rows, so these 108 rows take two blocks.
    check_layer(nn::conv2d<double>("c", 2, 3, {.stride = 1, .padding = 1, .bias = true}), {6, 6, 40}, 3);
}

TEST_CASE("relu, pooling and flatten gradients", "[examples][nn][gradient]") {
    check_layer(nn::relu<double>(), {3, 3, 2}, 2, nn::mode::train, true);
    check_layer(nn::max_pool2d<double>(2), {5, 4, 3}, 2, nn::mode::train, true);  // a ragged last row is dropped
    check_layer(nn::max_pool2d<double>(3), {6, 6, 2}, 1, nn::mode::train, true);
    check_layer(nn::global_avg_pool<double>(), {3, 4, 5}, 2);
    check_layer(nn::flatten<double>(), {2, 3, 2}, 2);
}

TEST_CASE("batch norm gradients in training and evaluation mode", "[examples][nn][gradient]") {
    check_layer(nn::batch_norm<double>("bn"), {3, 3, 4}, 3, nn::mode::train);
    check_layer(nn::batch_norm<double>("bn"), {1, 1, 6}, 5, nn::mode::train);
    check_layer(nn::batch_norm<double>("bn"), {3, 3, 4}, 3, nn::mode::eval);
}

TEST_CASE("residual block gradients, identity and projection shortcuts", "[examples][nn][gradient]") {
    check_layer(nn::residual_block<double>("res", 3, 1), {4, 4, 3}, 2);  // identity
    check_layer(nn::residual_block<double>("res", 5, 2), {5, 4, 3}, 2);  // projection: channels and stride
    check_layer(nn::residual_block<double>("res", 3, 2), {4, 4, 3}, 2);  // projection: stride only
    check_layer(nn::residual_block<double>("res", 3, 1), {4, 4, 3}, 2, nn::mode::eval);
}

TEST_CASE("softmax cross-entropy gradient and value", "[examples][nn][gradient]") {
    const std::size_t batch = 4, classes = 5;
    auto logits = hitch_test::normal_values(batch * classes, 3, 4.0);
    const std::vector<std::int32_t> labels{0, 4, 2, 2};
    nn::softmax_cross_entropy<double> loss(batch, classes);
    const double value = loss.forward(logits, labels);
    const std::vector<double> g(loss.gradient().begin(), loss.gradient().end());

    double reference = 0.0;  // -mean log softmax, computed directly
    for (std::size_t b = 0; b < batch; ++b) {
        double sum = 0.0;
        for (std::size_t j = 0; j < classes; ++j) sum += std::exp(logits[b * classes + j]);
        reference -= std::log(std::exp(logits[b * classes + static_cast<std::size_t>(labels[b])]) / sum);
    }
    CHECK(value == Approx(reference / batch).epsilon(1e-12));

    for (std::size_t i = 0; i < logits.size(); ++i) {
        const double saved = logits[i];
        logits[i] = saved + hitch_test::fd_step;
        const double up = loss.forward(logits, labels);
        logits[i] = saved - hitch_test::fd_step;
        const double down = loss.forward(logits, labels);
        logits[i] = saved;
        CHECK(hitch_test::fd_error(g[i], (up - down) / (2 * hitch_test::fd_step)) < hitch_test::fd_tolerance);
    }
}

TEST_CASE("softmax cross-entropy is stable for huge logits and rejects bad labels", "[examples][nn]") {
    nn::softmax_cross_entropy<float> loss(2, 3);
    const std::vector<float> logits{1000.f, 0.f, -1000.f, -5000.f, 5000.f, 0.f};
    const float value = loss.forward(logits, std::vector<std::int32_t>{0, 0});
    CHECK(std::isfinite(value));
    CHECK(value == Approx(5000.0f));  // sample 0: ~0; sample 1: 5000 - (-5000) = 10000
    CHECK(loss.correct() == 1);
    CHECK_THROWS_WITH(loss.forward(logits, std::vector<std::int32_t>{0, 3}), Catch::Contains("label 3 of sample 1"));
    CHECK_THROWS_AS(loss.forward(logits, std::vector<std::int32_t>{0, 1, 2}), std::invalid_argument);
}

TEST_CASE("whole models backpropagate through every layer into every parameter", "[examples][nn][gradient]") {
    // A small CNN and a small ResNet, probed through the softmax cross-entropy loss of labelled samples.
    const auto check_model = [](nn::model<double> m, std::size_t batch) {
        hitch_test::perturb(m, 5);
        const auto x = hitch_test::normal_values(batch * m.input_shape().size(), 6);
        std::vector<std::int32_t> labels(batch);
        for (std::size_t b = 0; b < batch; ++b) labels[b] = static_cast<std::int32_t>(b % m.output_shape().size());
        nn::softmax_cross_entropy<double> loss(batch, m.output_shape().size());
        const auto value = [&] { return loss.forward(m.forward(x, batch, nn::mode::train), labels); };
        value();
        m.backward(loss.gradient());
        double worst = 0.0;
        std::string where;
        for (const auto& p : m.parameters()) {
            const std::vector<double> g(p.gradient.begin(), p.gradient.end());
            for (std::size_t i = 0; i < p.value.size(); i += 1 + p.value.size() / 40) {  // about 40 per tensor
                const double saved = p.value[i];
                p.value[i] = saved + hitch_test::fd_step;
                const double up = value();
                p.value[i] = saved - hitch_test::fd_step;
                const double down = value();
                p.value[i] = saved;
                const double e = hitch_test::fd_error(g[i], (up - down) / (2 * hitch_test::fd_step));
                if (e > worst) worst = e, where = p.name + "[" + std::to_string(i) + "]";
            }
        }
        INFO(m.summary() << "worst: " << where);
        CHECK(worst < hitch_test::fd_tolerance);
    };

    nn::model<double> cnn({8, 8, 2}, 3);
    cnn.add(nn::conv2d<double>("conv1", 4, 3, {.stride = 1, .padding = 1, .bias = true}));
    cnn.add(nn::batch_norm<double>("bn1"));
    cnn.add(nn::relu<double>());
    cnn.add(nn::max_pool2d<double>(2));
    cnn.add(nn::conv2d<double>("conv2", 3, 3, {.stride = 2, .padding = 1, .bias = false}));
    cnn.add(nn::flatten<double>());
    cnn.add(nn::dense<double>("fc1", 6));
    cnn.add(nn::relu<double>());
    cnn.add(nn::dense<double>("fc2", 4));
    cnn.initialize(1);
    check_model(std::move(cnn), 3);

    nn::model<double> resnet({6, 6, 2}, 2);
    resnet.add(nn::conv2d<double>("stem", 3, 3, {.stride = 1, .padding = 1, .bias = false}));
    resnet.add(nn::residual_block<double>("block1", 3, 1));
    resnet.add(nn::residual_block<double>("block2", 4, 2));
    resnet.add(nn::global_avg_pool<double>());
    resnet.add(nn::dense<double>("fc", 3));
    resnet.initialize(2);
    check_model(std::move(resnet), 2);
}

// ---- forward passes against direct references -----------------------------------------------------------------

TEST_CASE("conv2d forward matches a direct convolution", "[examples][nn]") {
    struct config {
        nn::shape in;
        std::size_t batch, k, kernel, stride, pad;
    };
    // The second has 360-value patches and 108 rows: col is built in two blocks.
    for (const auto& [in, batch, k, kernel, stride, pad] :
         {config{{6, 5, 3}, 2, 3, 3, 2, 1}, config{{6, 6, 40}, 3, 4, 3, 1, 1}}) {
        nn::model<double> m(in, batch);
        m.add(nn::conv2d<double>("c", k, kernel, {.stride = stride, .padding = pad, .bias = true}));
        m.initialize(3);
        hitch_test::perturb(m, 4);
        const auto x = hitch_test::normal_values(batch * in.size(), 5);
        const auto y = m.forward(x, batch, nn::mode::train);
        const auto& w = m.parameters()[0].value;  // k x kernel x kernel x c
        const auto& bias = m.parameters()[1].value;
        const nn::shape out = m.output_shape();
        REQUIRE(out ==
                nn::shape{(in.height + 2 * pad - kernel) / stride + 1, (in.width + 2 * pad - kernel) / stride + 1, k});
        std::size_t wrong = 0;
        for (std::size_t b = 0; b < batch; ++b)
            for (std::size_t oh = 0; oh < out.height; ++oh)
                for (std::size_t ow = 0; ow < out.width; ++ow)
                    for (std::size_t o = 0; o < k; ++o) {
                        double sum = bias[o];
                        for (std::size_t r = 0; r < kernel; ++r)
                            for (std::size_t s = 0; s < kernel; ++s)
                                for (std::size_t c = 0; c < in.channels; ++c) {
                                    const long ih = static_cast<long>(oh * stride + r) - static_cast<long>(pad);
                                    const long iw = static_cast<long>(ow * stride + s) - static_cast<long>(pad);
                                    if (ih < 0 || iw < 0 || ih >= static_cast<long>(in.height) ||
                                        iw >= static_cast<long>(in.width))
                                        continue;
                                    sum += w[((o * kernel + r) * kernel + s) * in.channels + c] *
                                           x[((b * in.height + static_cast<std::size_t>(ih)) * in.width +
                                              static_cast<std::size_t>(iw)) *
                                                 in.channels +
                                             c];
                                }
                        const double got = y[((b * out.height + oh) * out.width + ow) * k + o];
                        wrong += std::abs(got - sum) > 1e-12 * (1 + std::abs(sum));
                    }
        CHECK(wrong == 0);
    }
}

TEST_CASE("dense, max-pool, global-average-pool and batch-norm forward match their formulas", "[examples][nn]") {
    SECTION("dense: y = x W^T + b") {
        nn::model<double> m({1, 1, 4}, 2);
        m.add(nn::dense<double>("fc", 3));
        hitch_test::perturb(m, 1);
        const std::vector<double> x{1, 2, 3, 4, -1, 0.5, 0, 2};
        const auto y = m.forward(x, 2, nn::mode::train);
        const auto& w = m.parameters()[0].value;
        const auto& b = m.parameters()[1].value;
        for (std::size_t s = 0; s < 2; ++s)
            for (std::size_t o = 0; o < 3; ++o) {
                double ref = b[o];
                for (std::size_t i = 0; i < 4; ++i) ref += x[s * 4 + i] * w[o * 4 + i];
                CHECK(y[s * 3 + o] == Approx(ref).epsilon(1e-12));
            }
    }
    SECTION("max pool 2x2 and global average") {
        nn::model<double> m({2, 4, 1}, 1);
        m.add(nn::max_pool2d<double>(2));
        const std::vector<double> x{1, 5, 2, 0, 3, -1, 7, 6};
        const auto y = m.forward(x, 1, nn::mode::train);
        CHECK(std::vector<double>(y.begin(), y.end()) == std::vector<double>{5, 7});
        nn::model<double> g({2, 2, 2}, 1);
        g.add(nn::global_avg_pool<double>());
        const std::vector<double> z{1, 10, 2, 20, 3, 30, 4, 40};
        const auto a = g.forward(z, 1, nn::mode::train);
        CHECK(a[0] == Approx(2.5));
        CHECK(a[1] == Approx(25.0));
    }
    SECTION("batch norm: batch statistics in training, running statistics in evaluation") {
        nn::model<double> m({1, 1, 2}, 4);
        m.add(nn::batch_norm<double>("bn", {.momentum = 0.25, .epsilon = 1e-5}));
        const std::vector<double> x{1, 10, 2, 20, 3, 30, 6, 40};  // channel 0: 1 2 3 6; channel 1: 10 20 30 40
        const auto y = m.forward(x, 4, nn::mode::train);
        const double mean0 = 3.0, var0 = (4 + 1 + 0 + 9) / 4.0;
        CHECK(y[0] == Approx((1 - mean0) / std::sqrt(var0 + 1e-5)).epsilon(1e-12));
        CHECK(y[6] == Approx((6 - mean0) / std::sqrt(var0 + 1e-5)).epsilon(1e-12));
        const auto& running_mean = m.buffers()[0].value;
        const auto& running_var = m.buffers()[1].value;
        CHECK(running_mean[0] == Approx(0.75 * 0 + 0.25 * mean0));
        CHECK(running_var[0] == Approx(0.75 * 1 + 0.25 * var0 * 4 / 3));  // unbiased variance
        CHECK(running_mean[1] == Approx(0.25 * 25));
        const std::vector<double> probe{3, 25};
        const auto e = m.forward(probe, 1, nn::mode::eval);
        CHECK(e[0] == Approx((3 - running_mean[0]) / std::sqrt(running_var[0] + 1e-5)).epsilon(1e-12));
        CHECK(e[1] == Approx((25 - running_mean[1]) / std::sqrt(running_var[1] + 1e-5)).epsilon(1e-12));
        CHECK(running_mean[0] == Approx(0.25 * mean0));  // evaluation leaves the statistics alone
    }
}
