// Elastic restarts over comm::local: a checkpoint of p ranks loaded on q ranks (load_options::elastic). The
// parameters and optimizer state load bit for bit, error-feedback residuals become the mean of the saved ones, a
// following step equals the serial reference, and bad sets of files are refused on every rank with nothing changed.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "hitch/comm/local.hpp"
#include "hitch/compress/dgc.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/sync/local_sgd.hpp"
#include "hitch/train/data_parallel.hpp"
#include "toy_model.hpp"

using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::grad_value;
using hitch_test::toy_model;
namespace fs = std::filesystem;

namespace {

const std::vector<std::size_t> sizes{40, 8, 300};
constexpr float lr = 0.25f, mu = 0.9f;
constexpr int saved_steps = 3;

fs::path fresh_dir(const std::string& name) {
    const auto dir = fs::temp_directory_path() / ("hitch-test-elastic-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

template <class Dp>
typename Dp::options make_options() {
    typename Dp::options o;
    o.learning_rate = hitch::lr::constant({lr});
    o.optimizer.momentum = mu;
    return o;
}

template <class Dp>
void train(toy_model& m, Dp& dp, int rank, int from, int to) {
    for (int s = from; s < to; ++s) {
        m.fill_grads(rank, static_cast<std::uint64_t>(s));
        dp.step();
    }
}

std::vector<std::byte> section(const fs::path& file, const char* name) {
    const hitch::train::checkpoint_reader r(file);
    const auto s = r.section(name);
    return {s.begin(), s.end()};
}

std::vector<float> flat(const toy_model& m) {
    std::vector<float> out;
    for (const auto& w : m.w) out.insert(out.end(), w.begin(), w.end());
    return out;
}

/// The serial reference: heavy-ball momentum (optim/momentum.hpp's order of operations) on the gradient averaged
/// over p ranks for steps [0, saved_steps), then over q ranks for one more step.
std::vector<float> reference_momentum(int p, int q) {
    toy_model m(sizes);
    std::vector<std::vector<float>> b(sizes.size());
    for (int s = 0; s <= saved_steps; ++s) {
        const int ranks = s < saved_steps ? p : q;
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            b[k].resize(sizes[k]);
            for (std::size_t i = 0; i < sizes[k]; ++i) {
                float sum = 0;
                for (int r = 0; r < ranks; ++r) sum += grad_value(r, static_cast<std::uint64_t>(s), k, i);
                const float d = sum / static_cast<float>(ranks);
                b[k][i] = s == 0 ? d : mu * b[k][i] + 1.0f * d;
                m.w[k][i] -= lr * b[k][i];
            }
        }
    }
    return flat(m);
}

using dp_momentum = hitch::data_parallel<hitch::optim::momentum>;
using ef_topk = hitch::compress::error_feedback<hitch::compress::topk>;
using dp_ef = hitch::data_parallel<hitch::optim::momentum, ef_topk>;

/// Saves after saved_steps on p ranks under `dir`/"p".
template <class Dp>
void save_on(int p, const fs::path& dir) {
    run_local(p, [&](local& comm) {
        toy_model m(sizes);
        hitch::cpu dev;
        Dp dp(comm, dev, m.layers(), make_options<Dp>());
        train(m, dp, comm.rank(), 0, saved_steps);
        dp.save(dir / "p");
    });
}

struct after_load {
    std::vector<float> loaded, stepped;
    int saved_ranks = 0;
    std::uint64_t step = 0;
};

/// Loads `dir`/"p" on q ranks elastically, saves that as `dir`/"q", takes one more step.
template <class Dp>
std::vector<after_load> load_on(int q, const fs::path& dir) {
    return run_local(q, [&](local& comm) {
        toy_model m(sizes);
        hitch::cpu dev;
        Dp dp(comm, dev, m.layers(), make_options<Dp>());
        after_load out;
        out.saved_ranks = hitch::train::saved_ranks(dir / "p");
        dp.load(dir / "p", {.elastic = true});
        out.step = dp.step_index();
        out.loaded = flat(m);
        dp.save(dir / "q");
        train(m, dp, comm.rank(), saved_steps, saved_steps + 1);
        out.stepped = flat(m);
        return out;
    });
}

/// Bucket 0's error-feedback residual in rank r of p's file `prefix`.
std::vector<float> residual_in(const fs::path& prefix, int r, int p) {
    const hitch::train::checkpoint_reader reader(hitch::train::checkpoint_file(prefix, r, p));
    std::size_t n = 0;
    for (const std::size_t s : sizes) n += s;
    const ef_topk codec;
    std::vector<float> out;
    hitch::train::detail::read_codec_blobs(reader, 1, [&](std::size_t, std::span<const std::byte> blob) {
        auto state = hitch::compress::make_aggregation_state(codec, n);
        hitch::compress::load_state(codec, blob, state);
        out = state.codec.residual;
    });
    return out;
}

/// The mean over `from` of each one's values, summed in double in order: the serial reference.
std::vector<float> serial_mean(const std::vector<std::vector<float>>& from) {
    std::vector<float> out(from.front().size());
    for (std::size_t i = 0; i < out.size(); ++i) {
        double sum = 0;
        for (const auto& v : from) sum += v[i];
        out[i] = static_cast<float>(sum / static_cast<double>(from.size()));
    }
    return out;
}

struct shape {
    int p, q;
};
const std::vector<shape> shapes{{2, 1}, {2, 4}, {4, 3}};

}  // namespace

TEST_CASE("elastic load: parameters and optimizer state bit for bit, then a step equals the serial reference",
          "[train][data_parallel][checkpoint][elastic]") {
    for (const shape s : shapes) {
        CAPTURE(s.p, s.q);
        const auto dir = fresh_dir("momentum");
        save_on<dp_momentum>(s.p, dir);
        const auto saved = hitch::train::checkpoint_file(dir / "p", 0, s.p);
        const auto out = load_on<dp_momentum>(s.q, dir);
        const auto params = section(saved, "hitch.params");
        std::vector<float> saved_params(params.size() / sizeof(float));
        std::memcpy(saved_params.data(), params.data(), params.size());
        const std::vector<float> reference = reference_momentum(s.p, s.q);
        for (int j = 0; j < s.q; ++j) {
            CAPTURE(j);
            const auto& o = out[static_cast<std::size_t>(j)];
            CHECK(o.saved_ranks == s.p);
            CHECK(o.step == static_cast<std::uint64_t>(saved_steps));
            CHECK(o.loaded == saved_params);
            const auto mine = hitch::train::checkpoint_file(dir / "q", j, s.q);
            CHECK(section(mine, "hitch.params") == params);
            CHECK(section(mine, "hitch.optimizer") == section(saved, "hitch.optimizer"));
            CHECK(o.stepped == reference);
        }
        fs::remove_all(dir);
    }
}

TEST_CASE("elastic load: every new rank's error-feedback residual is the mean of the saved ones",
          "[train][data_parallel][checkpoint][elastic]") {
    for (const shape s : shapes) {
        CAPTURE(s.p, s.q);
        const auto dir = fresh_dir("ef");
        save_on<dp_ef>(s.p, dir);
        // The serial mean of the p saved residuals.
        std::vector<std::vector<float>> old;
        for (int i = 0; i < s.p; ++i) old.push_back(residual_in(dir / "p", i, s.p));
        const std::vector<float> mean = serial_mean(old);
        bool differ = false;
        for (std::size_t e = 0; e < mean.size(); ++e) differ |= old.front()[e] != old.back()[e];
        CHECK(differ);  // the ranks' residuals differ: the test redistributes something
        const auto out = load_on<dp_ef>(s.q, dir);
        for (int j = 0; j < s.q; ++j) CHECK(residual_in(dir / "q", j, s.q) == mean);
        // The step after the elastic load equals the step of a run that loads the q-rank save as usual.
        const auto again = run_local(s.q, [&](local& comm) {
            toy_model m(sizes);
            hitch::cpu dev;
            dp_ef dp(comm, dev, m.layers(), make_options<dp_ef>());
            dp.load(dir / "q");
            train(m, dp, comm.rank(), saved_steps, saved_steps + 1);
            return flat(m);
        });
        for (int j = 0; j < s.q; ++j)
            CHECK(again[static_cast<std::size_t>(j)] == out[static_cast<std::size_t>(j)].stepped);
        fs::remove_all(dir);
    }
}

namespace {

struct outcome {
    std::string message;   // what load threw ("" where it loaded)
    bool changed = false;  // whether the parameters changed
};

/// What load did on each rank of q, with options `configure` sets.
template <class Dp = dp_momentum, class Configure = void (*)(typename Dp::options&)>
std::vector<outcome> try_load(
    int q, const fs::path& prefix, hitch::train::load_options lo, Configure configure = [](typename Dp::options&) {}) {
    return run_local(q, [&](local& comm) {
        toy_model m(sizes);
        hitch::cpu dev;
        auto opts = make_options<Dp>();
        configure(opts);
        Dp dp(comm, dev, m.layers(), opts);
        const auto before = flat(m);
        outcome o;
        try {
            dp.load(prefix, lo);
        } catch (const hitch::error& e) {
            o.message = e.what();
        }
        o.changed = flat(m) != before;
        return o;
    });
}

}  // namespace

TEST_CASE("elastic load: bad sets of files are refused on every rank and nothing changes",
          "[train][data_parallel][checkpoint][elastic][faults]") {
    const auto dir = fresh_dir("bad");
    save_on<dp_momentum>(2, dir);
    SECTION("without the opt-in, another rank count is refused, naming the opt-in") {
        for (const auto& o : try_load(3, dir / "p", {})) {
            CHECK_THAT(o.message, Catch::Contains("written by 2 ranks, this run has 3") &&
                                      Catch::Contains("load_options{.elastic = true}"));
            CHECK_FALSE(o.changed);
        }
    }
    SECTION("a saved rank's file is missing") {
        fs::remove(hitch::train::checkpoint_file(dir / "p", 1, 2));
        CHECK_THROWS_WITH(hitch::train::saved_ranks(dir / "none"), Catch::Contains("no checkpoint files"));
        for (const auto& o : try_load(3, dir / "p", {.elastic = true})) {
            CHECK_THAT(o.message, Catch::Contains("cannot open") && Catch::Contains("p.rank1-of-2"));
            CHECK_FALSE(o.changed);
        }
    }
    SECTION("the saved ranks' files are from different saves") {
        fs::copy_file(hitch::train::checkpoint_file(dir / "p", 1, 2), dir / "rank1-old");
        save_on<dp_momentum>(2, dir);  // another save at the same step: only the generation differs
        fs::copy_file(dir / "rank1-old", hitch::train::checkpoint_file(dir / "p", 1, 2),
                      fs::copy_options::overwrite_existing);
        for (const auto& o : try_load(3, dir / "p", {.elastic = true})) {
            CHECK_THAT(o.message, Catch::Contains("from different saves") && Catch::Contains("nothing was loaded"));
            CHECK_FALSE(o.changed);
        }
    }
    SECTION("files of several rank counts need saved_ranks") {
        save_on<dp_momentum>(4, dir);
        for (const auto& o : try_load(3, dir / "p", {.elastic = true}))
            CHECK_THAT(o.message, Catch::Contains("several rank counts (2, 4)") && Catch::Contains("saved_ranks"));
        for (const auto& o : try_load(3, dir / "p", {.elastic = true, .saved_ranks = 4})) {
            CHECK(o.message.empty());
            CHECK(o.changed);
        }
    }
    SECTION("replicas that drift (local_sgd between averages) are refused, naming what differs") {
        using dp_local = hitch::data_parallel<hitch::optim::momentum, hitch::compress::none, hitch::sync::local_sgd>;
        run_local(2, [&](local& comm) {
            toy_model m(sizes);
            hitch::cpu dev;
            auto opts = make_options<dp_local>();
            opts.sync.period = 4;
            dp_local dp(comm, dev, m.layers(), opts);
            train(m, dp, comm.rank(), 0, 1);  // one local step: the ranks' parameters differ
            dp.save(dir / "drift");
        });
        for (const auto& o :
             try_load<dp_local>(1, dir / "drift", {.elastic = true}, [](dp_local::options& x) { x.sync.period = 4; })) {
            CHECK_THAT(o.message, Catch::Contains("section 'hitch.params' of saved rank 1 differs from rank 0's"));
            CHECK_FALSE(o.changed);
        }
    }
    SECTION("sharded optimizer state is refused") {
        for (const auto& o :
             try_load(1, dir / "p", {.elastic = true}, [](dp_momentum::options& x) { x.zero_stage = 1; })) {
            CHECK_THAT(o.message, Catch::Contains("zero_stage 1"));
            CHECK_FALSE(o.changed);
        }
    }
    fs::remove_all(dir);
}

namespace {

/// Rank r's distinct values for a residual of n elements.
std::vector<float> values(int r, std::size_t n, int salt) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<float>((r * 13 + salt * 5 + static_cast<int>(i)) % 11) * 0.3f - 1.0f;
    return v;
}

}  // namespace

