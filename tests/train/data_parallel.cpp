// data_parallel over comm::local, against serial references: SGD on the averaged gradient, local SGD's periodic
// averages, the loss scaler's and non-finite policies' agreement, layer checks, replica checks, checkpoints and
// mixed precision.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "../comm/suite.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/sync/local_sgd.hpp"
#include "hitch/train/data_parallel.hpp"
#include "toy_model.hpp"

using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;
using hitch_test::grad_value;
using hitch_test::toy_model;

namespace {

/// The serial reference: SGD on the gradient averaged over p ranks.
toy_model reference_sgd(const std::vector<std::size_t>& sizes, int p, int steps, float lr) {
    toy_model m(sizes);
    for (int s = 0; s < steps; ++s)
        for (std::size_t k = 0; k < sizes.size(); ++k)
            for (std::size_t i = 0; i < sizes[k]; ++i) {
                float sum = 0;
                for (int r = 0; r < p; ++r) sum += grad_value(r, static_cast<std::uint64_t>(s), k, i);
                m.w[k][i] -= lr * (sum / static_cast<float>(p));
            }
    return m;
}

std::filesystem::path scratch_dir() {
    const auto dir = std::filesystem::temp_directory_path() / ("hitch-test-dp-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return dir;
}

enum class report_order { none, backward, shuffled };

}  // namespace

TEST_CASE("hard sync equals SGD on the averaged gradient, whatever the bucket plan and report order",
          "[train][data_parallel]") {
    const std::vector<std::size_t> sizes{3, 0, 1000, 1, 70000, 17};
    for (int p : {1, 2, 3, 4}) {
        for (bool overlap : {true, false}) {
            for (report_order order : {report_order::none, report_order::backward, report_order::shuffled}) {
                CAPTURE(p, overlap, static_cast<int>(order));
                const int steps = 3;
                const toy_model ref = reference_sgd(sizes, p, steps, 0.5f);
                REQUIRE_NOTHROW(run_local(p, [&](local& comm) {
                    toy_model m(sizes);
                    hitch::cpu dev;
                    hitch::data_parallel<hitch::optim::sgd>::options o;
                    o.learning_rate = hitch::lr::constant({0.5});
                    o.bucket_bytes = 4096;  // many buckets; the 70000-element layer gets its own
                    o.overlap = overlap;
                    hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers(), o);
                    expect(dp.bucket_count() == 3, "buckets {17}, {70000}, {1, 1000, 0, 3}");
                    std::mt19937 rng(static_cast<unsigned>(comm.rank()) + 1);
                    for (int s = 0; s < steps; ++s) {
                        m.fill_grads(comm.rank(), static_cast<std::uint64_t>(s));
                        std::vector<std::size_t> idx(sizes.size());
                        std::iota(idx.begin(), idx.end(), 0);
                        std::reverse(idx.begin(), idx.end());
                        if (order == report_order::shuffled) std::shuffle(idx.begin(), idx.end(), rng);
                        if (order != report_order::none)
                            for (std::size_t k : idx) dp.gradient_ready(k);
                        const auto metrics = dp.step();
                        expect(!metrics.skipped, "step applied");
                        expect(metrics.step == static_cast<std::uint64_t>(s), "metrics step");
                        // Every bucket's bytes count in the step they belong to, also those launched by
                        // gradient_ready before step(): at least 2(p-1)/p of the 70,000 + 17 + 1,004 floats.
                        const double least = 2.0 * (p - 1) / p * 4.0 * (70000 + 17 + 1004);
                        expect(static_cast<double>(metrics.bytes_sent) >= least * (1 - 1e-9),
                               "bytes of every bucket counted: " + std::to_string(metrics.bytes_sent) + " < " +
                                   std::to_string(least));
                    }
                    for (std::size_t k = 0; k < sizes.size(); ++k)
                        for (std::size_t i = 0; i < sizes[k]; ++i) {
                            const float want = ref.w[k][i];
                            const float got = m.w[k][i];
                            // p = 3 divides inexactly, and the all-reduce may compute the mean as sum * (1/3).
                            const bool ok =
                                p == 3 ? std::abs(got - want) <= 1e-6f * (1.0f + std::abs(want)) : got == want;
                            if (!ok)
                                expect(false, "layer " + std::to_string(k) + " element " + std::to_string(i) + ": " +
                                                  std::to_string(got) + " != " + std::to_string(want));
                        }
                }));
            }
        }
    }
}

