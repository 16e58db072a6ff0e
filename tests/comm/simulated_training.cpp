// comm::simulated under the training engine: data_parallel with hard sync and with local SGD, overlapped and not,
// ends with parameters bit for bit equal to comm::local's, and its virtual step time is compute plus what the
// network model charges.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "hitch/comm/local.hpp"
#include "hitch/comm/simulated.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/sync/local_sgd.hpp"
#include "hitch/train/data_parallel.hpp"

namespace {

constexpr double compute_s = 0.01;  // per step, on comm::simulated

/// Four steps of momentum SGD with gradients whose means are inexact, so only bit-identical all-reduces agree.
template <class Sync, class C>
std::uint64_t train(C& comm, bool overlap) {
    std::vector<std::vector<float>> w{std::vector<float>(5000, 0.5f), std::vector<float>(7, 0.1f),
                                      std::vector<float>(30000, 0.2f)};
    auto g = w;
    std::vector<hitch::layer> layers;
    for (std::size_t k = 0; k < w.size(); ++k)
        layers.push_back({"l" + std::to_string(k), hitch::view(w[k]), hitch::view(g[k])});
    hitch::cpu dev;
    // A fixed schedule: automatic times its probes, on the steady clock on comm::local and on virtual time here,
    // and may choose differently.
    using engine = hitch::data_parallel<hitch::optim::momentum, hitch::compress::none, Sync, hitch::allreduce::ring>;
    typename engine::options o;
    o.overlap = overlap;
    o.bucket_bytes = 65536;
    if constexpr (std::is_same_v<Sync, hitch::sync::local_sgd>) o.sync.period = 2;
    engine dp(comm, dev, layers, o);
    for (int s = 0; s < 4; ++s) {
        for (auto& v : g)
            for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<float>(i * (comm.rank() + 1) + s));
        if constexpr (hitch::has_clock<C>) comm.compute(hitch::seconds_f(compute_s));
        for (std::size_t k = layers.size(); k-- > 0;) dp.gradient_ready(k);
        dp.step();
    }
    return dp.parameter_hash();
}

template <class Sync>
void matches_local(int p) {
    for (bool overlap : {false, true}) {
        CAPTURE(p, overlap);
        const auto want = hitch::comm::run_local(p, [&](hitch::comm::local& c) { return train<Sync>(c, overlap); });
        const auto net = hitch::comm::simulated_network::single_switch({5e-6, 1e10});
        const auto got = hitch::comm::run_simulated(p, net, [&](hitch::comm::simulated& c) {
            const std::uint64_t hash = train<Sync>(c, overlap);
            return std::pair<std::uint64_t, double>(hash, c.virtual_time().count());
        });
        for (int r = 0; r < p; ++r) {
            CHECK(got[static_cast<std::size_t>(r)].first == want[static_cast<std::size_t>(r)]);
            CHECK(got[static_cast<std::size_t>(r)].second > 4 * compute_s);
            CHECK(got[static_cast<std::size_t>(r)].second < 4 * compute_s + 0.05);
        }
    }
}

}  // namespace

TEST_CASE("comm::simulated: data_parallel with hard sync equals comm::local bit for bit", "[comm][simulated][train]") {
    matches_local<hitch::sync::hard>(3);
    matches_local<hitch::sync::hard>(4);
}

TEST_CASE("comm::simulated: data_parallel with local SGD equals comm::local bit for bit", "[comm][simulated][train]") {
    matches_local<hitch::sync::local_sgd>(4);
}
