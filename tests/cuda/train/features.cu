// data_parallel's features on hitch::cuda::device over comm::local, against the same program on hitch::cpu, bit for
// bit: mixed precision (FP16 with loss scaling, BF16 without) with FP32 masters on the GPU; an overflow on one rank
// skipped everywhere; non-finite gradients without a scaler (the same error, or the same skip); accumulation with
// clipping and unused layers; uneven inputs and join(); checkpoints (a GPU run resumed on the GPU and on the CPU from
// the GPU's files, error feedback's residual and the compression-aware ring's hop residual included); local SGD with
// block momentum (the policy's host copies); buffers in GPU memory; the timeline's GPU spans and the metrics.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "hitch/allreduce/ring.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/cuda/compress/error_feedback.cuh"
#include "hitch/cuda/compress/onebit.cuh"
#include "hitch/cuda/compress/topk.cuh"
#include "hitch/cuda/train/data_parallel.cuh"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/sync/local_sgd.hpp"
#include "programs.hpp"

using hitch::comm::local;
using hitch::comm::run_local;
using namespace hitch_test;

namespace {

const std::vector<std::size_t> model_sizes{300, 7, 1025, 64, 4100};

template <class O, class X = hitch::compress::none, class P = hitch::sync::hard>
using dp_of = hitch::data_parallel<O, X, P, hitch::allreduce::ring>;

/// What one run of a program gives back.
struct outcome {
    std::vector<std::vector<float>> parameters;
    std::vector<hitch::train::step_metrics> records;
    std::uint64_t hash = 0;
    std::string error;
};

/// Runs `body(dp, model)` (which returns the step records) on the CPU and on the GPU, each with its own model of
/// element type T, and returns both outcomes.
template <class DP, class T = float, class Body>
std::pair<outcome, outcome> twin(local& comm, const typename DP::options& o, Body&& body, bool own_stream = false) {
    outcome cpu_run, gpu_run;
    {
        host_model<T> m(model_sizes);
        hitch::cpu cpu;
        DP dp(comm, cpu, m.layers(), o);
        try {
            cpu_run.records = body(dp, m);
        } catch (const std::exception& e) {
            cpu_run.error = e.what();
        }
        cpu_run.parameters = m.parameters();
        cpu_run.hash = dp.parameter_hash();
    }
    {
        hitch::cuda::device gpu;
        model_stream stream(gpu, own_stream);
        gpu_model<T> m(model_sizes, stream.get());
        typename DP::options go = o;
        go.compute_stream = stream.option();
        DP dp(comm, gpu, m.layers(), go);
        try {
            gpu_run.records = body(dp, m);
        } catch (const std::exception& e) {
            gpu_run.error = e.what();
        }
        gpu_run.parameters = m.parameters();
        gpu_run.hash = dp.parameter_hash();
    }
    return {std::move(cpu_run), std::move(gpu_run)};
}

/// The CPU's and the GPU's outcomes agree bit for bit.
void same(const outcome& cpu, const outcome& gpu, int rank) {
    const std::string where = "rank " + std::to_string(rank) + ": ";
    require(cpu.error == gpu.error, where + "the CPU said '" + cpu.error + "', the GPU '" + gpu.error + "'");
    const std::string diff = first_difference(cpu.parameters, gpu.parameters);
    require(diff.empty(), where + "parameters differ at " + diff);
    require(cpu.hash == gpu.hash, where + "parameter hashes (masters included) differ");
    require(cpu.records.size() == gpu.records.size(), where + "as many records");
    for (std::size_t s = 0; s < cpu.records.size(); ++s) {
        const auto& a = cpu.records[s];
        const auto& b = gpu.records[s];
        require(a.skipped == b.skipped && a.accumulated == b.accumulated && a.micro_batches == b.micro_batches,
                where + "record " + std::to_string(s) + " differs");
        require(a.loss_scale == b.loss_scale, where + "loss scales differ at record " + std::to_string(s));
        require(a.grad_norm.has_value() == b.grad_norm.has_value() &&
                    (!a.grad_norm || std::memcmp(&*a.grad_norm, &*b.grad_norm, sizeof(double)) == 0),
                where + "gradient norms differ at record " + std::to_string(s));
    }
}

std::filesystem::path scratch_dir(const std::string& name) {
    const auto dir =
        std::filesystem::temp_directory_path() / ("hitch-test-cuda-train-" + std::to_string(::getpid())) / name;
    std::filesystem::create_directories(dir);
    return dir;
}

}  // namespace