TEST_CASE("replicas under hard sync stay bitwise identical, checked by the replica check", "[train][data_parallel]") {
    const auto hashes = run_local(3, [](local& comm) {
        toy_model m({5000, 7, 300});
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::momentum>::options o;
        o.optimizer.momentum = 0.9f;
        o.replica_check_interval = 1;
        hitch::data_parallel<hitch::optim::momentum> dp(comm, dev, m.layers(), o);
        for (int s = 0; s < 5; ++s) {
            // Gradients with inexact means (thirds), so only a bit-identical all-reduce keeps replicas equal.
            for (auto& g : m.g)
                for (std::size_t i = 0; i < g.size(); ++i)
                    g[i] = std::sin(static_cast<float>(i * (comm.rank() + 1) + s));
            dp.step();
        }
        return dp.parameter_hash();
    });
    CHECK(hashes[0] == hashes[1]);
    CHECK(hashes[1] == hashes[2]);
}

TEST_CASE("data_parallel reports the rank's place on its node (local_rank, local_size, node_count)",
          "[train][data_parallel]") {
    const auto places = run_local(3, [](local& comm) {
        toy_model m({10, 3});
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers());
        return std::vector<int>{dp.local_rank(), dp.local_size(), dp.node_count(), dp.rank()};
    });
    for (const auto& p : places) {
        CHECK(p[0] == p[3]);  // comm::local is one node: the local rank is the rank
        CHECK(p[1] == 3);
        CHECK(p[2] == 1);
    }
}

TEST_CASE("a rank that takes one step fewer: the timeout names the step, the bucket and its layers",
          "[train][data_parallel]") {
    hitch::comm::local_options lo;
    lo.timeout_s = 1.0;
    const auto messages = run_local(
        2,
        [](local& comm) {
            toy_model m({10, 10, 10});
            hitch::cpu dev;
            hitch::data_parallel<hitch::optim::sgd>::options o;
            o.bucket_bytes = 80;  // layers 0 and 1 in one bucket, layer 2 in another
            hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers(), o);
            const int steps = comm.rank() == 0 ? 3 : 2;  // rank 1 stops one step early
            try {
                for (int s = 0; s < steps; ++s) dp.step();
            } catch (const hitch::timeout_error& e) {
                return std::string(e.what());
            }
            return std::string("no error");
        },
        lo);
    INFO(messages[0]);
    CHECK(messages[1] == "no error");
    CHECK_THAT(messages[0], Catch::Matchers::Contains("timed out after") &&
                                Catch::Matchers::Contains("hitch::data_parallel step 2, bucket ") &&
                                Catch::Matchers::Contains(" of 2 (layer") && Catch::Matchers::Contains("'layer") &&
                                Catch::Matchers::Contains("inside "));
}

TEST_CASE("check_gradient_contract names a gradient written after gradient_ready", "[train][data_parallel]") {
    hitch::comm::local_options lo;
    lo.timeout_s = 1.0;  // the rank that threw leaves its peer waiting
    const auto run = [&lo](bool check, bool write_late) {
        return run_local(
            2,
            [=](local& comm) {
                toy_model m({10, 10});
                hitch::cpu dev;
                hitch::data_parallel<hitch::optim::sgd>::options o;
                o.overlap = false;  // the bucket is packed in step(), after the late write
                o.check_gradient_contract = check;
                hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers(), o);
                try {
                    for (int s = 0; s < 2; ++s) {
                        dp.gradient_ready(0);
                        if (write_late && s == 1 && comm.rank() == 1) m.g[0][3] = 42.0f;  // after gradient_ready(0)
                        dp.gradient_ready(1);
                        dp.step();
                    }
                } catch (const hitch::config_error& e) {
                    return std::string(e.what());
                } catch (const hitch::timeout_error&) {
                    return std::string("timeout");
                }
                return std::string("no error");
            },
            lo);
    };
    const auto caught = run(true, true);
    CHECK_THAT(caught[1], Catch::Matchers::Contains("layer 0 ('layer0') changed after gradient_ready(0) in step 1 "
                                                    "on rank 1"));
    CHECK(caught[0] != "no error");                                 // its peer does not train on: it times out
    for (const auto& m : run(true, false)) CHECK(m == "no error");  // the check passes a well-behaved loop
    for (const auto& m : run(false, true)) CHECK(m == "no error");  // off by default: nothing is checked
}

