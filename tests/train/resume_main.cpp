// Resume in a new process: run as   mpiexec -n 2 hitch_test_resume <full|first|second> <n> <checkpoint prefix> [zero]
//   full:   2n steps;   first: n steps, save;   second: load, n more steps;   zero: the ZeRO stage (0 or 1: each
//   rank's file then holds its shard of the optimizer state).
// Prints "hash <rank> <parameter hash>" per rank; run_resume.cmake checks that full and first+second agree bitwise.
// The configuration has state in every section a checkpoint holds: momentum, error-feedback residuals of top-k,
// the loss scale, the learning-rate schedule position and a section of the caller's own (the data position).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hitch/comm/mpi.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/optim/lr/cosine.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/train/data_parallel.hpp"

int main(int argc, char** argv) {
    if (argc != 4 && argc != 5) {
        std::fprintf(stderr, "usage: %s full|first|second n prefix [zero]\n", argv[0]);
        return 2;
    }
    const std::string mode = argv[1];
    const int n = std::atoi(argv[2]);
    const int zero = argc == 5 ? std::atoi(argv[4]) : 0;
    hitch::comm::mpi_environment env(argc, argv);
    hitch::comm::mpi comm;
    using dp_t = hitch::data_parallel<hitch::optim::momentum, hitch::compress::error_feedback<hitch::compress::topk>>;

    std::vector<std::vector<float>> w{std::vector<float>(5000), std::vector<float>(300), std::vector<float>(7)};
    std::vector<std::vector<float>> g = w;
    for (auto& layer : w)
        for (std::size_t i = 0; i < layer.size(); ++i) layer[i] = std::sin(static_cast<float>(i));
    std::vector<hitch::layer> layers;
    for (std::size_t k = 0; k < w.size(); ++k)
        layers.push_back({"layer" + std::to_string(k), hitch::view(w[k]), hitch::view(g[k])});

    hitch::cpu dev;
    dp_t::options o;
    o.optimizer.momentum = 0.9f;
    o.optimizer.nesterov = true;
    hitch::compress::topk_options t;
    t.density = 0.05;
    o.compressor = dp_t::compressor_type(hitch::compress::topk(t));
    o.loss_scaling = true;
    o.scaler.initial_scale = 1024.0f;
    o.scaler.growth_interval = 3;
    o.bucket_bytes = 8192;
    o.zero_stage = static_cast<unsigned>(zero);
    o.steps_per_epoch = 4;
    hitch::lr::cosine::options_type cos;
    cos.base = 0.1;
    cos.total_epochs = 4;
    o.learning_rate = hitch::lr::cosine(cos);
    dp_t dp(comm, dev, layers, o);

    int from = 0, to = 2 * n;
    if (mode == "first") to = n;
    if (mode == "second") {
        const auto reader = dp.load(argv[3]);
        from = static_cast<int>(reader.section("data.position")[0]);
        to = from + n;
    }
    for (int s = from; s < to; ++s) {
        for (std::size_t k = 0; k < g.size(); ++k)
            for (std::size_t i = 0; i < g[k].size(); ++i)
                g[k][i] = dp.loss_scale() *
                          std::cos(static_cast<float>(i * (comm.rank() + 2) + k) + 0.37f * static_cast<float>(s));
        if (s == 2 && comm.rank() == 1) g[1][5] = INFINITY;  // one skipped step in the first half
        dp.step();
    }
    if (mode == "first") dp.save(argv[3], {{"data.position", {static_cast<std::byte>(to)}}});
    std::printf("hash %d %llx\n", comm.rank(), static_cast<unsigned long long>(dp.parameter_hash()));
    return 0;
}
