// hitch-bench-exchange: the compressed exchanges side by side on real gradients. Each rank's gradient is the
// examples' MLP or CNN gradient on its own batch of Fashion-MNIST (after --warmup-steps of serial SGD, so that the
// gradients are those of a model in training), and the exchanges sum the top-k of them:
//   - over comm::local (threads of this process, --ranks): dense ring all-reduce of the whole gradient, the ring
//     all-gather of the top-k messages (allgather_ring), sparse recursive doubling; and qsgd's compressed ring and
//     compressed halving-doubling; times (median of --runs, slowest rank) and bytes;
//   - over comm::simulated (--sim-ranks, nodes of --ranks-per-node GPUs with a fast link inside and a NIC
//     between them): the same sparse exchanges and sparse_hierarchical, virtual time and bytes.
// Beside each line the measured overlap of the ranks' selections: the union's density, and 1 - |union| / (p k)
// (0: disjoint, as independent selections nearly are; 1: every rank picked the same indices). The saving of the
// merging exchanges over the all-gather depends on it.
//
//   hitch-bench-exchange --model mlp --ranks 2,4 --sim-ranks 16,64,256,1024 --density 0.001,0.01,0.1
//
// One JSON object per line:
//   {"bench":"exchange","comm":"local","isa":"avx2","model":"mlp","elements":535818,"p":4,"density":0.01,
//    "exchange":"sparse_recursive_doubling","union_density":...,"overlap":...,"seconds":...,
//    "bytes_max":...,"bytes_mean":...,"bytes_vs_allgather":...,"ef_steps":0}
// bytes_max and bytes_mean are what the busiest rank and the mean rank sent (aggregation_stats::sent_bytes, or the
// all-reduce's 2 (p - 1) / p of the bucket); bytes_vs_allgather divides bytes_max by allgather_ring's. On the
// simulated cluster, nic_bytes_per_node is what left each node through its NIC (the traffic the network between
// machines carries) and nic_vs_allgather divides it by allgather_ring's. Above 256
// simulated ranks the all-gather is not run (every rank would hold p messages): its bytes are the sum of the
// other ranks' message sizes, which is what the ring all-gather forwards, and the line says "derived":true.
// (The exchanges' sums are checked against serial references in tests/exchange.)

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "data/mnist.hpp"
#include "data/sampler.hpp"
#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/simulated.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/core/isa.hpp"
#include "hitch/exchange/aggregate.hpp"
#include "isa_option.hpp"
#include "nn/nn.hpp"

namespace {

namespace ar = hitch::allreduce;
namespace hc = hitch::compress;
namespace nn = hitch_examples::nn;
namespace data = hitch_examples::data;

struct settings {
    std::string model = "mlp";
    std::string data_dir;
    std::size_t warmup_steps = 200;
    std::size_t ef_steps = 0;
    double ef_density = 0.01;
    std::size_t batch = 32;
    std::vector<int> ranks{2, 4};
    std::vector<int> sim_ranks{16, 64, 256, 1024};
    std::vector<double> densities{0.001, 0.01, 0.1};
    int ranks_per_node = 8;
    double gbit = 100.0, latency_us = 5.0, intra_gbit = 1200.0, intra_latency_us = 2.0;
    int runs = 5;
    std::uint64_t seed = 1;
    std::string isa;
};

/// Each rank's gradient kept as its largest entries (as many as the largest density selects): the top-k of that
/// at a smaller density is the top-k of the whole gradient.
struct rank_gradients {
    std::size_t n = 0;
    std::vector<std::vector<std::uint32_t>> index;
    std::vector<std::vector<float>> value;