TEST_CASE("a replica that drifts is mismatch_error on every rank", "[train][data_parallel]") {
    const auto messages = run_local(2, [](local& comm) {
        toy_model m({100, 10});
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::sgd>::options o;
        o.replica_check_interval = 1;
        hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers(), o);
        m.fill_grads(comm.rank(), 0);
        dp.step();
        if (comm.rank() == 1) m.w[1][3] += 1e-3f;  // a silent corruption on one rank
        m.fill_grads(comm.rank(), 1);
        try {
            dp.step();
        } catch (const hitch::mismatch_error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    });
    for (const auto& m : messages) {
        CHECK_THAT(m, Catch::Contains("replica check after step 1"));
        CHECK_THAT(m, Catch::Contains("rank 0 has 0x"));
        CHECK_THAT(m, Catch::Contains("rank 1 has 0x"));
    }
}

TEST_CASE("a layer descriptor whose name has no NUL is described from its own field only", "[train][data_parallel]") {
    // What a damaged message from another rank can hold: every byte of the name set (the descriptor is followed
    // here by more non-NUL bytes, which the description must not reach).
    struct {
        hitch::train::detail::layer_descriptor d;
        char after[16];
    } received{};
    received.d = hitch::train::detail::describe_layer("x", 20, hitch::dtype::f32);
    std::memset(received.d.name, 'a', sizeof(received.d.name));
    std::memset(received.after, 'b', sizeof(received.after));
    const std::string text = hitch::train::detail::describe_for_message(received.d, received.d);
    CHECK(text == "'" + std::string(sizeof(received.d.name), 'a') + "' (20 x float)");
}

TEST_CASE("ranks with different layers get mismatch_error naming the ranks and layers", "[train][data_parallel]") {
    const auto messages = run_local(3, [](local& comm) {
        std::vector<std::size_t> sizes{10, 20, 30};
        if (comm.rank() == 2) sizes[1] = 21;
        toy_model m(sizes);
        hitch::cpu dev;
        try {
            hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers());
        } catch (const hitch::mismatch_error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    });
    for (const auto& m : messages)
        CHECK(m ==
              "hitch::data_parallel: ranks have different layers: layer 1: rank 0 has 'layer1' (20 x float), "
              "rank 1 has 'layer1' (20 x float), rank 2 has 'layer1' (21 x float)");

    const auto counts = run_local(2, [](local& comm) {
        toy_model m(comm.rank() == 0 ? std::vector<std::size_t>{4, 4} : std::vector<std::size_t>{4, 4, 4});
        hitch::cpu dev;
        try {
            hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers());
        } catch (const hitch::mismatch_error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    });
    for (const auto& m : counts) CHECK(m == "hitch::data_parallel: number of layers: rank 0 has 2, rank 1 has 3");
}

TEST_CASE("a layer that never got gradient_ready is an error naming it, not a hang", "[train][data_parallel]") {
    hitch::comm::local_options lo;
    lo.timeout_s = 2.0;
    bool named = false;
    try {
        run_local(
            2,
            [](local& comm) {
                toy_model m({10, 10, 10});
                hitch::cpu dev;
                hitch::data_parallel<hitch::optim::sgd>::options o;
                o.bucket_bytes = 40;  // one layer per bucket
                hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers(), o);
                dp.gradient_ready(2);
                if (comm.rank() == 0) dp.gradient_ready(1);  // rank 1 forgets layer 1
                dp.gradient_ready(0);
                dp.step();
            },
            lo);
    } catch (const hitch::config_error& e) {
        named = std::string(e.what()).find("never for layer(s) 1 ('layer1')") != std::string::npos;
    } catch (const hitch::timeout_error&) {
        named = false;
    }
    CHECK(named);
    // Bad indices and double reports are config_error at once.
    REQUIRE_NOTHROW(run_local(1, [](local& comm) {
        toy_model m({3});
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers());
        bool bad_index = false, twice = false;
        try {
            dp.gradient_ready(1);
        } catch (const hitch::config_error&) {
            bad_index = true;
        }
        dp.gradient_ready(0);
        try {
            dp.gradient_ready(0);
        } catch (const hitch::config_error&) {
            twice = true;
        }
        expect(bad_index && twice, "gradient_ready checks");
    }));
}

