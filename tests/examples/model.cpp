// The model's contract with a trainer: parameter list and storage, gradient-ready callbacks, seeded initialisation.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "gradient_check.hpp"
#include "nn/nn.hpp"

namespace nn = hitch_examples::nn;

namespace {

std::vector<nn::model<float>> example_models(std::size_t max_batch, std::uint64_t seed) {
    std::vector<nn::model<float>> models;
    models.push_back(nn::mnist_mlp<float>(max_batch, seed));
    models.push_back(nn::mnist_cnn<float>(max_batch, seed));
    models.push_back(nn::cifar_resnet<float>(max_batch, seed, 1));
    return models;
}

std::vector<float> random_batch(const nn::model<float>& m, std::size_t batch, std::uint64_t seed) {
    nn::random_source rng(seed);
    std::vector<float> x(batch * m.input_shape().size());
    for (float& v : x) v = static_cast<float>(rng.normal());
    return x;
}

}  // namespace

TEST_CASE("on_gradient_ready reports every parameter once, last first, after its gradient is final",
          "[examples][nn][model]") {
    const std::size_t batch = 4;
    for (auto& m : example_models(batch, 1)) {
        INFO(m.summary());
        const auto& params = m.parameters();
        std::vector<std::int32_t> labels{1, 3, 5, 7};
        nn::softmax_cross_entropy<float> loss(batch, 10);
        // Two different batches: a callback that fired before its gradient was written in the second backward
        // would see the first batch's gradient, which differs from the final one.
        for (std::uint64_t step = 0; step < 2; ++step) {
            const auto x = random_batch(m, batch, 10 + step);
            loss.forward(m.forward(x, batch, nn::mode::train), labels);
            std::vector<std::size_t> order;
            std::vector<std::vector<float>> seen(params.size());
            m.backward(loss.gradient(), [&](std::size_t i) {
                order.push_back(i);
                REQUIRE(i < params.size());
                seen[i].assign(params[i].gradient.begin(), params[i].gradient.end());
            });
            REQUIRE(order.size() == params.size());
            for (std::size_t k = 0; k < order.size(); ++k) CHECK(order[k] == params.size() - 1 - k);
            for (std::size_t i = 0; i < params.size(); ++i) {
                INFO(params[i].name);
                CHECK(seen[i] == std::vector<float>(params[i].gradient.begin(), params[i].gradient.end()));
                if (step == 0) continue;
                double norm = 0;  // the second batch's gradient is a real one, so the comparison means something
                for (float g : params[i].gradient) norm += double(g) * g;
                CHECK(norm > 0);
            }
        }
        m.backward(loss.gradient());  // without a callback
    }
}

