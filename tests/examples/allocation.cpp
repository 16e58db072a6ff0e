// A training step allocates nothing: every buffer is sized for the largest batch when the model is built. Global
// operator new is replaced in this test executable to count allocations while steps run.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <new>

#include "nn/nn.hpp"

namespace {

std::atomic<std::size_t> allocations{0};

void* counted(std::size_t size, std::size_t alignment) {
    allocations.fetch_add(1, std::memory_order_relaxed);
    void* p = alignment > alignof(std::max_align_t)
                  ? std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment)
                  : std::malloc(size == 0 ? 1 : size);
    if (!p) throw std::bad_alloc();
    return p;
}

}  // namespace

void* operator new(std::size_t size) { return counted(size, 0); }
void* operator new[](std::size_t size) { return counted(size, 0); }
void* operator new(std::size_t size, std::align_val_t a) { return counted(size, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t size, std::align_val_t a) { return counted(size, static_cast<std::size_t>(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

TEST_CASE("training and evaluation steps allocate nothing", "[examples][nn][model]") {
    namespace nn = hitch_examples::nn;
    const std::size_t batch = 8;
    std::vector<nn::model<float>> models;
    models.push_back(nn::mnist_mlp<float>(batch, 1));
    models.push_back(nn::mnist_cnn<float>(batch, 1));
    models.push_back(nn::cifar_resnet<float>(batch, 1, 1));
    for (auto& m : models) {
        nn::softmax_cross_entropy<float> loss(batch, 10);
        std::vector<float> x(batch * m.input_shape().size(), 0.5f);
        std::vector<std::int32_t> labels(batch, 3);
        std::size_t ready = 0;
        const std::function<void(std::size_t)> on_ready = [&](std::size_t) { ++ready; };
        const auto step = [&](std::size_t n) {
            loss.forward(m.forward(std::span<const float>(x).first(n * m.input_shape().size()), n, nn::mode::train),
                         std::span<const std::int32_t>(labels).first(n));
            m.backward(loss.gradient(), on_ready);
            for (const auto& p : m.parameters())
                for (std::size_t i = 0; i < p.value.size(); ++i) p.value[i] -= 0.01f * p.gradient[i];
            m.forward(x, batch, nn::mode::eval);
        };
        step(batch);  // warm-up: the BLAS sets up its buffers on first use
        const std::size_t before = allocations.load();
        step(batch);
        step(batch / 2);  // a smaller last batch too
        step(batch);
        const std::size_t during = allocations.load() - before;
        INFO(m.summary());
        CHECK(during == 0);
        CHECK(ready == 4 * m.parameters().size());
    }
}
