// data_parallel on hitch::cuda::device over comm::mpi (2 and 3 processes sharing the GPUs there are), against the same
// program on hitch::cpu in the same processes, bit for bit: sgd uncompressed with overlap, momentum with
// error_feedback<topk>, adam on BF16 layers with FP32 masters, and a checkpoint written by the GPU run resumed by
// the CPU. The collectives take whichever path this MPI allows (staged through pinned memory, or direct on a
// CUDA-aware MPI: hitch/cuda/allreduce/path.hpp); both give the host schedule's bits. Skips (every rank exits 77)
// unless every rank has a GPU.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "hitch/allreduce/ring.hpp"
#include "hitch/comm/agree.hpp"
#include "hitch/comm/mpi.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/cuda/compress/error_feedback.cuh"
#include "hitch/cuda/compress/topk.cuh"
#include "hitch/cuda/train/data_parallel.cuh"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/hard.hpp"
#include "programs.hpp"

using namespace hitch_test;

namespace {

const std::vector<std::size_t> model_sizes{500, 3, 2049, 0, 128, 5000};

/// Runs `body` on every rank and fails the test case on every rank if any rank threw.
template <class Body>
void collective(hitch::comm::mpi& comm, Body&& body) {
    std::string error;
    try {
        body();
    } catch (const std::exception& e) {
        error = e.what();
    }
    const std::vector<int> all = hitch::comm::allgather_value(comm, error.empty() ? 0 : 1);
    INFO("rank " << comm.rank() << ": " << error);
    CHECK(error.empty());
    for (int f : all) REQUIRE(f == 0);
}

/// The same program on the CPU and on the GPU (the model on a stream of its own).
template <class O, class X, class T = float, class Tune>
void same_on_cpu_and_gpu(hitch::comm::mpi& comm, std::uint64_t steps, Tune&& tune) {
    using dp_t = hitch::data_parallel<O, X, hitch::sync::hard, hitch::allreduce::ring>;
    typename dp_t::options o;
    o.bucket_bytes = 4096;
    tune(o);
    const gradient_plan plan{o.loss_scaling ? o.scaler.initial_scale : 1.0f, std::nullopt, nullptr};
    host_model<T> hm(model_sizes);
    {
        hitch::cpu cpu;
        dp_t dp(comm, cpu, hm.layers(), o);
        (void)run_steps(dp, hm, comm.rank(), 0, steps, plan);
    }
    hitch::cuda::device gpu;
    model_stream stream(gpu, true);
    gpu_model<T> gm(model_sizes, stream.get());
    typename dp_t::options go = o;
    go.compute_stream = stream.option();
    {
        dp_t dp(comm, gpu, gm.layers(), go);
        (void)run_steps(dp, gm, comm.rank(), 0, steps, plan);
    }
    const std::string diff = first_difference(hm.parameters(), gm.parameters());
    require(diff.empty(), "GPU and CPU parameters differ at " + diff);
}

}  // namespace

TEST_CASE("sgd uncompressed over MPI: GPU equals CPU", "[cuda][train][mpi]") {
    hitch::comm::mpi comm;
    for (const bool overlap : {true, false})
        collective(comm, [&] {
            same_on_cpu_and_gpu<hitch::optim::sgd, hitch::compress::none>(comm, 5,
                                                                          [&](auto& o) { o.overlap = overlap; });
        });
}

TEST_CASE("momentum with error_feedback<topk> over MPI: GPU equals CPU", "[cuda][train][mpi]") {
    hitch::comm::mpi comm;
    collective(comm, [&] {
        same_on_cpu_and_gpu<hitch::optim::momentum, hitch::compress::error_feedback<hitch::compress::topk>>(
            comm, 6, [](auto& o) {
                o.optimizer.momentum = 0.9f;
                o.compressor_options({.density = 0.05});
            });
    });
}

TEST_CASE("adam on BF16 layers over MPI: FP32 masters on the GPU, as on the CPU", "[cuda][train][mpi][amp]") {
    hitch::comm::mpi comm;
    collective(comm, [&] {
        same_on_cpu_and_gpu<hitch::optim::adam, hitch::compress::none, hitch::bfloat16>(
            comm, 5, [](auto& o) { o.learning_rate = hitch::lr::constant({1e-3}); });
    });
}

TEST_CASE("a GPU checkpoint over MPI resumes on the CPU bit for bit", "[cuda][train][mpi][checkpoint]") {
    hitch::comm::mpi comm;
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() /
        ("hitch-test-cuda-train-mpi-" + std::to_string(hitch::comm::allgather_value(comm, ::getpid()).front()));
    if (comm.rank() == 0) std::filesystem::create_directories(dir);
    comm.barrier();
    collective(comm, [&] {
        using dp_t =
            hitch::data_parallel<hitch::optim::momentum, hitch::compress::error_feedback<hitch::compress::topk>,
                                 hitch::sync::hard, hitch::allreduce::ring>;
        dp_t::options o;
        o.bucket_bytes = 4096;
        o.optimizer.momentum = 0.9f;
        o.compressor_options({.density = 0.05});
        const gradient_plan plan;
        const std::string prefix = (dir / "ckpt").string();
        hitch::cuda::device gpu;
        std::vector<std::vector<float>> whole;
        {
            gpu_model<float> m(model_sizes, gpu.stream());
            dp_t dp(comm, gpu, m.layers(), o);
            (void)run_steps(dp, m, comm.rank(), 0, 3, plan);
            dp.save(prefix);
            (void)run_steps(dp, m, comm.rank(), 3, 3, plan);
            whole = m.parameters();
        }
        host_model<float> m(model_sizes);
        hitch::cpu cpu;
        dp_t dp(comm, cpu, m.layers(), o);
        (void)dp.load(prefix);
        (void)run_steps(dp, m, comm.rank(), 3, 3, plan);
        const std::string diff = first_difference(whole, m.parameters());
        require(diff.empty(), "the CPU's resume differs at " + diff);
    });
    comm.barrier();
    if (comm.rank() == 0) std::filesystem::remove_all(dir);
}
