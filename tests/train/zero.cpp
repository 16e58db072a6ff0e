// data_parallel with sharded optimizer state (ZeRO stages 1 and 2) over comm::local: the same parameters as the
// unsharded run for every optimizer, 1/p of the state per rank, checkpoints of the shards, and refusals.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../comm/suite.hpp"
#include "../error_text.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/adamw.hpp"
#include "hitch/optim/lamb.hpp"
#include "hitch/optim/lars.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/sync/local_sgd.hpp"
#include "hitch/train/data_parallel.hpp"
#include "zero_model.hpp"

using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;
using hitch_test::net;
using hitch_test::outcome;
using hitch_test::relative_difference;
using hitch_test::shape;

namespace {

template <class O>
std::vector<outcome> train(int p, unsigned zero, int steps, const typename O::options_type& opt = {}) {
    return run_local(p, [&](local& comm) { return hitch_test::train_zero<O>(comm, zero, steps, opt); });
}

template <class O>
void check_optimizer(bool elementwise, const typename O::options_type& opt = {}) {
    for (int p : {1, 2, 3, 4}) {
        const auto plain = train<O>(p, 0, 4, opt);
        for (unsigned zero : {1u, 2u}) {
            CAPTURE(O::name, p, zero);
            const auto sharded = train<O>(p, zero, 4, opt);
            std::size_t total = 0;
            for (int r = 0; r < p; ++r) {
                const auto& got = sharded[static_cast<std::size_t>(r)];
                CHECK(got.w == sharded[0].w);  // every rank has every parameter after the all-gather
                if (elementwise && zero == 1)
                    CHECK(got.w == plain[0].w);  // the same averaged gradient, the same elementwise steps
                else
                    CHECK(relative_difference(got.w, plain[0].w) <= 1e-5);
                total += got.state_bytes;
                // 1/p of the state, give or take a block boundary (one element per bucket and buffer).
                const double share = static_cast<double>(plain[0].state_bytes) / p;
                CHECK(std::fabs(static_cast<double>(got.state_bytes) - share) <= 3 * 2 * sizeof(float) * 8);
            }
            CHECK(total == plain[0].state_bytes);
        }
    }
}

}  // namespace

TEST_CASE("ZeRO 1 and 2 train as the unsharded optimizer with 1/p of the state: elementwise rules",
          "[train][data_parallel][zero]") {
    check_optimizer<hitch::optim::sgd>(true);
    check_optimizer<hitch::optim::momentum>(true, {.momentum = 0.9f, .nesterov = true});
    check_optimizer<hitch::optim::adam>(true);
    check_optimizer<hitch::optim::adamw>(true, {.weight_decay = 0.01f});
}

TEST_CASE("ZeRO 1 and 2 train as the unsharded optimizer with 1/p of the state: LARS and LAMB",
          "[train][data_parallel][zero]") {
    check_optimizer<hitch::optim::lars_sgd>(false, {.base = {.momentum = 0.9f}, .weight_decay = 1e-3f});
    check_optimizer<hitch::optim::lamb>(false, {.weight_decay = 0.01f});
}