TEST_CASE("FP16 layers with loss scaling and BF16 layers: FP32 masters on the GPU, as on the CPU",
          "[cuda][train][amp]") {
    run_local(2, [](local& comm) {
        using dp_t = dp_of<hitch::optim::adam>;
        dp_t::options o;
        o.bucket_bytes = 2048;
        o.loss_scaling = true;
        o.scaler.initial_scale = 1024.0f;
        o.scaler.growth_interval = 3;  // the scale grows during the run
        o.learning_rate = hitch::lr::constant({1e-3});
        gradient_plan plan;
        plan.scale = 1024.0f;
        const auto [cpu, gpu] = twin<dp_t, hitch::half>(
            comm, o, [&](auto& dp, auto& m) { return run_steps(dp, m, comm.rank(), 0, 8, plan); }, true);
        same(cpu, gpu, comm.rank());
    });
    run_local(2, [](local& comm) {
        using dp_t = dp_of<hitch::optim::sgd>;
        dp_t::options o;
        o.bucket_bytes = 2048;
        o.learning_rate = hitch::lr::constant({0.05});
        const auto [cpu, gpu] = twin<dp_t, hitch::bfloat16>(
            comm, o, [&](auto& dp, auto& m) { return run_steps(dp, m, comm.rank(), 0, 6, gradient_plan{}); });
        same(cpu, gpu, comm.rank());
    });
}

TEST_CASE("an overflow on one rank skips the step everywhere and backs the scale off (the GPU's check)",
          "[cuda][train][amp]") {
    run_local(3, [](local& comm) {
        using dp_t = dp_of<hitch::optim::adam>;
        dp_t::options o;
        o.bucket_bytes = 2048;
        o.loss_scaling = true;
        o.scaler.initial_scale = 1024.0f;
        gradient_plan plan;
        plan.scale = 1024.0f;
        plan.poison = std::array<std::uint64_t, 3>{1, 2, 3};  // rank 1, step 2, layer 3
        const auto [cpu, gpu] = twin<dp_t, hitch::half>(
            comm, o, [&](auto& dp, auto& m) { return run_steps(dp, m, comm.rank(), 0, 5, plan); });
        same(cpu, gpu, comm.rank());
        require(gpu.records[2].skipped && !gpu.records[1].skipped && !gpu.records[3].skipped, "step 2 skipped");
        require(gpu.records[3].loss_scale == 512.0, "the scale backed off");
    });
}

TEST_CASE("non-finite gradients without a scaler: the same error naming the layer, or the same skip",
          "[cuda][train][nonfinite]") {
    for (const auto policy : {hitch::amp::nonfinite_policy::throw_error, hitch::amp::nonfinite_policy::skip_step})
        run_local(2, [&](local& comm) {
            using dp_t = dp_of<hitch::optim::sgd>;
            dp_t::options o;
            o.bucket_bytes = 2048;
            o.nonfinite = policy;
            gradient_plan plan;
            plan.poison = std::array<std::uint64_t, 3>{0, 1, 2};  // rank 0, step 1, layer 2
            const auto [cpu, gpu] =
                twin<dp_t>(comm, o, [&](auto& dp, auto& m) { return run_steps(dp, m, comm.rank(), 0, 3, plan); });
            same(cpu, gpu, comm.rank());
            if (policy == hitch::amp::nonfinite_policy::throw_error)
                require(gpu.error.find("layer2") != std::string::npos, "the error names the layer: " + gpu.error);
            else
                require(gpu.records.size() == 3 && gpu.records[1].skipped, "step 1 skipped");
        });
}

TEST_CASE("accumulation over 3 micro-batches with clipping and unused layers: GPU equals CPU",
          "[cuda][train][accumulation]") {
    for (const bool overlap : {true, false})
        run_local(2, [&](local& comm) {
            using dp_t = dp_of<hitch::optim::momentum>;
            dp_t::options o;
            o.bucket_bytes = 2048;
            o.overlap = overlap;
            o.accumulation_steps = 3;
            o.clip_grad_norm = 0.5;
            o.find_unused_layers = true;
            o.optimizer.momentum = 0.9f;
            gradient_plan plan;
            // Layer 1 is not produced in some micro-batches (on rank 1 only), layer 3 never by anyone.
            plan.skipped = [&](std::uint64_t key, std::size_t k) {
                return k == 3 || (k == 1 && comm.rank() == 1 && key % 2 == 0);
            };
            const auto [cpu, gpu] = twin<dp_t>(
                comm, o,
                [&](auto& dp, auto& m) { return run_steps(dp, m, comm.rank(), 0, 4, plan, reporting::backward, 3); },
                overlap);
            same(cpu, gpu, comm.rank());
            require(gpu.records.back().grad_norm.has_value(), "the norm is reported");
        });
}