    [[nodiscard]] std::vector<float> dense(int r) const {
        std::vector<float> g(n, 0.0f);
        const auto& idx = index[static_cast<std::size_t>(r)];
        for (std::size_t j = 0; j < idx.size(); ++j) g[idx[j]] = value[static_cast<std::size_t>(r)][j];
        return g;
    }
};

rank_gradients make_gradients(const settings& s, int ranks, double max_density) {
    const auto dir = s.data_dir.empty() ? data::default_fashion_mnist_dir : std::filesystem::path(s.data_dir);
    const data::dataset train = data::load_mnist(dir, data::split::train);
    const auto norm = data::normalization::of(train);
    const std::size_t warm_batch = 128, max_batch = std::max(warm_batch, s.batch);
    nn::model<float> m =
        s.model == "cnn" ? nn::mnist_cnn<float>(max_batch, s.seed) : nn::mnist_mlp<float>(max_batch, s.seed);
    nn::softmax_cross_entropy<float> loss(max_batch, train.classes);
    data::batch_loader<float> loader(train, norm, max_batch);
    data::sharded_sampler sampler(train.size(), 0, 1, s.seed);
    const auto next = [&](std::size_t b) {
        auto idx = sampler.next(b);
        if (idx.size() < b) {
            sampler.next_epoch();
            idx = sampler.next(b);
        }
        loader.load(idx);
    };
    const auto gradient = [&] {
        const auto logits = m.forward(loader.images(), loader.size(), nn::mode::train);
        (void)loss.forward(logits, loader.labels());
        m.backward(loss.gradient());
    };
    // Serial SGD with momentum 0.9 at lr 0.05: the gradients below are those of a model in training.
    std::vector<std::vector<float>> velocity;
    for (const auto& p : m.parameters()) velocity.emplace_back(p.value.size(), 0.0f);
    for (std::size_t step = 0; step < s.warmup_steps; ++step) {
        next(warm_batch);
        gradient();
        for (std::size_t k = 0; k < m.parameters().size(); ++k) {
            const auto& p = m.parameters()[k];
            for (std::size_t i = 0; i < p.value.size(); ++i) {
                velocity[k][i] = 0.9f * velocity[k][i] + p.gradient[i];
                p.value[i] -= 0.05f * velocity[k][i];
            }
        }
    }
    rank_gradients out;
    out.n = m.parameter_count();
    const auto keep = static_cast<std::size_t>(std::ceil(max_density * static_cast<double>(out.n)));
    std::vector<float> flat(out.n);
    std::vector<std::uint32_t> order(out.n);
    const auto flatten_gradient = [&] {
        std::size_t at = 0;
        for (const auto& p : m.parameters()) {
            std::copy(p.gradient.begin(), p.gradient.end(), flat.begin() + static_cast<std::ptrdiff_t>(at));
            at += p.gradient.size();
        }
    };
    // Data-parallel training with error-feedback top-k at --ef-density over `ranks` ranks: each rank adds its
    // residual to its gradient, sends the top-k of that, keeps the rest; the model steps on the mean of what was
    // sent. The ranks' residuals then hold what they have not sent yet, and what they select next overlaps as it
    // does in such a run.
    std::vector<std::vector<float>> residual(s.ef_steps > 0 ? static_cast<std::size_t>(ranks) : 0);
    for (auto& r : residual) r.assign(out.n, 0.0f);
    const hc::topk ef_codec({.density = s.ef_density});
    for (std::size_t step = 0; step < s.ef_steps; ++step) {
        std::vector<float> mean(out.n, 0.0f);
        for (int r = 0; r < ranks; ++r) {
            next(s.batch);
            gradient();
            flatten_gradient();
            auto& res = residual[static_cast<std::size_t>(r)];
            for (std::size_t i = 0; i < out.n; ++i) res[i] += flat[i];
            auto st = ef_codec.make_state(out.n);
            std::vector<std::byte> message;
            ef_codec.encode(hitch::tensor_view<const float>(res.data(), res.size()), st, message);
            std::vector<float> sent(out.n, 0.0f);
            ef_codec.decode(message, hitch::tensor_view<float>(sent));
            for (std::size_t i = 0; i < out.n; ++i) {
                res[i] -= sent[i];
                mean[i] += sent[i] / static_cast<float>(ranks);
            }
        }
        std::size_t at = 0;
        for (std::size_t k = 0; k < m.parameters().size(); ++k) {
            const auto& p = m.parameters()[k];
            for (std::size_t i = 0; i < p.value.size(); ++i, ++at) {
                velocity[k][i] = 0.9f * velocity[k][i] + mean[at];
                p.value[i] -= 0.05f * velocity[k][i];
            }
        }
    }
    for (int r = 0; r < ranks; ++r) {
        next(s.batch);
        gradient();
        flatten_gradient();
        if (s.ef_steps > 0)  // what an error-feedback rank compresses: its gradient plus its residual
            for (std::size_t i = 0; i < out.n; ++i) flat[i] += residual[static_cast<std::size_t>(r)][i];
        std::iota(order.begin(), order.end(), 0u);
        std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                         [&](std::uint32_t a, std::uint32_t b) { return std::fabs(flat[a]) > std::fabs(flat[b]); });
        std::vector<std::uint32_t> idx(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep));
        std::sort(idx.begin(), idx.end());
        std::vector<float> val;
        for (const auto i : idx) val.push_back(flat[i]);
        out.index.push_back(std::move(idx));
        out.value.push_back(std::move(val));
    }
    return out;
}