TEST_CASE("loss scaling: one rank overflows, every rank skips, nothing changes, the scale backs off",
          "[train][data_parallel][amp]") {
    REQUIRE_NOTHROW(run_local(2, [](local& comm) {
        toy_model m({64, 5});
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::momentum>::options o;
        o.optimizer.momentum = 0.9f;
        o.loss_scaling = true;
        o.scaler.initial_scale = 1024.0f;
        o.scaler.growth_interval = 2;
        hitch::data_parallel<hitch::optim::momentum> dp(comm, dev, m.layers(), o);
        expect(dp.loss_scale() == 1024.0f, "initial scale");
        m.fill_grads(comm.rank(), 0);
        for (auto& g : m.g)
            for (auto& x : g) x *= 1024.0f;
        expect(!dp.step().skipped, "first step applied");
        const auto hash_before = dp.parameter_hash();
        std::ostringstream state_before;
        const auto path = scratch_dir() / ("scaler-" + std::to_string(comm.rank()));
        m.fill_grads(comm.rank(), 1);
        if (comm.rank() == 1) m.g[1][2] = std::numeric_limits<float>::infinity();
        const auto metrics = dp.step();
        expect(metrics.skipped, "the overflow step is skipped on every rank");
        expect(dp.parameter_hash() == hash_before, "parameters bitwise unchanged");
        expect(dp.loss_scale() == 512.0f, "scale backed off");
        expect(metrics.loss_scale == 512.0f, "metrics report the new scale");
        // Two good steps grow it back.
        for (int s = 2; s < 4; ++s) {
            m.fill_grads(comm.rank(), static_cast<std::uint64_t>(s));
            expect(!dp.step().skipped, "good step");
        }
        expect(dp.loss_scale() == 1024.0f, "scale grew after the interval");
    }));
}

TEST_CASE("non-finite gradients without a scaler: throw naming the layer, or skip everywhere",
          "[train][data_parallel][amp]") {
    const auto messages = run_local(2, [](local& comm) {
        toy_model m({8, 8});
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers());
        m.fill_grads(comm.rank(), 0);
        if (comm.rank() == 0) m.g[1][4] = std::numeric_limits<float>::quiet_NaN();
        try {
            dp.step();
        } catch (const hitch::amp::nonfinite_gradient_error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    });
    for (const auto& m : messages) {
        CHECK_THAT(m, Catch::Contains("step 0"));
        CHECK_THAT(m, Catch::Contains("rank 0 layer 1 ('layer1') element 4"));
    }
    REQUIRE_NOTHROW(run_local(2, [](local& comm) {
        toy_model m({8, 8});
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::sgd>::options o;
        o.nonfinite = hitch::amp::nonfinite_policy::skip_step;
        hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers(), o);
        const auto before = dp.parameter_hash();
        m.fill_grads(comm.rank(), 0);
        if (comm.rank() == 1) m.g[0][0] = -std::numeric_limits<float>::infinity();
        expect(dp.step().skipped, "skipped on every rank");
        expect(dp.parameter_hash() == before, "unchanged");
        m.fill_grads(comm.rank(), 1);
        expect(!dp.step().skipped, "the next finite step is applied");
    }));
}

