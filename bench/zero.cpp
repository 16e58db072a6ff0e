// hitch-bench-zero: per-rank memory of the optimizer state and the FP32 master weights of a ResNet-50-sized model
// (25.6M parameters, bench/resnet50.hpp) with Adam, unsharded and under ZeRO stages 1 and 2, at p ranks of
// comm::local. Two measurements per run:
//   state_bytes, master_bytes   what data_parallel reports holding (optimizer_state_bytes, master_weight_bytes)
//   allocated_bytes             what the C library's allocator handed out while data_parallel was built and took one
//                               step (mallinfo2: in-use heap plus mmapped blocks, summed over arenas), divided by p:
//                               everything data_parallel holds per rank, bucket staging included
//
//   hitch-bench-zero [--json] [--ranks 2,4,8] [--precision fp32,fp16]
//   hitch-bench-zero --simulate [--json] [--ranks 8,32] [--adam-ms T]
//
// --simulate predicts instead where sharding pays for itself in step time, on comm::simulated: one switch
// (alpha 5 us) at link bandwidths from 1 to 400 Gbit/s, a step of ResNet-50's tensors scaled down 16 times (the
// crossover depends only on the optimizer's time per byte), uncompressed ring exchange, no overlap. Each step
// charges the forward and backward pass (a fixed 10 ms) and the optimizer's share of Adam (its time measured here on
// the scaled model, or T with --adam-ms, times the fraction of the parameters this rank steps) as compute; the exchange
// and ZeRO's all-gather cost what the network model says. Sharding steps 1/p of the optimizer and stage 1 adds an
// all-gather, so stage 1 pays for itself where (1 - 1/p) t_opt > (p - 1)/p 4n/B, above B* = 4n / t_opt; stage 2 moves
// the bytes of one all-reduce and never loses.
//
// --json prints one object per line:
//   {"bench":"zero","precision":"fp32","ranks":4,"zero":1,"params":25557032,"state_bytes":...,"master_bytes":...,
//    "allocated_bytes":...,"state_ratio":0.25}
// state_ratio is state_bytes over the unsharded run's.

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "hitch/amp/mixed_precision.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/simulated.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/model_optimizer.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/train/data_parallel.hpp"
#include "resnet50.hpp"

