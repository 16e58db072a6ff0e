// What users of DDP, Horovod and DeepSpeed look for in data_parallel, against serial references over comm::local:
// gradient accumulation, clipping by the global norm, buffers, and unused layers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../comm/suite.hpp"
#include "../error_text.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/sync/hogwild.hpp"
#include "hitch/sync/local_sgd.hpp"
#include "hitch/train/data_parallel.hpp"
#include "toy_model.hpp"

using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;

namespace {

float grad_of(int rank, std::uint64_t batch, std::size_t layer, std::size_t i) {
    return hitch_test::grad_value(rank, batch, layer, i);
}

struct model : hitch_test::toy_model {
    using toy_model::toy_model;
    void fill(int rank, std::uint64_t batch) { fill_grads(rank, batch); }
};

double max_abs_diff(const model& a, const model& b) {
    double d = 0;
    for (std::size_t k = 0; k < a.w.size(); ++k)
        for (std::size_t i = 0; i < a.w[k].size(); ++i)
            d = std::max(d, static_cast<double>(std::fabs(a.w[k][i] - b.w[k][i])));
    return d;
}

const std::vector<std::size_t> sizes{5, 3000, 1, 700};

}  // namespace

TEST_CASE("accumulating K micro-batches equals one step on them together, with one exchange per K",
          "[train][data_parallel][accumulation]") {
    for (int p : {1, 2, 3}) {
        for (std::uint64_t micro : {1, 2, 4}) {
            for (bool report : {false, true}) {
                CAPTURE(p, micro, report);
                const int steps = 3;
                const float lr = 0.25f;
                // Serial: SGD on the mean over ranks and micro-batches, in double.
                model ref(sizes);
                for (int s = 0; s < steps; ++s)
                    for (std::size_t k = 0; k < sizes.size(); ++k)
                        for (std::size_t i = 0; i < sizes[k]; ++i) {
                            double sum = 0;
                            for (int r = 0; r < p; ++r)
                                for (std::uint64_t j = 0; j < micro; ++j) sum += grad_of(r, s * micro + j, k, i);
                            ref.w[k][i] = static_cast<float>(ref.w[k][i] - lr * sum / static_cast<double>(p * micro));
                        }
                const auto results = run_local(p, [&](local& comm) {
                    model m(sizes);
                    hitch::cpu dev;
                    hitch::data_parallel<hitch::optim::sgd>::options o;
                    o.learning_rate = hitch::lr::constant({lr});
                    o.accumulation_steps = micro;
                    o.bucket_bytes = 4096;
                    hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers(), o);
                    std::uint64_t exchanges = 0;
                    for (std::uint64_t b = 0; b < steps * micro; ++b) {
                        m.fill(comm.rank(), b);
                        const bool boundary = (b + 1) % micro == 0;
                        expect(dp.accumulation_boundary() == boundary, "accumulation_boundary");
                        if (report)
                            for (std::size_t k = sizes.size(); k-- > 0;) dp.gradient_ready(k);
                        const auto rec = dp.step(static_cast<double>(b));
                        expect(rec.accumulated == !boundary, "accumulated flag");
                        expect(rec.step == b / micro, "optimizer steps counted, not micro-batches");
                        if (rec.bytes_sent > 0) ++exchanges;
                        if (boundary) {
                            expect(rec.micro_batches == micro, "micro_batches");
                            // The loss reported is the mean of the window's micro-batch losses.
                            const double first = static_cast<double>(b + 1 - micro);
                            expect(rec.loss && *rec.loss == first + static_cast<double>(micro - 1) / 2.0, "mean loss");
                        } else {
                            expect(rec.bytes_sent == 0, "nothing sent while accumulating");
                        }
                    }
                    expect(dp.step_index() == static_cast<std::uint64_t>(steps), "step_index");
                    return std::make_pair(m.w, exchanges);
                });
                for (int r = 0; r < p; ++r) {
                    model got(sizes);
                    got.w = results[static_cast<std::size_t>(r)].first;
                    CHECK(max_abs_diff(got, ref) <= 1e-6);
                    // Gradients are multiples of 1/8 and K a power of two: with p = 1 or 2 every sum, mean and
                    // update is exact, so accumulation must give the concatenated batch's step bit for bit.
                    if (p != 3) CHECK(got.w == ref.w);
                    CHECK(results[static_cast<std::size_t>(r)].second ==
                          (p == 1 ? 0u : static_cast<std::uint64_t>(steps)));
                }
            }
        }
    }
}