/// The union's density and the overlap of the ranks' top-k selections at `density` (the codec's own selection).
struct overlap_figures {
    double union_density = 0, overlap = 0;
};
overlap_figures overlap_of(const rank_gradients& g, int p, double density) {
    const hc::topk codec({.density = density});
    std::vector<char> in_union(g.n, 0);
    std::size_t selected = 0;
    for (int r = 0; r < p; ++r) {
        const std::vector<float> v = g.dense(r);
        auto st = codec.make_state(g.n);
        std::vector<std::byte> message;
        codec.encode(hitch::tensor_view<const float>(v.data(), v.size()), st, message);
        std::vector<float> decoded(g.n, 0.0f);
        codec.decode(message, hitch::tensor_view<float>(decoded));
        for (std::size_t i = 0; i < g.n; ++i)
            if (decoded[i] != 0.0f) {
                ++selected;
                in_union[i] = 1;
            }
    }
    const auto u = static_cast<double>(std::count(in_union.begin(), in_union.end(), 1));
    return {u / static_cast<double>(g.n), selected > 0 ? 1.0 - u / static_cast<double>(selected) : 0.0};
}

struct result {
    double seconds = 0, bytes_max = 0, bytes_mean = 0;
    double nic_bytes = -1;  // simulated: bytes that left the nodes through their NICs, per node (-1: not known)
    bool derived = false;
};

/// Runs one exchange on rank `comm` over `bucket` (a copy of this rank's gradient); returns what it sent.
template <class C>
double exchange_once(ar::group<C>& g, const std::string& exchange, double density, std::vector<float>& bucket) {
    const auto p = static_cast<double>(g.size());
    if (exchange == "dense_ring") {
        ar::allreduce(g, hitch::view(bucket), ar::reduce_op::sum, ar::ring{});
        return 2.0 * (p - 1) / p * static_cast<double>(bucket.size() * sizeof(float));
    }
    const auto run = [&](const auto& codec, const auto& schedule) {
        auto st = hc::make_aggregation_state(codec, bucket.size());
        return static_cast<double>(hc::aggregate(g, codec, st, hitch::tensor_view<float>(bucket), schedule).sent_bytes);
    };
    if (exchange == "allgather_ring") return run(hc::topk({.density = density}), ar::ring{});
    if (exchange == "sparse_recursive_doubling") return run(hc::topk({.density = density}), ar::recursive_doubling{});
    if (exchange == "sparse_hierarchical") return run(hc::topk({.density = density}), ar::hierarchical<>{});
    if (exchange == "compressed_ring") return run(hc::qsgd{}, ar::ring{});
    if (exchange == "compressed_halving_doubling") return run(hc::qsgd{}, ar::rabenseifner{});
    if (exchange == "compressed_hierarchical") return run(hc::qsgd{}, ar::hierarchical<>{});
    throw hitch::config_error("hitch-bench-exchange: no exchange " + exchange);
}

