// Uneven inputs (options.uneven_inputs, join()): ranks with 1 and 7 fewer batches than the others join the rest of
// the epoch, and every rank ends with SGD on the mean over the ranks that had a batch at each step (or, with
// join_averages_over_all_ranks, over every rank), at the same step; optimizer states stay identical; the mistakes
// are config_error.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "../comm/suite.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/local_sgd.hpp"
#include "hitch/train/data_parallel.hpp"
#include "toy_model.hpp"

using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;
using hitch_test::grad_value;
using hitch_test::toy_model;

namespace {

/// SGD where at step s the gradient is the sum over the ranks r with batches[r] > s, divided by their number (or by
/// every rank, `over_all`).
toy_model reference(const std::vector<std::size_t>& sizes, const std::vector<int>& batches, float lr, bool over_all) {
    toy_model m(sizes);
    int steps = 0;
    for (int b : batches) steps = std::max(steps, b);
    for (int s = 0; s < steps; ++s) {
        int active = 0;
        for (int b : batches) active += b > s ? 1 : 0;
        const float divisor = static_cast<float>(over_all ? static_cast<int>(batches.size()) : active);
        for (std::size_t k = 0; k < sizes.size(); ++k)
            for (std::size_t i = 0; i < sizes[k]; ++i) {
                float sum = 0;
                for (std::size_t r = 0; r < batches.size(); ++r)
                    if (batches[r] > s) sum += grad_value(static_cast<int>(r), static_cast<std::uint64_t>(s), k, i);
                m.w[k][i] -= lr * (sum / divisor);
            }
    }
    return m;
}

struct finish {
    std::vector<std::vector<float>> w;
    std::uint64_t steps = 0;
    std::uint64_t hash = 0;
};

}  // namespace

TEST_CASE("join: ranks with 1 and 7 fewer batches join; SGD on the mean over the ranks that had one",
          "[train][data_parallel][join]") {
    const std::vector<std::size_t> sizes{300, 7, 4000};
    const std::vector<int> batches{10, 9, 3, 10};  // rank 1: 1 fewer, rank 2: 7 fewer
    for (const bool over_all : {false, true}) {
        for (const bool overlap : {true, false}) {
            CAPTURE(over_all, overlap);
            const toy_model want = reference(sizes, batches, 0.25f, over_all);
            const auto ends = run_local(4, [&](local& comm) {
                toy_model m(sizes);
                hitch::cpu dev;
                hitch::data_parallel<hitch::optim::sgd>::options o;
                o.learning_rate = hitch::lr::constant({0.25});
                o.bucket_bytes = 2048;
                o.overlap = overlap;
                o.uneven_inputs = true;
                o.join_averages_over_all_ranks = over_all;
                hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers(), o);
                for (int s = 0; s < batches[static_cast<std::size_t>(comm.rank())]; ++s) {
                    m.fill_grads(comm.rank(), static_cast<std::uint64_t>(s));
                    if (overlap)
                        for (std::size_t k = sizes.size(); k-- > 0;) dp.gradient_ready(k);
                    dp.step();
                }
                dp.join();
                return finish{m.w, dp.step_index(), dp.parameter_hash()};
            });
            for (int r = 0; r < 4; ++r) {
                const finish& f = ends[static_cast<std::size_t>(r)];
                CHECK(f.steps == 10);
                CHECK(f.hash == ends[0].hash);
                for (std::size_t k = 0; k < sizes.size(); ++k)
                    for (std::size_t i = 0; i < sizes[k]; ++i)
                        if (std::abs(f.w[k][i] - want.w[k][i]) > 1e-5f * (1.0f + std::abs(want.w[k][i])))
                            FAIL("rank " << r << " layer " << k << " element " << i << ": " << f.w[k][i]
                                         << " != " << want.w[k][i]);
            }
        }
    }
}

TEST_CASE("join: momentum states stay identical, and training goes on after every rank joined",
          "[train][data_parallel][join]") {
    const auto ends = run_local(3, [&](local& comm) {
        toy_model m({64, 9});
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::momentum>::options o;
        o.optimizer.momentum = 0.9f;
        o.uneven_inputs = true;
        hitch::data_parallel<hitch::optim::momentum> dp(comm, dev, m.layers(), o);
        for (int epoch = 0; epoch < 2; ++epoch) {
            const int mine = 4 - (comm.rank() + epoch) % 3;  // each epoch another rank runs out first
            for (int s = 0; s < mine; ++s) {
                m.fill_grads(comm.rank(), dp.step_index());
                dp.step();
            }
            dp.join();
        }
        // Two more steps together: equal momentum buffers give equal parameters afterwards.
        for (int s = 0; s < 2; ++s) {
            m.fill_grads(comm.rank(), dp.step_index());
            dp.step();
        }
        return finish{m.w, dp.step_index(), dp.parameter_hash()};
    });
    for (const finish& f : ends) {
        CHECK(f.steps == 4 + 4 + 2);
        CHECK(f.hash == ends[0].hash);
    }
}

TEST_CASE("join: without uneven_inputs, or with a policy that cannot join, it is config_error",
          "[train][data_parallel][join]") {
    REQUIRE_NOTHROW(run_local(2, [](local& comm) {
        toy_model m({8});
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers());
        bool refused = false;
        try {
            dp.join();
        } catch (const hitch::config_error& e) {
            refused = std::string(e.what()).find("options.uneven_inputs = true") != std::string::npos;
        }
        expect(refused, "join() without uneven_inputs names the option");
    }));
    REQUIRE_NOTHROW(run_local(2, [](local& comm) {
        toy_model m({8});
        hitch::cpu dev;
        using dp_t = hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::local_sgd>;
        dp_t::options o;
        o.uneven_inputs = true;
        bool refused = false;
        try {
            dp_t dp(comm, dev, m.layers(), o);
        } catch (const hitch::config_error& e) {
            refused = std::string(e.what()).find("uneven_inputs") != std::string::npos &&
                      std::string(e.what()).find("local_sgd") != std::string::npos;
        }
        expect(refused, "local SGD with uneven_inputs is config_error naming both");
    }));
}