TEST_CASE("a non-finite micro-batch skips its whole window under loss scaling",
          "[train][data_parallel][accumulation]") {
    const auto results = run_local(2, [](local& comm) {
        model m({64, 9});
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::sgd>::options o;
        o.learning_rate = hitch::lr::constant({0.5});
        o.accumulation_steps = 3;
        o.loss_scaling = true;
        hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers(), o);
        std::vector<bool> skipped;
        std::vector<std::vector<float>> before;
        for (std::uint64_t b = 0; b < 6; ++b) {
            m.fill(comm.rank(), b);
            for (auto& x : m.g[0]) x *= dp.loss_scale();
            for (auto& x : m.g[1]) x *= dp.loss_scale();
            if (b == 0 && comm.rank() == 1) m.g[1][4] = std::numeric_limits<float>::infinity();
            if (b % 3 == 0) before = m.w;
            const auto rec = dp.step();
            if (!rec.accumulated) {
                skipped.push_back(rec.skipped);
                expect(rec.skipped == (m.w == before), "a skipped window leaves the parameters as they were");
            }
        }
        return skipped;
    });
    for (const auto& s : results) CHECK(s == std::vector<bool>{true, false});
}

TEST_CASE("accumulation refuses a checkpoint in the middle of a window", "[train][data_parallel][accumulation]") {
    run_local(1, [](local& comm) {
        model m({8});
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::sgd>::options o;
        o.accumulation_steps = 2;
        hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers(), o);
        m.fill(0, 0);
        (void)dp.step();
        CHECK_THROWS_WITH(dp.save("/nonexistent/x"), Catch::Contains("1 of 2 micro-batches"));
    });
    hitch::data_parallel<hitch::optim::sgd>::options bad;
    bad.accumulation_steps = 0;
    CHECK_THROWS_WITH(bad.validate(), Catch::Contains("accumulation_steps = 0"));
    bad.accumulation_steps = 1;
    bad.clip_grad_norm = -1;
    CHECK_THROWS_WITH(bad.validate(), Catch::Contains("clip_grad_norm = -1"));
}

TEST_CASE("clipping by the global norm equals the serial norm and scale", "[train][data_parallel][clipping]") {
    const int p = 3;
    const float lr = 0.5f;
    for (double max_norm : {0.5, 1e9, std::numeric_limits<double>::infinity()}) {
        CAPTURE(max_norm);
        // Serial: the averaged gradient's norm over every layer, in double; torch's coefficient.
        model ref(sizes);
        std::vector<double> norms;
        for (std::uint64_t s = 0; s < 3; ++s) {
            std::vector<std::vector<double>> avg(sizes.size());
            double sq = 0;
            for (std::size_t k = 0; k < sizes.size(); ++k)
                for (std::size_t i = 0; i < sizes[k]; ++i) {
                    double sum = 0;
                    for (int r = 0; r < p; ++r) sum += grad_of(r, s, k, i);
                    avg[k].push_back(sum / p);
                    sq += (sum / p) * (sum / p);
                }
            const double norm = std::sqrt(sq);
            norms.push_back(norm);
            const double c = norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
            for (std::size_t k = 0; k < sizes.size(); ++k)
                for (std::size_t i = 0; i < sizes[k]; ++i)
                    ref.w[k][i] = static_cast<float>(ref.w[k][i] - lr * avg[k][i] * c);
        }
        const auto results = run_local(p, [&](local& comm) {
            model m(sizes);
            hitch::cpu dev;
            hitch::data_parallel<hitch::optim::sgd>::options o;
            o.learning_rate = hitch::lr::constant({lr});
            o.clip_grad_norm = max_norm;
            o.bucket_bytes = 4096;
            hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers(), o);
            std::vector<double> got;
            for (std::uint64_t s = 0; s < 3; ++s) {
                m.fill(comm.rank(), s);
                const auto rec = dp.step();
                expect(rec.grad_norm.has_value(), "grad_norm reported");
                got.push_back(*rec.grad_norm);
                expect(rec.to_json().find("\"grad_norm\":null") == std::string::npos, "grad_norm in the JSON line");
            }
            return std::make_pair(m.w, got);
        });
        for (const auto& [w, got] : results) {
            model m(sizes);
            m.w = w;
            CHECK(max_abs_diff(m, ref) <= 2e-6);
            for (std::size_t s = 0; s < norms.size(); ++s) CHECK(got[s] == Approx(norms[s]).epsilon(1e-6));
            CHECK(got == results[0].second);  // the same bits on every rank
        }
    }
}