TEST_CASE("uneven inputs: ranks that run out join with zero gradients, as on the CPU", "[cuda][train][join]") {
    run_local(3, [](local& comm) {
        using dp_t = dp_of<hitch::optim::momentum>;
        dp_t::options o;
        o.bucket_bytes = 2048;
        o.uneven_inputs = true;
        o.optimizer.momentum = 0.9f;
        const std::uint64_t batches = comm.rank() == 1 ? 2 : 6;
        const auto [cpu, gpu] = twin<dp_t>(comm, o, [&](auto& dp, auto& m) {
            auto records = run_steps(dp, m, comm.rank(), 0, batches, gradient_plan{});
            dp.join();
            require(dp.step_index() == 6, "every rank ends at the same step");
            return records;
        });
        same(cpu, gpu, comm.rank());
    });
}

TEST_CASE("checkpoints: a GPU run resumes on the GPU and on the CPU from the GPU's files, bit for bit",
          "[cuda][train][checkpoint]") {
    const auto resume = [](auto codec_tag, const std::string& name) {
        using X = decltype(codec_tag);
        const auto dir = scratch_dir(name);
        run_local(2, [&](local& comm) {
            using dp_t = dp_of<hitch::optim::momentum, X>;
            typename dp_t::options o;
            o.bucket_bytes = 2048;
            o.optimizer.momentum = 0.9f;
            if constexpr (std::is_same_v<X, hitch::compress::error_feedback<hitch::compress::topk>>)
                o.compressor_options({.density = 0.1});
            const std::string prefix = (dir / "ckpt").string();
            const gradient_plan plan;
            hitch::cuda::device gpu;
            // The whole run on the GPU, saving halfway.
            std::vector<std::vector<float>> whole;
            {
                gpu_model<float> m(model_sizes, gpu.stream());
                dp_t dp(comm, gpu, m.layers(), o);
                (void)run_steps(dp, m, comm.rank(), 0, 4, plan);
                dp.save(prefix);
                (void)run_steps(dp, m, comm.rank(), 4, 4, plan);
                whole = m.parameters();
            }
            // A new GPU object resumes.
            {
                gpu_model<float> m(model_sizes, gpu.stream());
                dp_t dp(comm, gpu, m.layers(), o);
                (void)dp.load(prefix);
                require(dp.step_index() == 4, "resumed at step 4");
                (void)run_steps(dp, m, comm.rank(), 4, 4, plan);
                const std::string diff = first_difference(whole, m.parameters());
                require(diff.empty(), "GPU resume differs at " + diff);
            }
            // The CPU resumes from the GPU's files.
            {
                host_model<float> m(model_sizes);
                hitch::cpu cpu;
                dp_t dp(comm, cpu, m.layers(), o);
                (void)dp.load(prefix);
                (void)run_steps(dp, m, comm.rank(), 4, 4, plan);
                const std::string diff = first_difference(whole, m.parameters());
                require(diff.empty(), "CPU resume of the GPU's checkpoint differs at " + diff);
            }
        });
        std::filesystem::remove_all(dir);
    };
    resume(hitch::compress::error_feedback<hitch::compress::topk>{}, "topk");
    resume(hitch::compress::onebit{}, "onebit");
}

TEST_CASE("local SGD with block momentum: the policy's host copies of the GPU's parameters",
          "[cuda][train][local_sgd]") {
    run_local(2, [](local& comm) {
        using dp_t = dp_of<hitch::optim::momentum, hitch::compress::none, hitch::sync::local_sgd>;
        dp_t::options o;
        o.bucket_bytes = 2048;
        o.optimizer.momentum = 0.9f;
        o.sync.period = 2;
        o.sync.block_momentum = 0.5;
        const auto [cpu, gpu] = twin<dp_t>(
            comm, o, [&](auto& dp, auto& m) { return run_steps(dp, m, comm.rank(), 0, 7, gradient_plan{}); });
        same(cpu, gpu, comm.rank());
    });
}

