#pragma once
// The model the ZeRO tests train (over comm::local and comm::mpi): five layers of odd sizes, the smallest flagged as
// biases, so buckets cut layers across ranks and some ranks hold an empty piece.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "hitch/core/layer.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/device/cpu.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/train/data_parallel.hpp"

namespace hitch_test {

inline const std::vector<std::size_t> shape{7, 1000, 1, 4099, 33};

struct net {
    std::vector<std::vector<float>> w, g;
    net() {
        for (std::size_t k = 0; k < shape.size(); ++k) {
            w.emplace_back(shape[k]);
            g.emplace_back(shape[k]);
            for (std::size_t i = 0; i < shape[k]; ++i)
                w[k][i] = static_cast<float>((i * 7 + k * 3) % 23) * 0.05f - 0.5f;
        }
    }
    std::vector<hitch::layer> layers() {
        std::vector<hitch::layer> out;
        for (std::size_t k = 0; k < w.size(); ++k) {
            hitch::layer l{"l" + std::to_string(k), hitch::view(w[k]), hitch::view(g[k])};
            if (shape[k] < 10) l.flags = hitch::layer_flags::bias_or_norm();
            out.push_back(l);
        }
        return out;
    }
    void fill(int rank, int step) {
        for (std::size_t k = 0; k < g.size(); ++k)
            for (std::size_t i = 0; i < g[k].size(); ++i)
                g[k][i] = static_cast<float>(static_cast<int>((i * 13 + k * 5 + static_cast<std::size_t>(rank * 11) +
                                                               static_cast<std::size_t>(step * 17)) %
                                                              29) -
                                             14) /
                          16.0f;
    }
};

/// What a rank ends with: its parameters and the optimizer state bytes it holds.
struct outcome {
    std::vector<std::vector<float>> w;
    std::size_t state_bytes = 0;
};

/// `steps` steps of optimizer O under ZeRO stage `zero` (0: unsharded) on this rank of `comm`, ring schedule.
template <class O, class C>
outcome train_zero(C& comm, unsigned zero, int steps, const typename O::options_type& opt) {
    net m;
    hitch::cpu dev;
    using dp_t = hitch::data_parallel<O, hitch::compress::none, hitch::sync::hard, hitch::allreduce::ring>;
    typename dp_t::options o;
    o.optimizer = opt;
    o.learning_rate = hitch::lr::constant({0.05});
    o.zero_stage = zero;
    o.bucket_bytes = 8192;  // several buckets, a layer split across ranks in each
    dp_t dp(comm, dev, m.layers(), o);
    for (int s = 0; s < steps; ++s) {
        m.fill(comm.rank(), s);
        for (std::size_t k = shape.size(); k-- > 0;) dp.gradient_ready(k);
        (void)dp.step();
    }
    return {m.w, dp.optimizer_state_bytes()};
}

/// The largest difference between a and b relative to |b| (at least 1e-3).
inline double relative_difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
    double worst = 0;
    for (std::size_t k = 0; k < a.size(); ++k)
        for (std::size_t i = 0; i < a[k].size(); ++i)
            worst = std::max(worst, std::fabs(static_cast<double>(a[k][i]) - b[k][i]) /
                                        std::max(1e-3, std::fabs(static_cast<double>(b[k][i]))));
    return worst;
}

}  // namespace hitch_test