TEST_CASE("an overflowing step is skipped before clipping", "[train][data_parallel][clipping]") {
    const auto results = run_local(2, [](local& comm) {
        model m({16, 4});
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::sgd>::options o;
        o.loss_scaling = true;
        o.clip_grad_norm = 0.1;
        hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers(), o);
        m.fill(comm.rank(), 0);
        if (comm.rank() == 0) m.g[0][3] = std::numeric_limits<float>::infinity();
        const auto before = m.w;
        const auto rec = dp.step();
        return rec.skipped && !rec.grad_norm && m.w == before;
    });
    for (bool ok : results) CHECK(ok);
}

TEST_CASE("buffers agree after every step: rank 0's values or the mean, bitwise", "[train][data_parallel][buffers]") {
    const int p = 3;
    const auto results = run_local(p, [&](local& comm) {
        model m({10});
        std::vector<float> mean(5), var(3), count(1);
        const auto fill = [&](int step) {
            for (std::size_t i = 0; i < mean.size(); ++i)
                mean[i] = 0.1f * static_cast<float>(comm.rank() + step) + static_cast<float>(i);
            for (std::size_t i = 0; i < var.size(); ++i) var[i] = 1.0f / static_cast<float>(comm.rank() + 3 + step);
            count[0] = static_cast<float>(comm.rank() * 10 + step);
        };
        fill(0);
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers());
        dp.register_buffers({{"bn.mean", hitch::view(mean), hitch::train::buffer_sync::average},
                             {"bn.count", hitch::view(count)},
                             {"bn.var", hitch::view(var), hitch::train::buffer_sync::average}});
        std::vector<std::vector<float>> seen{mean, var, count};  // after registration: rank 0's starting values
        for (int s = 1; s <= 2; ++s) {
            fill(s);
            m.fill(comm.rank(), static_cast<std::uint64_t>(s));
            (void)dp.step();
            seen.push_back(mean);
            seen.push_back(var);
            seen.push_back(count);
        }
        return seen;
    });
    for (int r = 0; r < p; ++r) CHECK(results[static_cast<std::size_t>(r)] == results[0]);  // bitwise everywhere
    const auto& got = results[0];
    for (std::size_t i = 0; i < 5; ++i) CHECK(got[0][i] == static_cast<float>(i));
    CHECK(got[2][0] == 0.0f);
    for (int s = 1; s <= 2; ++s) {
        const auto& mean = got[static_cast<std::size_t>(3 * s)];
        const auto& var = got[static_cast<std::size_t>(3 * s + 1)];
        const auto& count = got[static_cast<std::size_t>(3 * s + 2)];
        for (std::size_t i = 0; i < mean.size(); ++i) {
            double want = 0;
            for (int r = 0; r < p; ++r) want += 0.1f * static_cast<float>(r + s) + static_cast<float>(i);
            CHECK(mean[i] == Approx(want / p).epsilon(1e-6));
        }
        double want_var = 0;
        for (int r = 0; r < p; ++r) want_var += 1.0f / static_cast<float>(r + 3 + s);
        CHECK(var[0] == Approx(want_var / p).epsilon(1e-6));
        CHECK(count[0] == static_cast<float>(s));  // rank 0's
    }
}

TEST_CASE("buffers that differ across ranks are mismatch_error; asynchronous policies refuse buffers",
          "[train][data_parallel][buffers]") {
    const auto messages = run_local(2, [](local& comm) {
        model m({4});
        std::vector<float> b(comm.rank() == 0 ? 6 : 7);
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers());
        try {
            dp.register_buffers({{"bn.mean", hitch::view(b)}});
        } catch (const hitch::mismatch_error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    });
    for (const auto& m : messages)
        CHECK(m ==
              "hitch::data_parallel: ranks have different buffers: buffer 0: rank 0 has 'bn.mean (broadcast)' (6 x "
              "float), rank 1 has 'bn.mean (broadcast)' (7 x float)");
    // Each rank's errors are checked on this thread: Catch's assertions are not for several threads at once.
    const auto refusals = run_local(2, [](local& comm) {
        model m({4});
        std::vector<float> b(3);
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::hogwild> dp(comm, dev, m.layers());
        std::string async = hitch_test::error_text([&] { dp.register_buffers({{"bn.mean", hitch::view(b)}}); });
        hitch::data_parallel<hitch::optim::sgd> sync_dp(comm, dev, m.layers());
        std::string twice =
            hitch_test::error_text([&] { sync_dp.register_buffers({{"a", hitch::view(b)}, {"a", hitch::view(b)}}); });
        return std::pair{async, twice};
    });
    for (const auto& [async, twice] : refusals) {
        CHECK_THAT(async, Catch::Contains("asynchronous") || Catch::Contains("on their own"));
        CHECK_THAT(twice, Catch::Contains("two buffers are named 'a'"));
    }
}

