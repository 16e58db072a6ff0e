// data_parallel on hitch::cuda::device over comm::local (1 to 4 ranks sharing the GPU), every exchange path, against
// the same program on hitch::cpu, bit for bit: the parameters after N steps, which steps were applied, the bytes sent
// and the exchange of each bucket. sgd, momentum (Nesterov), adam and lars<momentum>; compress::none (the collectives'
// device backend), fp16 (additive: encode_summable, the all-reduce of GPU buffers, decode_summed),
// error_feedback<topk> (the ring all-gather of messages staged through the host) and onebit (the compression-aware
// ring with its hop residual); overlap on and off; gradient_ready in backward order or not at all; the model on the
// device's stream or on a stream of its own; local_sgd with and without averaged optimizer state.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hitch/allreduce/automatic.hpp"
#include "hitch/allreduce/ring.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/cuda/compress/error_feedback.cuh"
#include "hitch/cuda/compress/fp16.cuh"
#include "hitch/cuda/compress/onebit.cuh"
#include "hitch/cuda/compress/topk.cuh"
#include "hitch/cuda/train/data_parallel.cuh"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/lars.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/sync/local_sgd.hpp"
#include "programs.hpp"

using hitch::comm::local;
using hitch::comm::run_local;
using namespace hitch_test;

namespace {

struct setup {
    int ranks = 2;
    std::vector<std::size_t> sizes{300, 7, 1025, 0, 64, 4100};
    std::size_t bucket_bytes = 2048;  // several buckets, one layer (4100) larger than a bucket
    bool overlap = true;
    reporting report = reporting::backward;
    bool own_stream = false;
    std::uint64_t steps = 5;
};

/// The same program on the CPU and on the GPU; the parameters, records and exchanges must agree bit for bit.
template <class O, class X, class P, class S, class Tune>
void same_on_cpu_and_gpu(const setup& c, Tune&& tune) {
    using dp_t = hitch::data_parallel<O, X, P, S>;
    INFO("ranks " << c.ranks << ", overlap " << c.overlap << ", reporting "
                  << (c.report == reporting::backward ? "backward" : "none") << ", own stream " << c.own_stream);
    run_local(c.ranks, [&](local& comm) {
        typename dp_t::options o;
        o.bucket_bytes = c.bucket_bytes;
        o.overlap = c.overlap;
        o.learning_rate = hitch::lr::constant({0.05});
        tune(o);
        const gradient_plan plan;
        host_model<float> hm(c.sizes);
        hitch::cpu cpu;
        std::vector<hitch::train::step_metrics> cpu_records;
        std::vector<std::string_view> cpu_exchanges;
        {
            dp_t dp(comm, cpu, hm.layers(), o);
            cpu_records = run_steps(dp, hm, comm.rank(), 0, c.steps, plan, c.report);
            cpu_exchanges = dp.bucket_exchanges();
        }
        hitch::cuda::device gpu;
        model_stream stream(gpu, c.own_stream);
        gpu_model<float> gm(c.sizes, stream.get());
        typename dp_t::options go = o;
        go.compute_stream = stream.option();
        std::vector<hitch::train::step_metrics> gpu_records;
        std::vector<std::string_view> gpu_exchanges;
        std::uint64_t hash = 0;
        {
            dp_t dp(comm, gpu, gm.layers(), go);
            gpu_records = run_steps(dp, gm, comm.rank(), 0, c.steps, plan, c.report);
            gpu_exchanges = dp.bucket_exchanges();
            hash = dp.parameter_hash();
            const std::vector<std::uint64_t> hashes = hitch::comm::allgather_value(comm, hash);
            for (std::uint64_t h : hashes) require(h == hashes[0], "the replicas' parameter hashes differ");
        }
        const std::string diff = first_difference(hm.parameters(), gm.parameters());
        require(diff.empty(), "rank " + std::to_string(comm.rank()) + ": GPU and CPU parameters differ at " + diff);
        require(cpu_records.size() == gpu_records.size(), "as many records");
        for (std::size_t s = 0; s < cpu_records.size(); ++s) {
            require(cpu_records[s].skipped == gpu_records[s].skipped, "the same steps applied");
            require(cpu_records[s].bytes_sent == gpu_records[s].bytes_sent,
                    "step " + std::to_string(s) + ": bytes sent " + std::to_string(gpu_records[s].bytes_sent) +
                        " on the GPU, " + std::to_string(cpu_records[s].bytes_sent) + " on the CPU");
        }
        require(cpu_exchanges == gpu_exchanges, "the same exchange for every bucket");
    });
}

template <class O, class X, class P, class S>
void same_on_cpu_and_gpu(const setup& c) {
    same_on_cpu_and_gpu<O, X, P, S>(c, [](auto&) {});
}

}  // namespace

