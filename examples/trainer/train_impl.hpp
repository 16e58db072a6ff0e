#pragma once
// The training loop, once per (compressor, sync policy, communicator), with the optimizer chosen at run time: this
// is where an existing model meets hitch::data_parallel. The loop (train_loop) takes its model from a runner: the
// toolkit's nn::model on the host (host_runner, here), or the MLP on a GPU (gpu/runner.cuh, --device cuda).
// Included only by the instantiate_*.cpp files and the GPU part's gpu/train_gpu.cuh.

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint_files.hpp"
#include "data/sampler.hpp"
#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/agree.hpp"
#include "hitch/device/cpu.hpp"
#include "hitch/exchange/aggregate.hpp"
#include "hitch/optim/lr.hpp"
#include "hitch/train/data_parallel.hpp"
#include "hitch/train/metrics.hpp"
#include "hitch/train/timeline.hpp"
#include "nn/loss.hpp"
#include "progress.hpp"
#include "registry.hpp"
#include "schedule_by_name.hpp"
#include "train.hpp"

namespace hitch_examples {

namespace detail {

/// The learning-rate schedule --lr-schedule names, behind hitch::lr::warmup when --warmup-epochs > 0 (Goyal et al.
/// 2017: linear from lr / 10 to the schedule's value at the end of the warm-up).
inline std::function<double(std::uint64_t, std::uint64_t)> make_lr_schedule(const train_config& c) {
    namespace lr = hitch::lr;
    const double epochs = static_cast<double>(c.epochs);
    std::function<double(std::uint64_t, std::uint64_t)> base;
    if (c.lr_schedule == "constant") {
        base = lr::constant({c.lr});
    } else if (c.lr_schedule == "step") {
        lr::step_decay::options_type o;
        o.base = c.lr;
        o.step_epochs = std::max(1.0, epochs / 3.0);
        o.gamma = 0.1;
        base = lr::step_decay(o);
    } else if (c.lr_schedule == "multistep") {
        lr::multi_step::options_type o;
        o.base = c.lr;
        o.milestones = {epochs * 0.5, epochs * 0.75};
        o.gamma = 0.1;
        base = lr::multi_step(o);
    } else if (c.lr_schedule == "cosine") {
        lr::cosine::options_type o;
        o.base = c.lr;
        o.total_epochs = epochs;
        base = lr::cosine(o);
    } else if (c.lr_schedule == "polynomial") {
        lr::polynomial::options_type o;
        o.base = c.lr;
        o.total_epochs = epochs;
        o.power = 2.0;
        base = lr::polynomial(o);
    } else if (c.lr_schedule == "onecycle") {
        lr::one_cycle::options_type o;
        o.max_lr = c.lr;
        o.total_epochs = epochs;
        base = lr::one_cycle(o);
    } else if (c.lr_schedule == "cyclical") {
        lr::cyclical::options_type o;
        o.base_lr = c.lr / 10.0;
        o.max_lr = c.lr;
        o.half_cycle_epochs = std::max(0.5, epochs / 4.0);
        base = lr::cyclical(o);
    } else {
        unknown_name("--lr-schedule", c.lr_schedule, lr_schedule_names());
    }
    if (c.warmup_epochs <= 0.0) return base;
    lr::warmup_options w;
    w.epochs = c.warmup_epochs;
    w.start_lr = c.lr / 10.0;
    return lr::warmup<std::function<double(std::uint64_t, std::uint64_t)>>(base, w);
}

/// "<file>" for rank 0, "<file>.rank<r>" for the others (each rank writes its own).
inline std::string per_rank(const std::string& file, int rank) {
    return rank == 0 ? file : file + ".rank" + std::to_string(rank);
}

inline std::vector<std::byte> as_bytes_vector(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    return {b, b + n};
}

}  // namespace detail

/// The model train_loop trains, on the host: the toolkit's nn::model built by the task, its softmax cross-entropy,
/// and hitch::cpu. A runner offers
///   layers()              the parameters as hitch::layer views (names, flags, matrix rows), in the model's order
///   device()              the hitch device they live on
///   configure(options)    what the device adds to data_parallel's options (a GPU's stream)
///   train_batch(loader, ready)    forward, loss and backward of the loaded batch, ready(i) as parameter i's gradient
///                         is final: the batch's mean loss
///   correct()             of the last training batch, the samples whose largest logit is their label
///   evaluate_batch(loader)        forward and loss of the loaded batch: its correct samples
///   buffers()             the model's buffers (batch-norm statistics), in host memory
class host_runner {
public:
    using device_type = hitch::cpu;