TEST_CASE("elastic load: each codec's residuals become their mean, the rest rank 0's",
          "[train][checkpoint][elastic][compress]") {
    namespace compress = hitch::compress;
    constexpr std::size_t n = 37;
    const std::vector<int> counts{1, 2, 3, 4};
    SECTION("dgc: momentum and velocity") {
        for (const int p : counts) {
            CAPTURE(p);
            const compress::dgc codec;
            std::vector<compress::aggregation_state<compress::dgc>> saved;
            std::vector<std::vector<float>> u, v;
            for (int r = 0; r < p; ++r) {
                saved.push_back(compress::make_aggregation_state(codec, n));
                saved.back().codec.u = values(r, n, 1);
                saved.back().codec.v = values(r, n, 2);
                saved.back().codec.step = 7;
                u.push_back(saved.back().codec.u);
                v.push_back(saved.back().codec.v);
            }
            const auto out = hitch::train::detail::redistribute<compress::dgc>(saved);
            CHECK(out.codec.u == serial_mean(u));
            CHECK(out.codec.v == serial_mean(v));
            CHECK(out.codec.step == 7);
        }
    }
    SECTION("powersgd: the residual; Q is rank 0's") {
        for (const int p : counts) {
            CAPTURE(p);
            const compress::powersgd codec;
            std::vector<compress::aggregation_state<compress::powersgd>> saved;
            std::vector<std::vector<float>> e;
            for (int r = 0; r < p; ++r) {
                saved.push_back(compress::make_aggregation_state(codec, n));
                saved.back().codec.residual = values(r, n, 3);
                saved.back().codec.q = values(r, 5, 4);
                e.push_back(saved.back().codec.residual);
            }
            const auto out = hitch::train::detail::redistribute<compress::powersgd>(saved);
            CHECK(out.codec.residual == serial_mean(e));
            CHECK(out.codec.q == values(0, 5, 4));
        }
    }
    SECTION("onebit: the compressed ring's hop residual") {
        for (const int p : counts) {
            CAPTURE(p);
            const compress::onebit codec;
            std::vector<compress::aggregation_state<compress::onebit>> saved;
            std::vector<std::vector<float>> ring;
            for (int r = 0; r < p; ++r) {
                saved.push_back(compress::make_aggregation_state(codec, n));
                REQUIRE(saved.back().ring_residual.size() == n);
                saved.back().ring_residual = values(r, n, 5);
                ring.push_back(saved.back().ring_residual);
            }
            const auto out = hitch::train::detail::redistribute<compress::onebit>(saved);
            CHECK(out.ring_residual == serial_mean(ring));
        }
    }
}
