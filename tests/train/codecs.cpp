// Every codec through data_parallel over comm::local: replicas stay bit-identical (every aggregation path gives
// the same bits on every rank), training on a noisy quadratic makes progress, and a checkpoint taken mid-run
// resumes bit for bit (codec state: residuals, ring residuals, PowerSGD's Q, DGC's momentum).
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cmath>
#include <filesystem>

#include "../comm/suite.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/bf16.hpp"
#include "hitch/compress/dgc.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/randomk.hpp"
#include "hitch/compress/terngrad.hpp"
#include "hitch/compress/threshold.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/train/data_parallel.hpp"

using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;
namespace compress = hitch::compress;

namespace {

constexpr std::size_t rows = 24, cols = 32;

/// loss = 0.5 ||w - target||^2 summed over a 24 x 32 matrix layer and a vector layer; rank r's gradient is
/// w - target plus noise that averages to zero over ranks.
struct quadratic {
    std::vector<float> w1 = std::vector<float>(rows * cols, 0.0f), g1 = w1;
    std::vector<float> w2 = std::vector<float>(cols, 0.0f), g2 = w2;
    static float target(std::size_t i) { return std::sin(0.37f * static_cast<float>(i)) + 0.5f; }
    std::vector<hitch::layer> layers() {
        return {{"weight", hitch::view(w1), hitch::view(g1), {}, rows}, {"bias", hitch::view(w2), hitch::view(g2)}};
    }
    void gradients(int rank, int p, int step) {
        const float sign = (rank % 2 == 0 ? 1.0f : -1.0f) * (p % 2 == 0 ? 1.0f : 0.0f);
        for (std::size_t i = 0; i < w1.size(); ++i)
            g1[i] =
                w1[i] - target(i) + 0.1f * sign * std::cos(static_cast<float>(i * 7 + static_cast<std::size_t>(step)));
        for (std::size_t i = 0; i < w2.size(); ++i) g2[i] = w2[i] - target(i + 1000);
    }
    [[nodiscard]] double loss() const {
        double l = 0;
        for (std::size_t i = 0; i < w1.size(); ++i) l += 0.5 * std::pow(w1[i] - target(i), 2);
        for (std::size_t i = 0; i < w2.size(); ++i) l += 0.5 * std::pow(w2[i] - target(i + 1000), 2);
        return l;
    }
};

template <class Codec>
void check_codec(Codec codec, double lr, double max_loss_fraction) {
    using dp_t = hitch::data_parallel<hitch::optim::sgd, Codec>;
    const auto dir = std::filesystem::temp_directory_path() /
                     ("hitch-test-codecs-" + std::string(Codec::name) + "-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const int steps = 60, half = 30;
    const auto run = [&](local& comm, int from, int to, bool save, bool load) {
        quadratic q;
        hitch::cpu dev;
        typename dp_t::options o;
        o.compressor = codec;
        o.learning_rate = hitch::lr::constant({lr});
        dp_t dp(comm, dev, q.layers(), o);
        const double initial = q.loss();
        if (load) dp.load(dir / "ckpt");
        for (int s = from; s < to; ++s) {
            q.gradients(comm.rank(), comm.size(), s);
            dp.step();
        }
        if (save) dp.save(dir / "ckpt");
        return std::make_tuple(dp.parameter_hash(), q.loss(), initial);
    };
    const auto straight = run_local(2, [&](local& comm) { return run(comm, 0, steps, false, false); });
    CHECK(std::get<0>(straight[0]) == std::get<0>(straight[1]));                     // replicas bit-identical
    CHECK(std::get<1>(straight[0]) < max_loss_fraction * std::get<2>(straight[0]));  // it trains
    (void)run_local(2, [&](local& comm) { return run(comm, 0, half, true, false); });
    const auto resumed = run_local(2, [&](local& comm) { return run(comm, half, steps, false, true); });
    CHECK(std::get<0>(resumed[0]) == std::get<0>(straight[0]));  // resumes bit for bit
    CHECK(std::get<0>(resumed[1]) == std::get<0>(straight[1]));
    std::filesystem::remove_all(dir);
}

}  // namespace

TEST_CASE("every codec trains through data_parallel, keeps replicas identical and resumes exactly",
          "[train][data_parallel][compress]") {
    // Rates suit each codec: unbiased quantisers and random-k add variance (smaller steps), DGC carries momentum
    // 0.9 of its own (an effective rate 10x larger), threshold sends +-tau per element. QSGD and TernGrad run with
    // their defaults (7 levels; no clipping).
    SECTION("fp16") { check_codec(compress::fp16{}, 0.2, 1e-3); }
    SECTION("bf16") { check_codec(compress::bf16{}, 0.2, 1e-3); }
    SECTION("onebit with error feedback (compression-aware ring)") {
        check_codec(compress::error_feedback<compress::onebit>{}, 0.2, 0.05);
    }
    SECTION("qsgd (compression-aware ring)") { check_codec(compress::qsgd{}, 0.02, 0.5); }
    SECTION("terngrad (compression-aware ring)") { check_codec(compress::terngrad{}, 0.02, 0.6); }
    SECTION("threshold with error feedback (all-gather)") {
        compress::threshold_options t;
        t.tau = 0.5f;
        check_codec(compress::error_feedback<compress::threshold>(compress::threshold(t)), 0.2, 0.1);
    }
    SECTION("topk with error feedback (all-gather)") {
        compress::topk_options t;
        t.density = 0.1;
        check_codec(compress::error_feedback<compress::topk>(compress::topk(t)), 0.2, 0.05);
    }
    SECTION("dgc (all-gather)") {
        // 768 weights at DGC's final 99.9% sparsity would send one element a step; 90% suits a layer this small.
        compress::dgc::options_type d;
        d.final_density = 0.1;
        check_codec(compress::dgc(d), 0.02, 0.1);
    }
    SECTION("randomk (additive)") {
        compress::randomk::options_type k;
        k.density = 0.25;  // unbiased scaling by 1/density multiplies the variance: a small rate
        check_codec(compress::randomk(k), 0.05, 0.5);
    }
    SECTION("powersgd (two all-reduces, the weight as a 24 x 32 matrix)") {
        check_codec(compress::powersgd{}, 0.2, 0.05);
    }
}

TEST_CASE("compressor_options sets a codec's options without naming its type, and they are checked",
          "[train][data_parallel][compress]") {
    using ef_topk = hitch::compress::error_feedback<hitch::compress::topk>;
    hitch::data_parallel<hitch::optim::sgd, ef_topk>::options o;
    o.compressor_options({.density = 0.25});
    CHECK(o.compressor.options().density == 0.25);
    hitch::data_parallel<hitch::optim::sgd, hitch::compress::qsgd>::options q;
    q.compressor_options({.levels = 4});
    CHECK(q.compressor.options().levels == 4);
    CHECK_THROWS_AS(o.compressor_options({.density = 1.5}), hitch::config_error);  // the codec checks its own
    CHECK(o.compressor.options().density == 0.25);                                 // and nothing changed
}