TEST_CASE("local SGD averages parameters every k steps and reports staleness", "[train][data_parallel][sync]") {
    const std::vector<std::size_t> sizes{50, 3};
    const int p = 2, period = 3, steps = 7;
    const float lr = 0.25f;
    // Reference: each rank steps on its own gradients; every `period` steps all ranks take the mean.
    std::vector<toy_model> replicas(p, toy_model(sizes));
    for (int s = 0; s < steps; ++s) {
        for (int r = 0; r < p; ++r)
            for (std::size_t k = 0; k < sizes.size(); ++k)
                for (std::size_t i = 0; i < sizes[k]; ++i)
                    replicas[r].w[k][i] -= lr * grad_value(r, static_cast<std::uint64_t>(s), k, i);
        if ((s + 1) % period == 0)
            for (std::size_t k = 0; k < sizes.size(); ++k)
                for (std::size_t i = 0; i < sizes[k]; ++i) {
                    const float mean = (replicas[0].w[k][i] + replicas[1].w[k][i]) / 2.0f;
                    replicas[0].w[k][i] = replicas[1].w[k][i] = mean;
                }
    }
    using dp_t = hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::local_sgd>;
    const auto results = run_local(p, [&](local& comm) {
        toy_model m(sizes);
        hitch::cpu dev;
        dp_t::options o;
        o.learning_rate = hitch::lr::constant({lr});
        o.sync.period = period;
        dp_t dp(comm, dev, m.layers(), o);
        std::vector<std::uint64_t> staleness;
        for (int s = 0; s < steps; ++s) {
            m.fill_grads(comm.rank(), static_cast<std::uint64_t>(s));
            dp.step();
            staleness.push_back(dp.staleness());
        }
        expect(staleness == std::vector<std::uint64_t>{1, 2, 0, 1, 2, 0, 1}, "staleness counts local steps");
        return m.w;
    });
    for (int r = 0; r < p; ++r)
        for (std::size_t k = 0; k < sizes.size(); ++k)
            for (std::size_t i = 0; i < sizes[k]; ++i) REQUIRE(results[r][k][i] == replicas[r].w[k][i]);
}

TEST_CASE("lossless codecs through data_parallel equal the uncompressed exchange", "[train][data_parallel][compress]") {
    const std::vector<std::size_t> sizes{40, 7, 300};
    const toy_model ref = reference_sgd(sizes, 2, 2, 0.5f);
    // fp16 is exact for these gradients (multiples of 1/8, sums within range): the additive path.
    REQUIRE_NOTHROW(run_local(2, [&](local& comm) {
        using dp_t = hitch::data_parallel<hitch::optim::sgd, hitch::compress::fp16>;
        toy_model m(sizes);
        hitch::cpu dev;
        dp_t::options o;
        o.learning_rate = hitch::lr::constant({0.5});
        dp_t dp(comm, dev, m.layers(), o);
        for (int s = 0; s < 2; ++s) {
            m.fill_grads(comm.rank(), static_cast<std::uint64_t>(s));
            dp.step();
        }
        for (std::size_t k = 0; k < sizes.size(); ++k) expect(m.w[k] == ref.w[k], "fp16 path");
    }));
    // Top-k keeping every element is lossless: the all-gather path.
    REQUIRE_NOTHROW(run_local(2, [&](local& comm) {
        using dp_t = hitch::data_parallel<hitch::optim::sgd, hitch::compress::topk>;
        toy_model m(sizes);
        hitch::cpu dev;
        dp_t::options o;
        o.learning_rate = hitch::lr::constant({0.5});
        hitch::compress::topk_options t;
        t.density = 1.0;
        t.method = hitch::compress::topk_method::exact;
        o.compressor = hitch::compress::topk(t);
        dp_t dp(comm, dev, m.layers(), o);
        for (int s = 0; s < 2; ++s) {
            m.fill_grads(comm.rank(), static_cast<std::uint64_t>(s));
            const auto metrics = dp.step();
            expect(metrics.bytes_sent > 0, "bytes counted");
        }
        for (std::size_t k = 0; k < sizes.size(); ++k) expect(m.w[k] == ref.w[k], "top-k path");
    }));
}