TEST_CASE("unused layers count as zero gradients; a layer no rank used is not stepped",
          "[train][data_parallel][unused]") {
    const int p = 2;
    const int steps = 4;
    const float lr = 0.25f, mu = 0.5f;
    const std::vector<std::size_t> shape{6, 50, 7};
    // Which (rank, step, layer) skip: rank 1 skips layer 1 on odd steps; both skip layer 2 on step 2.
    const auto used = [](int rank, int step, std::size_t layer) {
        if (layer == 1 && rank == 1 && step % 2 == 1) return false;
        if (layer == 2 && step == 2) return false;
        return true;
    };
    // Serial: momentum (torch's form, first step b = d) on the mean with zeros for skipped layers; a layer no rank
    // used keeps its parameters and its momentum, and its step count does not advance.
    model ref(shape);
    std::vector<std::vector<double>> buf(shape.size());
    std::vector<int> taken(shape.size(), 0);
    for (int s = 0; s < steps; ++s)
        for (std::size_t k = 0; k < shape.size(); ++k) {
            if (!used(0, s, k) && !used(1, s, k)) continue;
            buf[k].resize(shape[k]);
            for (std::size_t i = 0; i < shape[k]; ++i) {
                double sum = 0;
                for (int r = 0; r < p; ++r)
                    if (used(r, s, k)) sum += grad_of(r, static_cast<std::uint64_t>(s), k, i);
                const double d = sum / p;
                buf[k][i] = taken[k] == 0 ? d : mu * buf[k][i] + d;
                ref.w[k][i] = static_cast<float>(ref.w[k][i] - lr * buf[k][i]);
            }
            ++taken[k];
        }
    const auto results = run_local(p, [&](local& comm) {
        model m(shape);
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::momentum>::options o;
        o.learning_rate = hitch::lr::constant({lr});
        o.optimizer.momentum = mu;
        o.find_unused_layers = true;
        o.bucket_bytes = 64;  // a bucket per layer
        hitch::data_parallel<hitch::optim::momentum> dp(comm, dev, m.layers(), o);
        for (int s = 0; s < steps; ++s) {
            m.fill(comm.rank(), static_cast<std::uint64_t>(s));
            for (std::size_t k = shape.size(); k-- > 0;)
                if (used(comm.rank(), s, k)) dp.gradient_ready(k);
            (void)dp.step();
        }
        return m.w;
    });
    for (const auto& w : results) {
        model got(shape);
        got.w = w;
        CHECK(max_abs_diff(got, ref) <= 1e-6);
    }
}

TEST_CASE("every rank starts from rank 0's parameters; off, replicas that differ stay apart",
          "[train][data_parallel][broadcast]") {
    for (bool broadcast : {true, false}) {
        CAPTURE(broadcast);
        const auto results = run_local(3, [&](local& comm) {
            model m({5, 3000, 1});
            for (auto& layer : m.w)
                for (float& x : layer) x += 0.125f * static_cast<float>(comm.rank());  // another seed per rank
            const auto rank0 = [&] {
                model r0({5, 3000, 1});
                return r0.w;
            }();
            hitch::cpu dev;
            hitch::data_parallel<hitch::optim::sgd>::options o;
            o.broadcast_parameters = broadcast;
            o.bucket_bytes = 4096;
            hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, m.layers(), o);
            return std::make_pair(m.w == rank0, dp.parameter_hash());
        });
        for (std::size_t r = 0; r < results.size(); ++r) {
            CHECK(results[r].first == (broadcast || r == 0));
            CHECK((results[r].second == results[0].second) == (broadcast || r == 0));
        }
    }
}

TEST_CASE("ranks whose layers differ only in rows or flags are mismatch_error naming them",
          "[train][data_parallel][broadcast]") {
    const auto messages = run_local(2, [](local& comm) {
        model m({12, 4});
        auto layers = m.layers();
        layers[0].rows = comm.rank() == 0 ? 3 : 4;
        if (comm.rank() == 1) layers[1].flags = hitch::layer_flags::bias_or_norm();
        hitch::cpu dev;
        try {
            hitch::data_parallel<hitch::optim::sgd> dp(comm, dev, layers);
        } catch (const hitch::mismatch_error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    });
    for (const auto& m : messages)
        CHECK(m ==
              "hitch::data_parallel: ranks have different layers: layer 0: rank 0 has 'layer0' (12 x float, rows 3), "
              "rank 1 has 'layer0' (12 x float, rows 4); layer 1: rank 0 has 'layer1' (4 x float, "
              "exclude_from_adaptation false, exclude_from_weight_decay false), rank 1 has 'layer1' (4 x float, "
              "exclude_from_adaptation true, exclude_from_weight_decay true)");
}