TEST_CASE("ZeRO checkpoints save and restore each rank's shard exactly", "[train][data_parallel][zero]") {
    const auto dir = std::filesystem::temp_directory_path() / ("hitch-test-zero-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    using dp_t = hitch::data_parallel<hitch::optim::lamb, hitch::compress::none, hitch::sync::hard>;
    const auto run = [&](bool resume) {
        return run_local(3, [&](local& comm) {
            net m;
            hitch::cpu dev;
            dp_t::options o;
            o.zero_stage = 2;
            o.bucket_bytes = 8192;
            dp_t dp(comm, dev, m.layers(), o);
            for (int s = 0; s < 4; ++s) {
                if (resume && s == 2) {
                    net fresh;  // a new model and data_parallel, as a new process would have
                    dp_t again(comm, dev, fresh.layers(), o);
                    (void)again.load((dir / "ck").string());
                    for (int t = 2; t < 4; ++t) {
                        fresh.fill(comm.rank(), t);
                        (void)again.step();
                    }
                    return fresh.w;
                }
                m.fill(comm.rank(), s);
                (void)dp.step();
                if (!resume && s == 1) dp.save((dir / "ck").string());
            }
            return m.w;
        });
    };
    const auto straight = run(false);
    const auto resumed = run(true);
    for (std::size_t r = 0; r < 3; ++r) CHECK(resumed[r] == straight[r]);
    // Another partition's shard is refused: rank 0 of 2 cannot load rank 0 of 3's file, nor an unsharded run it.
    // Each rank's refusal is checked on this thread: Catch's assertions are not for several threads at once.
    const auto refused = run_local(3, [&](local& comm) {
        net m;
        hitch::cpu dev;
        dp_t::options o;
        o.bucket_bytes = 8192;
        dp_t plain(comm, dev, m.layers(), o);
        return hitch_test::error_text<hitch::mismatch_error>([&] { plain.load((dir / "ck").string()); }) != "no error";
    });
    for (const bool r : refused) CHECK(r);
    std::filesystem::remove_all(dir);
}

TEST_CASE("ZeRO refuses what it cannot shard, with the option named", "[train][data_parallel][zero]") {
    // Each rank's errors are checked on this thread: Catch's assertions are not for several threads at once.
    const auto refusals = run_local(2, [](local& comm) {
        net m;
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::local_sgd>::options o;
        o.zero_stage = 1;
        std::string local_sgd = hitch_test::error_text([&] {
            hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::local_sgd> dp(comm, dev,
                                                                                                      m.layers(), o);
        });
        hitch::data_parallel<hitch::optim::sgd, hitch::compress::topk>::options t;
        t.zero_stage = 2;
        std::string topk = hitch_test::error_text(
            [&] { hitch::data_parallel<hitch::optim::sgd, hitch::compress::topk> dp(comm, dev, m.layers(), t); });
        return std::pair{local_sgd, topk};
    });
    for (const auto& [local_sgd, topk] : refusals) {
        CHECK_THAT(local_sgd, Catch::Contains("zero_stage = 1") && Catch::Contains("local_sgd"));
        CHECK_THAT(topk, Catch::Contains("zero_stage = 2") && Catch::Contains("topk"));
    }
    hitch::data_parallel<hitch::optim::sgd>::options bad;
    bad.zero_stage = 3;
    CHECK_THROWS_WITH(bad.validate(), Catch::Contains("zero_stage = 3"));
}

TEST_CASE("ZeRO 1 keeps a compressor's exchange as it is", "[train][data_parallel][zero]") {
    std::vector<std::vector<std::vector<float>>> by_stage;
    for (unsigned zero : {0u, 1u}) {
        const auto results = run_local(3, [&](local& comm) {
            net m;
            hitch::cpu dev;
            using dp_t = hitch::data_parallel<hitch::optim::momentum, hitch::compress::topk>;
            dp_t::options o;
            o.compressor = hitch::compress::topk({.density = 0.1});
            o.zero_stage = zero;
            o.bucket_bytes = 8192;
            dp_t dp(comm, dev, m.layers(), o);
            for (int s = 0; s < 3; ++s) {
                m.fill(comm.rank(), s);
                (void)dp.step();
            }
            return m.w;
        });
        for (const auto& w : results) CHECK(w == results[0]);
        by_stage.push_back(results[0]);
    }
    CHECK(by_stage[1] == by_stage[0]);  // the same decoded gradients, the same elementwise steps
}

TEST_CASE("ZeRO composes with clipping and unused layers", "[train][data_parallel][zero]") {
    for (unsigned zero : {0u, 1u, 2u}) {
        CAPTURE(zero);
        const auto results = run_local(2, [&](local& comm) {
            net m;
            hitch::cpu dev;
            hitch::data_parallel<hitch::optim::adam>::options o;
            o.zero_stage = zero;
            o.clip_grad_norm = 1.0;
            o.find_unused_layers = true;
            o.bucket_bytes = 8192;
            hitch::data_parallel<hitch::optim::adam> dp(comm, dev, m.layers(), o);
            std::vector<double> norms;
            for (int s = 0; s < 3; ++s) {
                m.fill(comm.rank(), s);
                for (std::size_t k = shape.size(); k-- > 0;)
                    if (k != 2) dp.gradient_ready(k);  // layer 2 is never used
                norms.push_back(*dp.step().grad_norm);
            }
            return std::make_pair(m.w, norms);
        });
        static std::pair<std::vector<std::vector<float>>, std::vector<double>> unsharded;
        if (zero == 0) {
            unsharded = results[0];
            CHECK(results[0].first[2] == net().w[2]);  // never used: never stepped
        } else {
            CHECK(relative_difference(results[0].first, unsharded.first) <= 1e-5);
            for (std::size_t s = 0; s < 3; ++s) CHECK(results[1].second[s] == Approx(unsharded.second[s]));
        }
    }
}

TEST_CASE("ZeRO under mixed precision keeps 1/p of the FP32 masters and trains as the unsharded run",
          "[train][data_parallel][zero]") {
    using half = hitch::half;
    using dp_t =
        hitch::data_parallel<hitch::optim::adam, hitch::compress::none, hitch::sync::hard, hitch::allreduce::ring>;
    const auto dir = std::filesystem::temp_directory_path() / ("hitch-test-zero-mp-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    struct run_result {
        std::vector<std::vector<half>> w;
        std::size_t master_bytes = 0;
        std::uint64_t hash = 0;
    };
    // steps: 4; with `resume_at`, a fresh model and data_parallel load the checkpoint written after that many steps.
    const auto run = [&](int p, unsigned zero, int resume_at) {
        return run_local(p, [&](local& comm) {
            std::vector<std::vector<half>> w, g;
            const auto make = [&] {
                w.clear();
                g.clear();
                for (std::size_t k = 0; k < shape.size(); ++k) {
                    w.emplace_back(shape[k]);
                    g.emplace_back(shape[k]);
                    for (std::size_t i = 0; i < shape[k]; ++i)
                        w[k][i] = half(static_cast<float>((i * 7 + k * 3) % 23) * 0.05f - 0.5f);
                }
                std::vector<hitch::amp::low_precision_layer<half>> layers;
                for (std::size_t k = 0; k < shape.size(); ++k)
                    layers.push_back({"l" + std::to_string(k), hitch::view(w[k]), hitch::view(g[k])});
                return layers;
            };
            hitch::cpu dev;
            dp_t::options o;
            o.zero_stage = zero;
            o.loss_scaling = true;
            o.learning_rate = hitch::lr::constant({0.01});
            o.bucket_bytes = 8192;
            o.replica_check_interval = 1;  // every rank's model must agree after every step
            auto dp = std::make_unique<dp_t>(comm, dev, make(), o);
            for (int s = 0; s < 4; ++s) {
                if (s == resume_at) {
                    dp = std::make_unique<dp_t>(comm, dev, make(), o);
                    (void)dp->load((dir / "mp").string());
                }
                net source;
                source.fill(comm.rank(), s);
                for (std::size_t k = 0; k < shape.size(); ++k)
                    for (std::size_t i = 0; i < shape[k]; ++i) g[k][i] = half(source.g[k][i] * dp->loss_scale());
                expect(!dp->step().skipped, "step applied");
                if (resume_at < 0 && s == 1) dp->save((dir / "mp").string());
            }
            return run_result{w, dp->master_weight_bytes(), dp->parameter_hash()};
        });
    };
    for (int p : {2, 3}) {
        const auto plain = run(p, 0, -1);
        for (unsigned zero : {1u, 2u}) {
            CAPTURE(p, zero);
            const auto sharded = run(p, zero, -1);
            std::size_t masters = 0;
            for (const auto& r : sharded) {
                CHECK(r.w == sharded[0].w);
                CHECK(r.hash == sharded[0].hash);
                masters += r.master_bytes;
                CHECK(static_cast<double>(r.master_bytes) <=
                      static_cast<double>(plain[0].master_bytes) / p + 4.0 * 8 * 3);
            }
            CHECK(masters == plain[0].master_bytes);
            if (zero == 1) {
                CHECK(sharded[0].w == plain[0].w);  // the same FP32 steps, the same rounding
            } else {
                double worst = 0;
                for (std::size_t k = 0; k < shape.size(); ++k)
                    for (std::size_t i = 0; i < shape[k]; ++i)
                        worst = std::max(worst, std::fabs(static_cast<double>(float(sharded[0].w[k][i])) -
                                                          static_cast<double>(float(plain[0].w[k][i]))));
                CHECK(worst <= 1e-3);  // an FP16 ulp near 1
            }
            const auto resumed = run(p, zero, 2);
            for (std::size_t r = 0; r < resumed.size(); ++r) CHECK(resumed[r].w == sharded[r].w);
        }
    }
    std::filesystem::remove_all(dir);
}