TEST_CASE("checkpoint: 2N steps equal N steps, save, load into a new object, N steps",
          "[train][data_parallel][checkpoint]") {
    using dp_t = hitch::data_parallel<hitch::optim::momentum, hitch::compress::error_feedback<hitch::compress::topk>>;
    const auto dir = scratch_dir();
    const int n = 4;
    const auto run = [&](local& comm, int from, int to, bool save_at_end, bool load_first) {
        toy_model m({300, 20});
        hitch::cpu dev;
        dp_t::options o;
        o.optimizer.momentum = 0.9f;
        o.loss_scaling = true;
        o.scaler.initial_scale = 8.0f;
        o.bucket_bytes = 400;
        hitch::compress::topk_options t;
        t.density = 0.1;
        t.method = hitch::compress::topk_method::exact;
        o.compressor = dp_t::compressor_type(hitch::compress::topk(t));
        dp_t dp(comm, dev, m.layers(), o);
        if (load_first) {
            const auto reader = dp.load(dir / "ckpt");
            const auto data = reader.section("data.position");
            expect(data.size() == 1 && static_cast<int>(data[0]) == from, "user section restored");
            expect(dp.step_index() == static_cast<std::uint64_t>(from), "step restored");
        }
        for (int s = from; s < to; ++s) {
            m.fill_grads(comm.rank(), static_cast<std::uint64_t>(s));
            for (auto& g : m.g)
                for (auto& x : g) x *= dp.loss_scale();
            dp.step();
        }
        if (save_at_end) dp.save(dir / "ckpt", {{"data.position", {std::byte{static_cast<unsigned char>(to)}}}});
        return dp.parameter_hash();
    };
    const auto straight = run_local(2, [&](local& comm) { return run(comm, 0, 2 * n, false, false); });
    (void)run_local(2, [&](local& comm) { return run(comm, 0, n, true, false); });
    const auto resumed = run_local(2, [&](local& comm) { return run(comm, n, 2 * n, false, true); });
    CHECK(straight == resumed);
    std::filesystem::remove_all(dir);
}

TEST_CASE("checkpoint: a corrupt file or another configuration is refused and nothing changes",
          "[train][data_parallel][checkpoint]") {
    const auto dir = scratch_dir();
    REQUIRE_NOTHROW(run_local(1, [&](local& comm) {
        toy_model m({30, 4});
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::momentum> dp(comm, dev, m.layers());
        m.fill_grads(0, 0);
        dp.step();
        dp.save(dir / "good");
        const auto hash = dp.parameter_hash();
        // Flip a byte in the middle of the file.
        const auto path = dp.checkpoint_path(dir / "good");
        std::filesystem::copy_file(path, dp.checkpoint_path(dir / "bad"));
        {
            std::fstream f(dp.checkpoint_path(dir / "bad"), std::ios::in | std::ios::out | std::ios::binary);
            f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(path) / 2));
            f.put('\x5a');
        }
        m.fill_grads(0, 1);
        dp.step();
        const auto after = dp.parameter_hash();
        bool corrupt = false;
        try {
            dp.load(dir / "bad");
        } catch (const hitch::corrupt_message_error&) {
            corrupt = true;
        }
        expect(corrupt, "corrupt file refused");
        expect(dp.parameter_hash() == after, "nothing changed");
        dp.load(dir / "good");
        expect(dp.parameter_hash() == hash, "good file restores");
        bool missing = false;
        try {
            dp.load(dir / "no-such-file");
        } catch (const hitch::error&) {
            missing = true;
        }
        expect(missing, "missing file is an error");
    }));
    // Another model (a layer of another size) is mismatch_error naming both.
    REQUIRE_NOTHROW(run_local(1, [&](local& comm) {
        toy_model m({31, 4});
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::momentum> dp(comm, dev, m.layers());
        bool mismatch = false;
        try {
            dp.load(dir / "good");
        } catch (const hitch::mismatch_error& e) {
            mismatch = std::string(e.what()).find("layer layer0 30") != std::string::npos &&
                       std::string(e.what()).find("layer layer0 31") != std::string::npos;
        }
        expect(mismatch, "another configuration is mismatch_error naming both");
    }));
    std::filesystem::remove_all(dir);
}