TEST_CASE("parameters: names, flags, sizes and storage that never moves", "[examples][nn][model]") {
    auto m = nn::mnist_mlp<float>(8, 3);
    const auto& p = m.parameters();
    std::vector<std::string> names;
    for (const auto& q : p) names.push_back(q.name);
    CHECK(names ==
          std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"});
    CHECK(p[0].value.size() == 784 * 512);
    CHECK(p[5].value.size() == 10);
    CHECK(m.parameter_count() == 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
    for (const auto& q : p) CHECK(q.is_bias_or_norm == q.name.ends_with(".bias"));
    CHECK(p[0].rows == 512);  // weights as matrices: outputs x inputs; vectors have no rows
    CHECK(p[2].rows == 256);
    CHECK(p[1].rows == 0);

    auto cnn = nn::mnist_cnn<float>(8, 3);
    std::set<std::string> unique;
    for (const auto& q : cnn.parameters()) {
        unique.insert(q.name);
        const bool bias_or_norm = q.name.ends_with(".bias") || q.name.ends_with(".gamma") || q.name.ends_with(".beta");
        CHECK(q.is_bias_or_norm == bias_or_norm);
        CHECK(q.value.size() == q.gradient.size());
    }
    CHECK(unique.size() == cnn.parameters().size());
    CHECK(unique.count("bn1.gamma") == 1);
    for (const auto& q : cnn.parameters()) {
        if (q.name == "conv2.weight") CHECK(q.rows == 64);  // out_channels x (3 x 3 x 32)
        if (q.name.ends_with(".gamma")) CHECK(q.rows == 0);
    }
    std::vector<std::string> buffers;
    for (const auto& b : cnn.buffers()) buffers.push_back(b.name);
    CHECK(buffers ==
          std::vector<std::string>{"bn1.running_mean", "bn1.running_var", "bn2.running_mean", "bn2.running_var"});

    auto resnet = nn::cifar_resnet<float>(8, 3, 1);
    std::set<std::string> resnet_names;
    for (const auto& q : resnet.parameters()) resnet_names.insert(q.name);
    CHECK(resnet_names.count("stage2.block1.shortcut.weight") == 1);
    CHECK(resnet_names.count("stage1.block1.shortcut.weight") == 0);  // identity shortcut there
    CHECK(resnet_names.size() == resnet.parameters().size());

    // Views taken once stay valid: moving the model and training it touches the same storage.
    std::vector<float*> values, grads;
    for (const auto& q : p) values.push_back(q.value.data()), grads.push_back(q.gradient.data());
    nn::model<float> moved = std::move(m);
    const auto x = random_batch(moved, 8, 4);
    nn::softmax_cross_entropy<float> loss(8, 10);
    loss.forward(moved.forward(x, 8, nn::mode::train), std::vector<std::int32_t>(8, 2));
    moved.backward(loss.gradient());
    for (std::size_t i = 0; i < moved.parameters().size(); ++i) {
        CHECK(moved.parameters()[i].value.data() == values[i]);
        CHECK(moved.parameters()[i].gradient.data() == grads[i]);
    }
    CHECK(grads[0][0] == moved.parameters()[0].gradient[0]);
}

TEST_CASE("the same seed gives the same model, another seed another; He initialisation", "[examples][nn][model]") {
    auto a = example_models(4, 42), b = example_models(4, 42), c = example_models(4, 43);
    for (std::size_t k = 0; k < a.size(); ++k) {
        bool differs = false;
        for (std::size_t i = 0; i < a[k].parameters().size(); ++i) {
            const auto& pa = a[k].parameters()[i].value;
            const auto& pb = b[k].parameters()[i].value;
            const auto& pc = c[k].parameters()[i].value;
            CHECK(std::vector<float>(pa.begin(), pa.end()) == std::vector<float>(pb.begin(), pb.end()));
            differs |= std::vector<float>(pa.begin(), pa.end()) != std::vector<float>(pc.begin(), pc.end());
        }
        CHECK(differs);
    }
    // fc1.weight of the MLP: fan-in 784, so N(0, 2/784); 401408 draws pin the mean and deviation closely.
    const auto& w = a[0].parameters()[0].value;
    double sum = 0, sum2 = 0;
    for (float v : w) sum += v, sum2 += double(v) * v;
    const double n = static_cast<double>(w.size()), mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
    CHECK(std::abs(mean) < 5 * std::sqrt(2.0 / 784) / std::sqrt(n));
    CHECK(sd == Approx(std::sqrt(2.0 / 784)).epsilon(0.01));
    for (float v : a[0].parameters()[1].value) CHECK(v == 0.0f);  // fc1.bias
    for (const auto& q : a[1].parameters()) {
        if (q.name.ends_with(".gamma"))
            for (float v : q.value) CHECK(v == 1.0f);
        if (q.name.ends_with(".beta"))
            for (float v : q.value) CHECK(v == 0.0f);
    }
}

TEST_CASE("the model rejects batches it was not built for", "[examples][nn][model]") {
    auto m = nn::mnist_mlp<float>(4, 1);
    std::vector<float> x(5 * 784);
    CHECK_THROWS_WITH(m.forward(x, 5, nn::mode::train), Catch::Contains("batches up to 4"));
    CHECK_THROWS_AS(m.forward(std::span<const float>(x.data(), 100), 1, nn::mode::train), std::invalid_argument);
    CHECK_THROWS_AS(m.backward(std::vector<float>(40)), std::logic_error);  // no forward yet
    m.forward(x, 4, nn::mode::train);
    CHECK_THROWS_AS(m.backward(std::vector<float>(39)), std::invalid_argument);
    CHECK_THROWS_AS(nn::conv2d<float>("c", 0, 3), std::invalid_argument);
    CHECK_THROWS_WITH(nn::batch_norm<float>("bn", {.momentum = 1.5}), Catch::Contains("momentum"));
    nn::model<float> small({2, 2, 1}, 1);
    CHECK_THROWS_WITH(small.add(nn::conv2d<float>("c", 1, 5)), Catch::Contains("does not fit"));
}

TEST_CASE("float and double models compute the same function", "[examples][nn][model]") {
    // The float model used for training is the double model used in the gradient checks, up to rounding.
    auto f = nn::cifar_resnet<float>(2, 5, 1);
    auto d = nn::cifar_resnet<double>(2, 5, 1);
    const auto xf = random_batch(f, 2, 6);
    const std::vector<double> xd(xf.begin(), xf.end());
    const auto yf = f.forward(xf, 2, nn::mode::train);
    const auto yd = d.forward(xd, 2, nn::mode::train);
    for (std::size_t i = 0; i < yf.size(); ++i) CHECK(yf[i] == Approx(yd[i]).margin(1e-4).epsilon(1e-3));
}

TEST_CASE("models train concurrently on threads (one BLAS thread each) exactly as they do alone",
          "[examples][nn][model]") {
    // Ranks as threads (comm::local) run one model per thread: the BLAS must be safe to call concurrently.
    nn::set_blas_threads(1);
    const std::size_t batch = 16, steps = 5;
    const auto train = [&](nn::model<float>& m) {
        nn::softmax_cross_entropy<float> loss(batch, 10);
        std::vector<std::int32_t> labels(batch);
        for (std::size_t s = 0; s < steps; ++s) {
            const auto x = random_batch(m, batch, 100 + s);
            for (std::size_t b = 0; b < batch; ++b) labels[b] = static_cast<std::int32_t>((b + s) % 10);
            loss.forward(m.forward(x, batch, nn::mode::train), labels);
            m.backward(loss.gradient());
            for (const auto& p : m.parameters())
                for (std::size_t i = 0; i < p.value.size(); ++i) p.value[i] -= 0.05f * p.gradient[i];
        }
    };
    auto alone = nn::mnist_cnn<float>(batch, 9);
    train(alone);
    std::vector<nn::model<float>> models;
    for (int t = 0; t < 3; ++t) models.push_back(nn::mnist_cnn<float>(batch, 9));
    std::vector<std::thread> threads;
    for (auto& m : models) threads.emplace_back([&train, &m] { train(m); });
    for (auto& t : threads) t.join();
    for (auto& m : models)
        for (std::size_t i = 0; i < m.parameters().size(); ++i) {
            const auto& a = m.parameters()[i].value;
            const auto& b = alone.parameters()[i].value;
            CHECK(std::equal(a.begin(), a.end(), b.begin()));
        }
}
