#pragma once
// A seeded random source whose output is the same with every standard library: std::mt19937_64 is fully
// specified, but std::normal_distribution and std::shuffle are not, so the draws are written out here. Every rank
// that uses the same seed gets the same model initialisation and the same data order.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <random>
#include <span>
#include <utility>

namespace hitch_examples::nn {

class random_source {
public:
    explicit random_source(std::uint64_t seed) : engine_(seed) {}

    /// A seed derived from (seed, stream), so independent streams (one per epoch, say) need no shared state.
    static std::uint64_t derive(std::uint64_t seed, std::uint64_t stream) {
        std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (stream + 1);  // splitmix64 finaliser
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }

    /// Uniform in [0, 1) with 53 random bits.
    double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

    /// Uniform integer in [0, n), unbiased (rejection of the top partial range). n must be positive.
    std::uint64_t below(std::uint64_t n) {
        const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
        std::uint64_t x = engine_();
        while (x >= limit) x = engine_();
        return x % n;
    }

    /// Standard normal (Box-Muller; the second value of each pair is kept for the next call).
    double normal() {
        if (has_spare_) {
            has_spare_ = false;
            return spare_;
        }
        const double u = 1.0 - uniform();  // (0, 1]: log(u) is finite
        const double r = std::sqrt(-2.0 * std::log(u));
        const double angle = 2.0 * std::numbers::pi * uniform();
        spare_ = r * std::sin(angle);
        has_spare_ = true;
        return r * std::cos(angle);
    }

    /// Fisher-Yates shuffle.
    template <class T>
    void shuffle(std::span<T> values) {
        for (std::size_t i = values.size(); i > 1; --i) std::swap(values[i - 1], values[below(i)]);
    }

private:
    std::mt19937_64 engine_;
    double spare_ = 0.0;
    bool has_spare_ = false;
};

}  // namespace hitch_examples::nn