namespace {

std::size_t heap_in_use() {
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

struct result {
    std::size_t state = 0, masters = 0, allocated = 0;
};

template <class Param>
result measure(int p, unsigned zero) {
    const auto tensors = hitch_bench::resnet50_tensors();
    std::vector<result> per_rank(static_cast<std::size_t>(p));
    std::size_t before = 0, after = 0;
    hitch::comm::run_local(p, [&](hitch::comm::local& comm) {
        std::vector<std::vector<Param>> w, g;
        for (const auto& t : tensors) {
            w.emplace_back(t.size(), Param(0.01f));
            g.emplace_back(t.size(), Param(0.001f));
        }
        using dp_t = hitch::data_parallel<hitch::optim::adam, hitch::compress::none, hitch::sync::hard>;
        dp_t::options o;
        o.zero_stage = zero;
        o.loss_scaling = !std::is_same_v<Param, float>;
        hitch::cpu dev;
        comm.barrier();
        if (comm.rank() == 0) before = heap_in_use();
        comm.barrier();
        {
            const auto build = [&] {
                if constexpr (std::is_same_v<Param, float>) {
                    std::vector<hitch::layer> layers;
                    for (std::size_t k = 0; k < tensors.size(); ++k)
                        layers.push_back({tensors[k].name, hitch::view(w[k]), hitch::view(g[k])});
                    return dp_t(comm, dev, std::move(layers), o);
                } else {
                    std::vector<hitch::amp::low_precision_layer<Param>> layers;
                    for (std::size_t k = 0; k < tensors.size(); ++k)
                        layers.push_back({tensors[k].name, hitch::view(w[k]), hitch::view(g[k])});
                    return dp_t(comm, dev, std::move(layers), o);
                }
            };
            dp_t dp = build();
            (void)dp.step();
            comm.barrier();
            if (comm.rank() == 0) after = heap_in_use();
            comm.barrier();
            per_rank[static_cast<std::size_t>(comm.rank())] = {dp.optimizer_state_bytes(), dp.master_weight_bytes(), 0};
        }
    });
    result r = per_rank[0];
    for (const result& x : per_rank) r.state = std::max(r.state, x.state);  // the largest shard
    r.allocated = (after - before) / static_cast<std::size_t>(p);
    return r;
}

/// The scaled model of the simulation: ResNet-50's tensors, each 1/16 as large (at least 1 element).
std::vector<std::size_t> scaled_sizes() {
    std::vector<std::size_t> out;
    for (const auto& t : hitch_bench::resnet50_tensors()) out.push_back(std::max<std::size_t>(1, t.size() / 16));
    return out;
}

/// Seconds one Adam step of the whole scaled model takes here (median of 7, one thread).
double adam_step_seconds(const std::vector<std::size_t>& sizes) {
    std::vector<std::vector<float>> w, g;
    std::vector<hitch::layer> layers;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
        w.emplace_back(sizes[k], 0.01f);
        g.emplace_back(sizes[k], 0.001f);
        layers.push_back({"t" + std::to_string(k), hitch::view(w.back()), hitch::view(g.back())});
    }
    hitch::optim::model_optimizer<hitch::optim::adam> opt({}, layers);
    std::vector<double> times;
    for (int i = 0; i < 8; ++i) {
        const auto start = std::chrono::steady_clock::now();
        opt.step(0.001f);
        if (i > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

/// Virtual seconds of one step (the third) at p simulated ranks and link bandwidth `bytes_per_s`.
double simulated_step(int p, double bytes_per_s, unsigned zero, const std::vector<std::size_t>& sizes, double t_opt) {
    const auto net = hitch::comm::simulated_network::single_switch({5e-6, bytes_per_s});
    std::size_t total = 0;
    for (std::size_t n : sizes) total += n;
    const auto times = hitch::comm::run_simulated(p, net, [&](hitch::comm::simulated& comm) {
        std::vector<std::vector<float>> w, g;
        std::vector<hitch::layer> layers;
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            w.emplace_back(sizes[k], 0.01f);
            g.emplace_back(sizes[k], 0.001f * static_cast<float>(comm.rank() + 1));
            layers.push_back({"t" + std::to_string(k), hitch::view(w.back()), hitch::view(g.back())});
        }
        hitch::cpu dev;
        using dp_t =
            hitch::data_parallel<hitch::optim::adam, hitch::compress::none, hitch::sync::hard, hitch::allreduce::ring>;
        dp_t::options o;
        o.zero_stage = zero;
        o.overlap = false;
        dp_t dp(comm, dev, std::move(layers), o);
        const double share = zero == 0 ? 1.0
                                       : static_cast<double>(dp.optimizer_state_bytes()) /
                                             (2.0 * sizeof(float) * static_cast<double>(total));
        double start = 0;
        for (int s = 0; s < 3; ++s) {
            if (s == 2) start = comm.virtual_time().count();
            comm.compute(hitch::seconds_f(0.010 + t_opt * share));
            (void)dp.step();
        }
        return comm.virtual_time().count() - start;
    });
    return *std::max_element(times.begin(), times.end());
}

int simulate(bool json, const std::vector<int>& ranks, double adam_ms) {
    const std::vector<std::size_t> sizes = scaled_sizes();
    std::size_t n = 0;
    for (std::size_t x : sizes) n += x;
    const double t_opt = adam_ms > 0 ? adam_ms * 1e-3 : adam_step_seconds(sizes);
    const double crossover = 4.0 * static_cast<double>(n) / t_opt;
    if (!json)
        std::printf(
            "scaled model: %zu parameters; Adam step here: %.2f ms; predicted stage-1 crossover: %.1f Gbit/s\n"
            "%5s %9s %12s %12s %12s\n",
            n, t_opt * 1e3, crossover * 8e-9, "ranks", "Gbit/s", "unsharded ms", "ZeRO-1 ms", "ZeRO-2 ms");
    for (int p : ranks)
        for (double gbit : {1.0, 3.0, 10.0, 25.0, 100.0, 400.0}) {
            double ms[3];
            for (unsigned zero = 0; zero < 3; ++zero)
                ms[zero] = 1e3 * simulated_step(p, gbit * 1e9 / 8, zero, sizes, t_opt);
            if (json)
                std::printf(
                    "{\"bench\":\"zero_simulated\",\"ranks\":%d,\"gbit_s\":%g,\"params\":%zu,"
                    "\"adam_ms\":%.4f,\"unsharded_ms\":%.4f,\"zero1_ms\":%.4f,\"zero2_ms\":%.4f,"
                    "\"crossover_gbit_s\":%.2f}\n",
                    p, gbit, n, t_opt * 1e3, ms[0], ms[1], ms[2], crossover * 8e-9);
            else
                std::printf("%5d %9g %12.3f %12.3f %12.3f\n", p, gbit, ms[0], ms[1], ms[2]);
            std::fflush(stdout);
        }
    return 0;
}

std::vector<int> parse_list(const char* s) {
    std::vector<int> out;
    for (const char* at = s; *at != 0;) {
        out.push_back(std::atoi(at));
        const char* comma = std::strchr(at, ',');
        if (comma == nullptr) break;
        at = comma + 1;
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    bool json = false, sim = false;
    double adam_ms = 0;
    std::vector<int> ranks;
    std::vector<std::string> precisions{"fp32", "fp16"};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--json") {
            json = true;
        } else if (a == "--simulate") {
            sim = true;
        } else if (a == "--adam-ms" && i + 1 < argc) {
            adam_ms = std::atof(argv[++i]);
        } else if (a == "--ranks" && i + 1 < argc) {
            ranks = parse_list(argv[++i]);
        } else if (a == "--precision" && i + 1 < argc) {
            precisions.clear();
            for (std::string s = argv[++i]; !s.empty();) {
                const auto comma = s.find(',');
                precisions.push_back(s.substr(0, comma));
                s = comma == std::string::npos ? "" : s.substr(comma + 1);
            }
        } else {
            std::fprintf(stderr,
                         "usage: hitch-bench-zero [--simulate [--adam-ms T]] [--json] [--ranks 2,4,8] "
                         "[--precision fp32,fp16]\n");
            return 2;
        }
    }
    if (sim) return simulate(json, ranks.empty() ? std::vector<int>{8, 32} : ranks, adam_ms);
    if (ranks.empty()) ranks = {2, 4, 8};
    std::size_t params = 0;
    for (const auto& t : hitch_bench::resnet50_tensors()) params += t.size();
    if (!json)
        std::printf("%-9s %5s %4s %14s %14s %16s %7s\n", "precision", "ranks", "zero", "state MB/rank",
                    "master MB/rank", "allocated MB/rank", "state");
    for (const std::string& precision : precisions) {
        if (precision != "fp32" && precision != "fp16") {
            std::fprintf(stderr, "hitch-bench-zero: --precision takes fp32 and fp16, not '%s'\n", precision.c_str());
            return 2;
        }
        for (int p : ranks) {
            std::size_t unsharded = 0;
            for (unsigned zero : {0u, 1u, 2u}) {
                const result r = precision == "fp32" ? measure<float>(p, zero) : measure<hitch::half>(p, zero);
                if (zero == 0) unsharded = r.state;
                const double ratio = static_cast<double>(r.state) / static_cast<double>(unsharded);
                if (json)
                    std::printf(
                        "{\"bench\":\"zero\",\"precision\":\"%s\",\"ranks\":%d,\"zero\":%u,\"params\":%zu,"
                        "\"state_bytes\":%zu,\"master_bytes\":%zu,\"allocated_bytes\":%zu,"
                        "\"state_ratio\":%.4f}\n",
                        precision.c_str(), p, zero, params, r.state, r.masters, r.allocated, ratio);
                else
                    std::printf("%-9s %5d %4u %14.1f %14.1f %16.1f %7.3f\n", precision.c_str(), p, zero,
                                static_cast<double>(r.state) / 1e6, static_cast<double>(r.masters) / 1e6,
                                static_cast<double>(r.allocated) / 1e6, ratio);
                std::fflush(stdout);
            }
        }
    }
    return 0;
}