TEST_CASE("mixed precision: FP16 parameters follow FP32 masters stepped on the averaged gradient",
          "[train][data_parallel][amp]") {
    const std::vector<std::size_t> sizes{100, 9};
    const auto masters = run_local(2, [&](local& comm) {
        std::vector<std::vector<hitch::half>> w, g;
        std::vector<hitch::amp::low_precision_layer<hitch::half>> layers;
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            w.emplace_back(sizes[k], hitch::half(0.5f));
            g.emplace_back(sizes[k]);
        }
        for (std::size_t k = 0; k < sizes.size(); ++k)
            layers.push_back({"l" + std::to_string(k), hitch::view(w[k]), hitch::view(g[k])});
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::sgd>::options o;
        o.learning_rate = hitch::lr::constant({1e-3});
        o.loss_scaling = true;
        o.scaler.initial_scale = 256.0f;
        hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, std::move(layers), o);
        for (int s = 0; s < 10; ++s) {
            for (std::size_t k = 0; k < sizes.size(); ++k)
                for (std::size_t i = 0; i < sizes[k]; ++i)
                    g[k][i] = hitch::half(grad_value(comm.rank(), static_cast<std::uint64_t>(s), k, i) * 256.0f);
            expect(!dp.step().skipped, "applied");
        }
        // The FP32 master: 0.5 - 1e-3 * sum of averaged gradients, accumulated in float.
        std::vector<std::vector<float>> ref(sizes.size());
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            ref[k].assign(sizes[k], 0.5f);
            for (int s = 0; s < 10; ++s)
                for (std::size_t i = 0; i < sizes[k]; ++i) {
                    const float avg = (grad_value(0, static_cast<std::uint64_t>(s), k, i) +
                                       grad_value(1, static_cast<std::uint64_t>(s), k, i)) /
                                      2.0f;
                    ref[k][i] -= 1e-3f * avg;
                }
            for (std::size_t i = 0; i < sizes[k]; ++i)
                expect(w[k][i].bits() == hitch::half(ref[k][i]).bits(), "FP16 copy is the rounded master");
        }
        return dp.parameter_hash();
    });
    CHECK(masters[0] == masters[1]);
}

TEST_CASE("metrics and the timeline record every step and bucket", "[train][data_parallel]") {
    REQUIRE_NOTHROW(run_local(2, [](local& comm) {
        toy_model m({1000, 1000, 10});
        hitch::cpu dev;
        hitch::train::timeline tl(comm.rank());
        std::ostringstream metrics;
        hitch::data_parallel<hitch::optim::sgd>::options o;
        o.bucket_bytes = 4000;
        o.timeline = &tl;
        o.metrics = &metrics;
        o.steps_per_epoch = 2;
        o.learning_rate = [](std::uint64_t step, std::uint64_t) { return 0.1 * static_cast<double>(step + 1); };
        hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers(), o);
        for (int s = 0; s < 3; ++s) {
            m.fill_grads(comm.rank(), static_cast<std::uint64_t>(s));
            for (std::size_t k = 3; k-- > 0;) dp.gradient_ready(k);
            const auto r = dp.step(1.5 - s);
            expect(std::abs(r.lr - 0.1 * (s + 1)) < 1e-12, "lr from the schedule");
            expect(r.epoch == static_cast<std::uint64_t>(s / 2), "epoch");
            expect(r.loss && *r.loss == 1.5 - s, "loss");
        }
        std::size_t lines = 0;
        std::istringstream in(metrics.str());
        for (std::string line; std::getline(in, line);) ++lines;
        expect(lines == 3, "one JSON line per step");
        std::size_t exchanges = 0, optimizer = 0;
        for (const auto& e : tl.events()) {
            exchanges += e.name.rfind("exchange bucket", 0) == 0;
            optimizer += e.name == "optimizer";
        }
        expect(exchanges == 3 * dp.bucket_count(), "every bucket exchange is on the timeline");
        expect(optimizer == 3, "every optimizer step is on the timeline");
    }));
}

TEST_CASE("data_parallel options are validated", "[train][data_parallel]") {
    REQUIRE_NOTHROW(run_local(1, [](local& comm) {
        toy_model m({3});
        hitch::cpu dev;
        const auto throws_config = [&](auto change) {
            hitch::data_parallel<hitch::optim::sgd>::options o;
            change(o);
            try {
                hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers(), o);
            } catch (const hitch::config_error&) {
                return true;
            }
            return false;
        };
        expect(throws_config([](auto& o) { o.steps_per_epoch = 0; }), "steps_per_epoch");
        expect(throws_config([](auto& o) { o.bucket_bytes = 0; }), "bucket_bytes");
        expect(throws_config([](auto& o) { o.learning_rate = nullptr; }), "learning_rate");
        expect(throws_config([](auto& o) {
                   o.loss_scaling = true;
                   o.scaler.backoff_factor = 2.0f;
               }),
               "scaler");
        bool empty_model = false;
        try {
            hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, std::vector<hitch::layer>{});
        } catch (const hitch::config_error&) {
            empty_model = true;
        }
        expect(empty_model, "a model without layers");
    }));
}
