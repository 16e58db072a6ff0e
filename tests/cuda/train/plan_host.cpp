// The bucket plan of layers in GPU memory and the GPU intake's chunk table (hitch/cuda/train/intake.hpp), on the
// host: the plan is the host plan of the same sizes, each bucket's layers are consecutive (the intake reads and
// resets a bucket's layer rows as one range), and each bucket's chunks cover exactly its layers' elements, once, in
// order, whatever the sizes (zero-size layers, layers larger than a bucket, layers of a chunk's size and one more).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "hitch/core/layer.hpp"
#include "hitch/cuda/train/intake.hpp"
#include "hitch/train/buckets.hpp"

namespace {

namespace co = hitch::cuda::optim;

std::vector<hitch::layer> layers_of(const std::vector<std::size_t>& sizes, hitch::memory_space space) {
    std::vector<hitch::layer> out;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
        auto* fake = reinterpret_cast<float*>(std::uintptr_t{0x10000} * (k + 1));  // never dereferenced
        std::string name = "layer";
        name += std::to_string(k);
        out.push_back(
            {name, hitch::tensor_view<float>(fake, sizes[k], space), hitch::tensor_view<float>(fake, sizes[k], space)});
    }
    return out;
}

void check_plan_and_layout(const std::vector<std::size_t>& sizes, std::size_t bucket_bytes) {
    INFO("bucket_bytes " << bucket_bytes << ", " << sizes.size() << " layers");
    const auto gpu = hitch::train::plan_buckets(layers_of(sizes, hitch::memory_space::cuda), bucket_bytes);
    const auto host = hitch::train::plan_buckets(layers_of(sizes, hitch::memory_space::host), bucket_bytes);
    REQUIRE(gpu.size() == host.size());
    for (std::size_t b = 0; b < gpu.size(); ++b) {
        CHECK(gpu[b].layers == host[b].layers);
        CHECK(gpu[b].offsets == host[b].offsets);
        CHECK(gpu[b].elements == host[b].elements);
    }
    const hitch::cuda::train::intake_layout layout = hitch::cuda::train::make_intake_layout(gpu, sizes);
    REQUIRE(layout.first.size() == gpu.size() + 1);
    CHECK(layout.first.back() == layout.chunks.size());
    std::vector<std::size_t> covered(sizes.size(), 0);
    for (std::size_t b = 0; b < gpu.size(); ++b) {
        const auto& layers = gpu[b].layers;
        // Consecutive: the rows of a bucket are one range [lo, lo + count).
        for (std::size_t i = 1; i < layers.size(); ++i) CHECK(layers[i] + 1 == layers[i - 1]);
        for (std::uint64_t c = layout.first[b]; c < layout.first[b + 1]; ++c) {
            const co::chunk_entry e = layout.chunks[c];
            REQUIRE(std::find(layers.begin(), layers.end(), e.tensor) != layers.end());
            CHECK(co::chunk_begin(e.index) == covered[e.tensor]);  // in order, no gap, no overlap
            covered[e.tensor] = co::chunk_end(sizes[e.tensor], e.index);
        }
    }
    for (std::size_t k = 0; k < sizes.size(); ++k) CHECK(covered[k] == sizes[k]);
}

}  // namespace

TEST_CASE("GPU layers get the host's bucket plan, and the intake's chunks cover each bucket exactly",
          "[cuda][train][plan]") {
    const std::size_t chunk = co::chunk_elements;
    check_plan_and_layout({300, 7, 1025, 0, 64, 4100}, 2048);
    check_plan_and_layout({0, 0, 1, 0}, 4);
    check_plan_and_layout({chunk, chunk + 1, chunk - 1, 1, 3 * chunk + 5}, chunk * 4);
    check_plan_and_layout({chunk, chunk + 1, chunk - 1, 1, 3 * chunk + 5}, std::size_t{25} << 20);
    std::mt19937 rng(3);
    std::uniform_int_distribution<std::size_t> size(0, 3 * chunk);
    for (int round = 0; round < 20; ++round) {
        std::vector<std::size_t> sizes(1 + static_cast<std::size_t>(round) % 9);
        for (std::size_t& n : sizes) n = size(rng);
        check_plan_and_layout(sizes, 4 * (1 + static_cast<std::size_t>(round) * 1000));
    }
}
