// hitch-bench-zero: per-rank memory of the optimizer state and the FP32 master weights of a ResNet-50-sized model
// (25.6M parameters, bench/resnet50.hpp) with Adam, unsharded and under ZeRO stages 1 and 2, at p ranks of
// comm::local. Two measurements per run:
//   state_bytes, master_bytes   what data_parallel reports holding (optimizer_state_bytes, master_weight_bytes)
//   allocated_bytes             what the C library's allocator handed out while data_parallel was built and took one
//                               step (mallinfo2: in-use heap plus mmapped blocks, summed over arenas), divided by p:
//                               everything data_parallel holds per rank, bucket staging included
//
//   hitch-bench-zero [--json] [--ranks 2,4,8] [--precision fp32,fp16]
//
// --json prints one object per line:
//   {"bench":"zero","precision":"fp32","ranks":4,"zero":1,"params":25557032,"state_bytes":...,"master_bytes":...,
//    "allocated_bytes":...,"state_ratio":0.25}
// state_ratio is state_bytes over the unsharded run's.

#include <malloc.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <algorithm>
#include <string>
#include <vector>

#include "hitch/amp/mixed_precision.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/optim/adam.hpp"
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
            per_rank[static_cast<std::size_t>(comm.rank())] = {dp.optimizer_state_bytes(), dp.master_weight_bytes(),
                                                               0};
        }
    });
    result r = per_rank[0];
    for (const result& x : per_rank) r.state = std::max(r.state, x.state);  // the largest shard
    r.allocated = (after - before) / static_cast<std::size_t>(p);
    return r;
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
    bool json = false;
    std::vector<int> ranks{2, 4, 8};
    std::vector<std::string> precisions{"fp32", "fp16"};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--json") {
            json = true;
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
            std::fprintf(stderr, "usage: hitch-bench-zero [--json] [--ranks 2,4,8] [--precision fp32,fp16]\n");
            return 2;
        }
    }
    std::size_t params = 0;
    for (const auto& t : hitch_bench::resnet50_tensors()) params += t.size();
    if (!json)
        std::printf("%-9s %5s %4s %14s %14s %16s %7s\n", "precision", "ranks", "zero", "state MB/rank", "master MB/rank",
                    "allocated MB/rank", "state");
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
                    std::printf("{\"bench\":\"zero\",\"precision\":\"%s\",\"ranks\":%d,\"zero\":%u,\"params\":%zu,"
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