/// The exchange on p threads: median over runs of the slowest rank's time, and the bytes.
result run_local(const settings& s, const rank_gradients& grads, int p, const std::string& exchange, double density) {
    std::vector<double> sent(static_cast<std::size_t>(p));
    std::vector<std::vector<double>> times(static_cast<std::size_t>(p));
    hitch::comm::run_local(p, [&](hitch::comm::local& comm) {
        ar::group g(comm);
        const std::vector<float> mine = grads.dense(comm.rank());
        for (int run = 0; run <= s.runs; ++run) {  // run 0 warms up
            std::vector<float> bucket = mine;
            comm.barrier();
            const auto start = std::chrono::steady_clock::now();
            sent[static_cast<std::size_t>(comm.rank())] = exchange_once(g, exchange, density, bucket);
            if (run > 0)
                times[static_cast<std::size_t>(comm.rank())].push_back(
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
    });
    std::vector<double> slowest(static_cast<std::size_t>(s.runs), 0.0);
    for (const auto& t : times)
        for (std::size_t i = 0; i < t.size(); ++i) slowest[i] = std::max(slowest[i], t[i]);
    std::sort(slowest.begin(), slowest.end());
    result r;
    r.seconds = slowest[slowest.size() / 2];
    r.bytes_max = *std::max_element(sent.begin(), sent.end());
    r.bytes_mean = std::accumulate(sent.begin(), sent.end(), 0.0) / p;
    return r;
}

/// The exchange on p simulated ranks: virtual time from a common start to the last rank's result, and the bytes.
result run_simulated(const settings& s, const rank_gradients& grads, int p, const std::string& exchange,
                     double density) {
    const auto net = hitch::comm::simulated_network::nodes(
        s.ranks_per_node, {s.intra_latency_us * 1e-6, s.intra_gbit * 1e9 / 8}, {s.latency_us * 1e-6, s.gbit * 1e9 / 8});
    std::vector<double> sent(static_cast<std::size_t>(p));
    constexpr double start_s = 1.0;
    const auto report = hitch::comm::simulate(p, net, [&](hitch::comm::simulated& comm) {
        ar::group g(comm);
        std::vector<float> bucket = grads.dense(comm.rank());
        comm.advance_to(hitch::seconds_f(start_s));
        sent[static_cast<std::size_t>(comm.rank())] = exchange_once(g, exchange, density, bucket);
        return 0;
    });
    if (auto e = report.first_error()) std::rethrow_exception(e);
    result r;
    r.seconds = report.makespan_s() - start_s;
    double nic = 0;
    for (const auto& l : report.links)
        if (l.name.ends_with(" nic up")) nic += static_cast<double>(l.bytes);
    r.nic_bytes = nic / ((p + s.ranks_per_node - 1) / s.ranks_per_node);
    r.bytes_max = *std::max_element(sent.begin(), sent.end());
    r.bytes_mean = std::accumulate(sent.begin(), sent.end(), 0.0) / p;
    return r;
}

/// The ring all-gather's bytes without running it: each rank forwards every message but one.
result derived_allgather(const rank_gradients& grads, int p, int ranks_per_node, double density) {
    const hc::topk codec({.density = density});
    std::vector<double> size(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) {
        const std::vector<float> v = grads.dense(r);
        auto st = codec.make_state(grads.n);
        std::vector<std::byte> message;
        size[static_cast<std::size_t>(r)] =
            static_cast<double>(codec.encode(hitch::tensor_view<const float>(v.data(), v.size()), st, message));
    }
    const double total = std::accumulate(size.begin(), size.end(), 0.0);
    result out;
    out.derived = true;
    double nic = 0;
    for (int r = 0; r < p; ++r) {  // rank r forwards every message but its successor's
        const double s = total - size[static_cast<std::size_t>((r + 1) % p)];
        out.bytes_max = std::max(out.bytes_max, s);
        out.bytes_mean += s / p;
        if ((r + 1) % ranks_per_node == 0 || r + 1 == p) nic += s;  // a node's last rank sends to the next node
    }
    out.nic_bytes = nic / ((p + ranks_per_node - 1) / ranks_per_node);
    return out;
}

void print(const char* comm, const settings& s, const rank_gradients& g, int p, double density,
           const std::string& exchange, const overlap_figures& o, const result& r, const result& allgather) {
    const double allgather_bytes = allgather.bytes_max;
    std::string nic;
    if (r.nic_bytes >= 0)
        nic = hitch::detail::concat(
            ",\"nic_bytes_per_node\":", static_cast<long long>(r.nic_bytes),
            allgather.nic_bytes > 0 ? hitch::detail::concat(",\"nic_vs_allgather\":", r.nic_bytes / allgather.nic_bytes)
                                    : std::string());
    std::printf(
        "{\"bench\":\"exchange\",\"comm\":\"%s\",\"isa\":\"%s\",\"model\":\"%s\",\"elements\":%zu,\"p\":%d,"
        "\"density\":%g,\"exchange\":\"%s\",\"union_density\":%.5f,\"overlap\":%.4f,\"seconds\":%.6g,"
        "\"bytes_max\":%.0f,\"bytes_mean\":%.0f,\"bytes_vs_allgather\":%.4f%s,\"ef_steps\":%zu%s}\n",
        comm, std::string(hitch::isa_name(hitch::active_isa())).c_str(), s.model.c_str(), g.n, p, density,
        exchange.c_str(), o.union_density, o.overlap, r.seconds, r.bytes_max, r.bytes_mean,
        allgather_bytes > 0 ? r.bytes_max / allgather_bytes : 0.0, nic.c_str(), s.ef_steps,
        r.derived ? ",\"derived\":true" : "");
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    settings s;
    CLI::App app("hitch-bench-exchange: compressed exchanges on real gradients, threads and a simulated cluster");
    app.add_option("--model", s.model, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}));
    app.add_option("--data", s.data_dir, "MNIST-format directory (default: Fashion-MNIST)");
    app.add_option("--warmup-steps", s.warmup_steps, "serial SGD steps before the gradients are taken");
    app.add_option("--batch-size", s.batch, "samples per rank's gradient")->check(CLI::PositiveNumber);
    app.add_option("--ef-steps", s.ef_steps,
                   "data-parallel steps with error-feedback top-k before the gradients (plus residuals) are taken");
    app.add_option("--ef-density", s.ef_density, "top-k density of those steps")->check(CLI::Range(1e-6, 0.5));
    app.add_option("--ranks", s.ranks, "comm::local world sizes")->delimiter(',');
    app.add_option("--sim-ranks", s.sim_ranks, "comm::simulated world sizes")->delimiter(',');
    app.add_option("--density", s.densities, "top-k densities")->delimiter(',');
    app.add_option("--ranks-per-node", s.ranks_per_node, "simulated ranks per node")->check(CLI::PositiveNumber);
    app.add_option("--gbit", s.gbit, "simulated NIC bandwidth between nodes")->check(CLI::PositiveNumber);
    app.add_option("--runs", s.runs, "timed runs on threads (median)")->check(CLI::PositiveNumber);
    app.add_option("--isa", s.isa, "pin the codecs' kernels: portable, avx2 or avx512");
    CLI11_PARSE(app, argc, argv);
    try {
        if (!s.isa.empty()) hitch::set_isa_limit(hitch_bench::parse_isa_option("--isa", s.isa));
        for (const double d : s.densities)
            if (!(d > 0.0 && d <= 0.5))
                throw hitch::config_error("hitch-bench-exchange: --density " + std::to_string(d) +
                                          " is outside (0, 0.5]");
        int most = 1;
        for (const int p : s.ranks) most = std::max(most, p);
        for (const int p : s.sim_ranks) most = std::max(most, p);
        const rank_gradients grads = make_gradients(s, most, *std::max_element(s.densities.begin(), s.densities.end()));
        const std::vector<std::string> sparse{"allgather_ring", "sparse_recursive_doubling"};
        for (const int p : s.ranks) {
            for (const double d : s.densities) {
                const overlap_figures o = overlap_of(grads, p, d);
                result allgather;
                for (const auto& e : sparse) {
                    const result r = run_local(s, grads, p, e, d);
                    if (e == "allgather_ring") allgather = r;
                    print("local", s, grads, p, d, e, o, r, allgather);
                }
            }
            for (const std::string e : {"dense_ring", "compressed_ring", "compressed_halving_doubling"})
                print("local", s, grads, p, 0.0, e, {}, run_local(s, grads, p, e, 0.0), {});
        }
        for (const int p : s.sim_ranks) {
            for (const double d : s.densities) {
                const overlap_figures o = overlap_of(grads, p, d);
                const result ag = p <= 256 ? run_simulated(s, grads, p, "allgather_ring", d)
                                           : derived_allgather(grads, p, s.ranks_per_node, d);
                print("simulated", s, grads, p, d, "allgather_ring", o, ag, ag);
                for (const std::string e : {"sparse_recursive_doubling", "sparse_hierarchical"})
                    print("simulated", s, grads, p, d, e, o, run_simulated(s, grads, p, e, d), ag);
            }
            print("simulated", s, grads, p, 0.0, "dense_ring", {}, run_simulated(s, grads, p, "dense_ring", 0.0), {});
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "hitch-bench-exchange: %s\n", e.what());
        return 1;
    }
    return 0;
}