TEST_CASE("sgd, uncompressed, hard sync: GPU equals CPU bit for bit on 1 to 4 ranks", "[cuda][train][none]") {
    for (const int p : {1, 2, 3, 4})
        for (const bool overlap : {true, false})
            for (const reporting report : {reporting::backward, reporting::none}) {
                setup c;
                c.ranks = p;
                c.overlap = overlap;
                c.report = report;
                c.own_stream = p % 2 == 0;
                same_on_cpu_and_gpu<hitch::optim::sgd, hitch::compress::none, hitch::sync::hard,
                                    hitch::allreduce::ring>(c);
            }
}

TEST_CASE("momentum with fp16 (additive: summed as FP16 in GPU memory): GPU equals CPU", "[cuda][train][fp16]") {
    for (const int p : {2, 3})
        for (const bool overlap : {true, false}) {
            setup c;
            c.ranks = p;
            c.overlap = overlap;
            c.own_stream = overlap;
            same_on_cpu_and_gpu<hitch::optim::momentum, hitch::compress::fp16, hitch::sync::hard,
                                hitch::allreduce::ring>(c, [](auto& o) {
                o.optimizer.momentum = 0.9f;
                o.optimizer.nesterov = true;
            });
        }
}

TEST_CASE("adam with error_feedback<topk> (the ring all-gather of staged messages): GPU equals CPU",
          "[cuda][train][topk]") {
    for (const int p : {1, 2, 4}) {
        setup c;
        c.ranks = p;
        c.steps = 6;
        c.overlap = p != 4;
        same_on_cpu_and_gpu<hitch::optim::adam, hitch::compress::error_feedback<hitch::compress::topk>,
                            hitch::sync::hard, hitch::allreduce::ring>(c, [](auto& o) {
            o.compressor_options({.density = 0.05});
            o.optimizer.weight_decay = 1e-3f;
        });
    }
}

TEST_CASE("lars<momentum> with onebit (the compression-aware ring, hop residuals on the GPU): GPU equals CPU",
          "[cuda][train][onebit]") {
    for (const int p : {2, 3}) {
        setup c;
        c.ranks = p;
        c.steps = 6;
        same_on_cpu_and_gpu<hitch::optim::lars<hitch::optim::momentum>, hitch::compress::onebit, hitch::sync::hard,
                            hitch::allreduce::ring>(c, [](auto& o) { o.optimizer.base.momentum = 0.9f; });
    }
}

TEST_CASE("local_sgd on the GPU: parameters (and optimizer state) averaged every k steps, as on the CPU",
          "[cuda][train][local_sgd]") {
    for (const bool with_state : {false, true}) {
        setup c;
        c.ranks = 3;
        c.steps = 6;  // ends on an average (period 3), so the replicas must agree as well as match the CPU
        same_on_cpu_and_gpu<hitch::optim::momentum, hitch::compress::none, hitch::sync::local_sgd,
                            hitch::allreduce::ring>(c, [&](auto& o) {
            o.optimizer.momentum = 0.9f;
            o.sync.period = 3;
            o.sync.average_optimizer_state = with_state;
        });
    }
}

TEST_CASE("the default schedule (automatic) trains on GPU buffers and keeps the replicas identical",
          "[cuda][train][automatic]") {
    run_local(3, [](local& comm) {
        hitch::cuda::device gpu;
        gpu_model<float> gm({1000, 33, 5}, gpu.stream());
        hitch::data_parallel<hitch::optim::sgd>::options o;
        o.bucket_bytes = 1024;
        hitch::data_parallel<hitch::optim::sgd> dp(comm, gpu, gm.layers(), o);
        (void)run_steps(dp, gm, comm.rank(), 0, 4, gradient_plan{});
        const std::vector<std::uint64_t> hashes = hitch::comm::allgather_value(comm, dp.parameter_hash());
        for (std::uint64_t h : hashes) require(h == hashes[0], "the replicas' parameter hashes differ");
    });
}