    host_runner(const task& t, std::size_t local_batch, std::uint64_t seed)
        : model_(t.build(local_batch, seed)), loss_(local_batch, model_.output_shape().size()) {}

    [[nodiscard]] std::vector<hitch::layer> layers() const {
        std::vector<hitch::layer> out;
        for (const auto& prm : model_.parameters())
            out.push_back({prm.name, hitch::tensor_view<float>(prm.value.data(), prm.value.size()),
                           hitch::tensor_view<float>(prm.gradient.data(), prm.gradient.size()),
                           prm.is_bias_or_norm ? hitch::layer_flags::bias_or_norm() : hitch::layer_flags{}, prm.rows});
        return out;
    }
    [[nodiscard]] hitch::cpu& device() noexcept { return device_; }
    template <class Options>
    void configure(Options& /*o*/) const {}
    double train_batch(const data::batch_loader<float>& loader, const std::function<void(std::size_t)>& ready) {
        const auto logits = model_.forward(loader.images(), loader.size(), nn::mode::train);
        const double batch_loss = loss_.forward(logits, loader.labels());
        model_.backward(loss_.gradient(), ready);
        return batch_loss;
    }
    [[nodiscard]] std::size_t correct() const { return loss_.correct(); }
    std::size_t evaluate_batch(const data::batch_loader<float>& loader) {
        const auto logits = model_.forward(loader.images(), loader.size(), nn::mode::eval);
        (void)loss_.forward(logits, loader.labels());
        return loss_.correct();
    }
    [[nodiscard]] const std::vector<nn::buffer<float>>& buffers() const { return model_.buffers(); }

private:
    nn::model<float> model_;
    nn::softmax_cross_entropy<float> loss_;
    hitch::cpu device_;
};

/// The training loop with the model `make_runner(local_batch)` returns (a host_runner, or gpu/runner.cuh's).
template <class X, class P, class C, class MakeRunner>
train_result train_loop(C& comm, const train_config& config, const task& t, MakeRunner&& make_runner) {
    using dp_t = hitch::data_parallel<any_optimizer, X, P, schedule_by_name>;
    const int rank = comm.rank();
    // With dedicated parameter servers the last ranks only serve: the data and the batch are split over the
    // workers, ranks 0 to p - 1 here.
    const int p = worker_count(config, comm.size());
    const bool serves_only = rank >= p;
    const std::size_t local_batch = config.batch_size / static_cast<std::size_t>(p);
    const data::dataset& train_set = *t.train;
    const data::dataset& test_set = *t.test;
    // Policies whose workers do not step together (a parameter server, Hogwild) must not meet in a collective
    // while training: a worker waiting in one would hold back the updates the others wait for. Rank 0 alone then
    // measures the test accuracy, on its own parameters, and the workers meet only when every one has finished.
    constexpr bool apart = hitch::asynchronous_policy<P>;

    // The workers' own communicator for evaluation and the figures at the end, when some ranks only serve
    // (collective over every rank, before data_parallel's own).
    std::optional<C> workers_comm;
    if (p != comm.size()) workers_comm.emplace(comm.split(serves_only ? 1 : 0, rank));
    C& workers = workers_comm ? *workers_comm : comm;

    auto runner = make_runner(local_batch);
    data::batch_loader<float> loader(train_set, t.norm, local_batch);
    data::sharded_sampler sampler(train_set.size(), serves_only ? 0 : rank, p, config.seed);
    // With --accumulate K an optimizer step takes K batches (micro-batches) of local_batch samples each; every
    // count below (steps per epoch, --max-steps, --eval-every, the progress) is of optimizer steps.
    const epoch_steps epoch_plan = steps_of_epoch(config, sampler.batches_per_epoch(local_batch));
    const std::size_t steps_per_epoch = epoch_plan.steps;

    const std::vector<hitch::layer> layers = runner.layers();

    hitch::train::timeline timeline(rank, !config.timeline.empty());
    typename dp_t::options o;
    o.optimizer = any_optimizer_options(config);
    o.compressor = make_compressor<X>(config, steps_per_epoch, p);
    o.sync = sync_options<P>(config);
    o.schedule = schedule_by_name({config.allreduce});
    o.learning_rate = [schedule = detail::make_lr_schedule(config), scale = lr_scale(config, p)](
                          std::uint64_t at, std::uint64_t per_epoch) { return scale * schedule(at, per_epoch); };
    o.steps_per_epoch = steps_per_epoch;
    o.bucket_bytes = static_cast<std::size_t>(config.bucket_mib * 1024.0 * 1024.0);
    o.timeline = config.timeline.empty() ? nullptr : &timeline;
    o.accumulation_steps = config.accumulate;
    o.clip_grad_norm = config.clip_grad_norm;
    o.zero_stage = config.zero;
    // hitch's stall inspector: rank 0 prints a line for each collective that waits past the threshold, naming the
    // ranks that have not come (the library never prints; its observer is how it tells).
    if (config.stall_warning_s >= 0.0) o.stall.warning_s = config.stall_warning_s;
    o.observer.stall = [](const hitch::stall_report& r) {
        std::fprintf(stderr, "%s\n", r.message().c_str());
        std::fflush(stderr);
    };
    o.observer.notice = [](const std::string& line) {
        std::fprintf(stderr, "%s\n", line.c_str());
        std::fflush(stderr);
    };
    runner.configure(o);
    // Every rank builds data_parallel from the same options, so a combination it refuses (config_error: --zero
    // under a policy that exchanges no gradients ...) is refused on every rank alike: the workers agree on it and
    // the lowest such rank alone reports it, as for a mistake on the command line. A dedicated server rank does
    // not wait for that (the workers' constructors wait for it to serve): it refuses without a word, rank 0 speaks.
    C agreement = workers.split(0, rank);
    std::optional<dp_t> constructed;
    std::string refused;
    try {
        constructed.emplace(comm, runner.device(), layers, o);
    } catch (const hitch::config_error& e) {
        refused = e.what();
    }
    if (serves_only && !refused.empty()) throw refused_configuration(refused, false);
    if (!serves_only) {
        const auto failed = hitch::comm::allgather_value(agreement, static_cast<char>(refused.empty() ? 0 : 1));
        if (const auto first = std::find(failed.begin(), failed.end(), char{1}); first != failed.end())
            throw refused_configuration(refused.empty() ? "another rank refused the configuration" : refused,
                                        first - failed.begin() == rank);
    }
    dp_t& dp = *constructed;
    if (dp.worker_count() != p || dp.serves_only() != serves_only)
        throw std::logic_error("the trainer and hitch::data_parallel disagree on which ranks are workers");
    if (serves_only) {
        dp.serve();  // until every worker has finished
        return {};
    }

    // Batch-norm running statistics are local to each rank; they are averaged before every evaluation and
    // checkpoint, as DDP broadcasts buffers.
    hitch::allreduce::group buffers_group(workers);
    const auto sync_buffers = [&] {
        for (const auto& b : runner.buffers())
            hitch::allreduce::allreduce(buffers_group, hitch::tensor_view<float>(b.value.data(), b.value.size()),
                                        hitch::allreduce::reduce_op::average);
    };

    const auto file_of = [&](const std::string& prefix) { return dp.checkpoint_path(prefix).string(); };
    // What a checkpoint holds beyond data_parallel's own: the data position and the batch-norm statistics.
    const auto save_to = [&](const std::string& prefix) {
        if (!apart) sync_buffers();
        std::vector<std::pair<std::string, std::vector<std::byte>>> extra;
        const auto where = sampler.tell();
        extra.emplace_back("data.position", detail::as_bytes_vector(&where, sizeof(where)));
        for (const auto& b : runner.buffers())
            extra.emplace_back("model." + b.name, detail::as_bytes_vector(b.value.data(), b.value.size_bytes()));
        dp.save(prefix, extra);
    };
    const auto restore_from = [&](const std::string& prefix) -> std::size_t {
        // --resume-ranks: a checkpoint of saved workers redistributed over these p (train/elastic.hpp).
        const int saved = config.resume_saved_ranks;
        const auto reader = dp.load(prefix, {.elastic = saved != 0, .saved_ranks = saved});
        const auto position = reader.section("data.position");
        data::sharded_sampler::position where{};
        if (position.size() != sizeof(where))
            throw std::runtime_error("--resume: the checkpoint's data position has the wrong size");
        std::memcpy(&where, position.data(), sizeof(where));
        if (saved != 0 && saved != p) {
            // The saved workers had each taken `index` samples of their shard, saved * index of the epoch in all;
            // these p go on from as many (whole batches of theirs), or start the next epoch where it was finished.
            const std::size_t saved_shard = train_set.size() / static_cast<std::size_t>(saved);
            const std::size_t taken = where.index * static_cast<std::size_t>(saved) / static_cast<std::size_t>(p);
            where.index = where.index >= saved_shard
                              ? sampler.shard_size()
                              : std::min(sampler.shard_size(), taken / local_batch * local_batch);
        }
        for (const auto& b : runner.buffers()) {
            const auto bytes = reader.section("model." + b.name);
            if (bytes.size() != b.value.size_bytes())
                throw std::runtime_error("--resume: buffer " + b.name + " has the wrong size in the checkpoint");
        }
        sampler.seek(where);
        for (const auto& b : runner.buffers())
            std::memcpy(b.value.data(), reader.section("model." + b.name).data(), b.value.size_bytes());
        return where.epoch;
    };

    std::size_t first_epoch = 0;
    bool resumed = false;  // the metrics file then goes on where the checkpoint's run left it
    if (config.resume == "auto") {
        // The sets every worker has a file of, newest first, then the end-of-epoch prefix itself; the first that
        // loads on every worker wins (a load that fails, fails on every worker alike: data_parallel agrees).
        std::array<std::uint64_t, 16> mine{};
        const auto steps = own_checkpoint_steps(config.checkpoint, file_of);
        const std::size_t n = std::min(steps.size(), mine.size());
        std::copy(steps.end() - static_cast<std::ptrdiff_t>(n), steps.end(), mine.begin());
        const auto lists = hitch::comm::allgather_value(workers, mine);
        std::vector<std::string> candidates;
        for (auto it = mine.rbegin(); it != mine.rend(); ++it) {
            if (*it == 0) continue;
            if (std::all_of(lists.begin(), lists.end(),
                            [&](const auto& l) { return std::find(l.begin(), l.end(), *it) != l.end(); }))
                candidates.push_back(step_prefix(config.checkpoint, *it));
        }
        candidates.push_back(config.checkpoint);
        for (const std::string& prefix : candidates) {
            const bool there = std::filesystem::exists(file_of(prefix));
            if (hitch::comm::any_of(workers, !there)) continue;
            try {
                first_epoch = restore_from(prefix);
                if (rank == 0)
                    std::printf("--resume auto: from %s (step %llu)\n", prefix.c_str(),
                                static_cast<unsigned long long>(dp.step_index()));
                resumed = true;
                break;
            } catch (const hitch::error& e) {
                // Rank 0 says why; a rank whose own file failed also says so (the others only learn that it did).
                const bool own = dynamic_cast<const hitch::train::checkpoint_set_error*>(&e) == nullptr &&
                                 dynamic_cast<const hitch::mismatch_error*>(&e) == nullptr;
                if (rank == 0 || own)
                    std::printf("--resume auto: %s is unusable, trying an older one: %s%s\n", prefix.c_str(),
                                rank == 0 ? "" : ("rank " + std::to_string(rank) + ": ").c_str(), e.what());
            }
        }
        if (!resumed && rank == 0)
            std::printf("--resume auto: no usable checkpoint under %s; starting from the beginning\n",
                        config.checkpoint.c_str());
        std::fflush(stdout);
    } else if (!config.resume.empty()) {
        first_epoch = restore_from(config.resume);
        resumed = true;
    }

    std::ofstream metrics_file;
    if (!config.metrics.empty()) {
        metrics_file.open(detail::per_rank(config.metrics, rank), resumed ? std::ios::app : std::ios::trunc);
        if (!metrics_file)
            throw std::runtime_error("--metrics: cannot write " + detail::per_rank(config.metrics, rank));
    }
    hitch::train::metrics_writer metrics(metrics_file);
    progress bar(rank == 0, config.progress_bar, config.epochs, steps_per_epoch);
    bar.set_first_epoch(first_epoch);

    // Each rank evaluates a contiguous share of the test set; the counts are summed. Apart (see above), rank 0
    // evaluates all of it alone.
    const int evaluators = apart ? 1 : p;
    const auto evaluate = [&]() -> double {
        if (!apart) sync_buffers();
        const std::size_t n = test_set.size();
        const std::size_t begin = n * static_cast<std::size_t>(rank) / static_cast<std::size_t>(evaluators);
        const std::size_t end = n * static_cast<std::size_t>(rank + 1) / static_cast<std::size_t>(evaluators);
        data::batch_loader<float> eval_loader(test_set, t.norm, local_batch);
        std::uint64_t correct = 0;
        for (std::size_t first = begin; first < end; first += local_batch) {
            const std::size_t count = std::min(local_batch, end - first);
            eval_loader.load_range(first, count);
            correct += runner.evaluate_batch(eval_loader);
        }
        std::uint64_t total = correct;
        if (!apart) {
            total = 0;
            for (std::uint64_t c : hitch::comm::allgather_value(workers, correct)) total += c;
        }
        return static_cast<double>(total) / static_cast<double>(n);
    };

    using clock = std::chrono::steady_clock;
    double train_seconds = 0.0;
    std::uint64_t samples = 0;
    double test_accuracy = 0.0;
    std::size_t steps_done = 0;
    double staleness_sum = 0.0;
    std::uint64_t staleness_max = 0;
    // The straggler of a step: a fixed rank, or (--slow-rank any) one worker drawn from the step index, the same
    // draw on every rank, so each worker is slow in about 1 of every `workers` steps.
    const auto slowed_now = [&](std::uint64_t step) {
        if (config.slow_ms <= 0.0) return false;
        if (config.slow_rank != train_config::any_rank) return rank == config.slow_rank;
        std::uint64_t z = step + 0x9e3779b97f4a7c15ull;  // splitmix64
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        return static_cast<int>(z % static_cast<std::uint64_t>(dp.worker_count())) == rank;
    };
    bool stop = false;
    std::size_t epoch = first_epoch;
    for (; epoch < config.epochs && !stop; ++epoch) {
        const auto epoch_start = clock::now();
        double loss_sum = 0.0;
        std::size_t correct = 0, seen = 0, micro_batches = 0;
        while (true) {
            // Where the epoch stands, from the sampler, so that a run resumed within an epoch counts on from there.
            const std::size_t micro_batch = sampler.tell().index / local_batch;
            if (micro_batch >= epoch_plan.micro_batches) break;  // the batches left are fewer than --accumulate
            const std::size_t step_in_epoch = micro_batch / config.accumulate;
            const auto indices = sampler.next(local_batch);
            if (indices.empty()) break;
            const auto step_start = clock::now();
            std::optional<hitch::train::timeline::scoped_span> compute;
            compute.emplace(timeline.enabled() ? &timeline : nullptr, "forward + backward", "compute");
            loader.load(indices);
            const double batch_loss = runner.train_batch(loader, [&](std::size_t i) { dp.gradient_ready(i); });
            compute.reset();
            if (slowed_now(dp.step_index())) {
                const hitch::train::timeline::scoped_span slow(timeline.enabled() ? &timeline : nullptr, "--slow-ms",
                                                               "compute");
                std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(config.slow_ms));
            }
            hitch::train::step_metrics m = dp.step(batch_loss);
            train_seconds += std::chrono::duration<double>(clock::now() - step_start).count();
            samples += loader.size() * static_cast<std::uint64_t>(p);
            loss_sum += batch_loss;
            correct += runner.correct();
            seen += loader.size();
            ++micro_batches;
            if (m.accumulated) continue;  // not an optimizer step yet: nothing to evaluate, write or show
            staleness_sum += static_cast<double>(dp.staleness());
            staleness_max = std::max(staleness_max, dp.staleness());
            ++steps_done;
            const bool last = step_in_epoch + 1 == steps_per_epoch;
            stop = config.max_steps != 0 && steps_done >= config.max_steps;
            if ((last || stop || (config.eval_every != 0 && (m.step + 1) % config.eval_every == 0)) &&
                (!apart || rank == 0)) {
                test_accuracy = evaluate();
                m.accuracy = test_accuracy;
            }
            if (metrics_file.is_open()) metrics.write(m);
            if (config.checkpoint_every != 0 && (m.step + 1) % config.checkpoint_every == 0) {
                save_to(step_prefix(config.checkpoint, m.step + 1));
                prune_own_checkpoints(config.checkpoint, 3, file_of);
            }
            bar.step(epoch, step_in_epoch, loss_sum / static_cast<double>(micro_batches),
                     static_cast<double>(correct) / static_cast<double>(std::max<std::size_t>(seen, 1)),
                     static_cast<double>(samples) / std::max(train_seconds, 1e-9));
            if (stop) break;
        }
        if (!stop) sampler.next_epoch();
        bar.epoch(epoch, loss_sum / static_cast<double>(std::max<std::size_t>(micro_batches, 1)), test_accuracy,
                  std::chrono::duration<double>(clock::now() - epoch_start).count());
        if (config.checkpoint_every != 0) {
            // The epoch's end (again when its last step has just saved: the sampler has moved on to the next epoch).
            save_to(step_prefix(config.checkpoint, dp.step_index()));
            prune_own_checkpoints(config.checkpoint, 3, file_of);
        } else if (!config.checkpoint.empty()) {
            save_to(config.checkpoint);
        }
    }
    dp.finish();  // a parameter server's workers: wait until every one has finished
    if (!config.timeline.empty()) {
        std::ofstream out(detail::per_rank(config.timeline, rank));
        timeline.write(out);
    }
    train_result r;
    r.test_accuracy = test_accuracy;
    r.train_seconds = train_seconds;
    r.samples_per_s = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0.0;
    r.epochs_run = epoch - first_epoch;
    r.optimizer_state_bytes = dp.optimizer_state_bytes();
    constexpr auto path = hitch::compress::aggregation_path_of<X>;
    if constexpr (path == hitch::compress::aggregation_path::compressed_ring ||
                  path == hitch::compress::aggregation_path::allgather) {
        if (p > 1)  // the exchanges the buckets' last steps ran (automatic may pick per bucket size)
            for (const std::string_view e : dp.bucket_exchanges())
                if (!e.empty() && std::find(r.exchange.begin(), r.exchange.end(), e) == r.exchange.end())
                    r.exchange.emplace_back(e);
    } else {
        r.exchange = o.schedule.used();  // dp holds a copy of o.schedule; copies share what they record
    }
    if (uses_server(config)) r.exchange.emplace_back("sharded_server");
    for (const std::string_view e : dp.bucket_exchanges()) r.bucket_exchanges.emplace_back(e);
    // Every rank reports the slowest rank's time (the run is as fast as its slowest replica).
    const auto times = hitch::comm::allgather_value(workers, r.train_seconds);
    r.train_seconds = *std::max_element(times.begin(), times.end());
    r.samples_per_s = r.train_seconds > 0 ? static_cast<double>(samples) / r.train_seconds : 0.0;
    struct staleness_totals {
        double sum;
        std::uint64_t steps, max, dropped;
    };
    double all_sum = 0.0, all_steps = 0.0;
    for (const auto& s : hitch::comm::allgather_value(
             workers, staleness_totals{staleness_sum, steps_done, staleness_max, dp.dropped_gradients()})) {
        all_sum += s.sum;
        all_steps += static_cast<double>(s.steps);
        r.staleness_max = std::max(r.staleness_max, s.max);
        r.dropped_gradients += s.dropped;
    }
    r.staleness_mean = all_steps > 0.0 ? all_sum / all_steps : 0.0;
    return r;
}

template <class X, class P, class C>
train_result train_with(C& comm, const train_config& config, const task& t) {
    return train_loop<X, P, C>(comm, config, t,
                               [&](std::size_t local_batch) { return host_runner(t, local_batch, config.seed); });
}

}  // namespace hitch_examples