TEST_CASE("buffers in GPU memory agree after every step, as host buffers do on the CPU", "[cuda][train][buffers]") {
    run_local(3, [](local& comm) {
        using dp_t = dp_of<hitch::optim::sgd>;
        const auto values = [&](std::size_t n, std::uint64_t salt) {
            std::vector<float> v(n);
            for (std::size_t i = 0; i < n; ++i)
                v[i] = rough(salt ^ (static_cast<std::uint64_t>(comm.rank()) << 40) ^ i);
            return v;
        };
        // The CPU: host buffers.
        std::vector<float> mean_h = values(50, 1), first_h = values(9, 2);
        {
            host_model<float> m(model_sizes);
            hitch::cpu cpu;
            dp_t dp(comm, cpu, m.layers(), {});
            dp.register_buffers({{"running_mean", hitch::view(mean_h), hitch::train::buffer_sync::average},
                                 {"count", hitch::view(first_h), hitch::train::buffer_sync::broadcast}});
            (void)run_steps(dp, m, comm.rank(), 0, 2, gradient_plan{});
        }
        // The GPU: the averaged buffer in GPU memory, the broadcast one in host memory.
        std::vector<float> mean_g = values(50, 1), first_g = values(9, 2);
        {
            hitch::cuda::device gpu;
            gpu_model<float> m(model_sizes, gpu.stream());
            float* d = nullptr;
            cuda_ok(cudaMalloc(reinterpret_cast<void**>(&d), mean_g.size() * sizeof(float)), "cudaMalloc");
            cuda_ok(cudaMemcpy(d, mean_g.data(), mean_g.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
            {
                dp_t dp(comm, gpu, m.layers(), {});
                dp.register_buffers(
                    {{"running_mean", hitch::tensor_view<float>(d, mean_g.size(), hitch::memory_space::cuda),
                      hitch::train::buffer_sync::average},
                     {"count", hitch::view(first_g), hitch::train::buffer_sync::broadcast}});
                (void)run_steps(dp, m, comm.rank(), 0, 2, gradient_plan{});
            }
            cuda_ok(cudaMemcpy(mean_g.data(), d, mean_g.size() * sizeof(float), cudaMemcpyDeviceToHost), "download");
            cudaFree(d);
        }
        require(first_difference({mean_h, first_h}, {mean_g, first_g}).empty(), "buffers differ");
    });
}

TEST_CASE("the timeline shows the GPU's own time on a lane of its own; metrics as on the CPU",
          "[cuda][train][observability]") {
    run_local(2, [](local& comm) {
        using dp_t = dp_of<hitch::optim::adam>;
        hitch::train::timeline tl(comm.rank());
        std::ostringstream metrics;
        dp_t::options o;
        o.bucket_bytes = 2048;
        o.timeline = &tl;
        o.metrics = &metrics;
        hitch::cuda::device gpu;
        gpu_model<float> m(model_sizes, gpu.stream());
        {
            dp_t dp(comm, gpu, m.layers(), o);
            (void)run_steps(dp, m, comm.rank(), 0, 3, gradient_plan{});
        }  // the GPU spans still pending are written when data_parallel goes
        std::size_t intake = 0, optimizer = 0, unpack = 0;
        for (const auto& e : tl.events()) {
            if (e.category != "gpu") continue;
            require(e.thread >= 1000, "GPU spans lie on a lane, not on a host thread");
            intake += e.name.rfind("intake bucket ", 0) == 0 ? 1 : 0;
            unpack += e.name.rfind("unpack bucket ", 0) == 0 ? 1 : 0;
            optimizer += e.name == "optimizer" ? 1 : 0;
            require(e.duration_us >= 0, "a span ends after it begins");
        }
        require(optimizer == 3, "one optimizer span per step, not " + std::to_string(optimizer));
        require(intake >= 3 && unpack >= 3, "intake and unpack spans for every step's buckets");
        std::ostringstream trace;
        tl.write(trace);
        require(trace.str().find("\"thread_name\"") != std::string::npos, "the lane is named");
        std::size_t lines = 0;
        for (char ch : metrics.str()) lines += ch == '\n' ? 1 : 0;
        require(lines == 3, "a metrics line per step");
    });
}
