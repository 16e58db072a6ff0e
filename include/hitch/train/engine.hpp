#pragma once
// The engine behind hitch::data_parallel (train/data_parallel.hpp): one per (optimizer, codec, sync policy,
// schedule, communicator, device, parameter type). It owns the buckets and their worker thread, the master
// weights, the optimizer, the loss scaler and, for parameter-server policies, the server runtime, and it models
// the step contexts the sync policy drives (hitch/concepts/step_context.hpp).
//
// On a device the host cannot read (a GPU), the buckets, the intake of the gradients and the exchange come from the
// device's own machinery (train/device_training.hpp: hitch/cuda/train/ for hitch::cuda::device), and everything else
// here (the policy's step, agreement, accumulation windows, unused layers, joins, checkpoints, metrics) is shared:
// the engine reaches device memory only through that machinery, the master weights and the optimizer.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include "hitch/allreduce/automatic.hpp"
#include "hitch/allreduce/collectives.hpp"
#include "hitch/allreduce/recursive_doubling.hpp"
#include "hitch/allreduce/ring.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/amp/loss_scaler.hpp"
#include "hitch/amp/mixed_precision.hpp"
#include "hitch/amp/nonfinite.hpp"
#include "hitch/comm/agree.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/concepts/device.hpp"
#include "hitch/concepts/optimizer.hpp"
#include "hitch/concepts/sync_policy.hpp"
#include "hitch/core/crc32c.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/optim/model_optimizer.hpp"
#include "hitch/train/bucket_pipeline.hpp"
#include "hitch/train/buffers.hpp"
#include "hitch/train/checkpoint.hpp"
#include "hitch/train/checkpoint_agreement.hpp"
#include "hitch/train/clipping.hpp"
#include "hitch/train/device_training.hpp"
#include "hitch/train/elastic.hpp"
#include "hitch/train/engine_checkpoint.hpp"
#include "hitch/train/engine_interface.hpp"
#include "hitch/train/gradient_exchange.hpp"
#include "hitch/train/gradient_intake.hpp"
#include "hitch/train/layer_agreement.hpp"
#include "hitch/train/layer_reports.hpp"
#include "hitch/train/master_weights.hpp"
#include "hitch/train/metrics.hpp"
#include "hitch/train/optimizer_stage.hpp"
#include "hitch/train/options.hpp"
#include "hitch/train/server_link.hpp"
#include "hitch/train/shared_parameters.hpp"
#include "hitch/train/timeline.hpp"

namespace hitch {

namespace train::detail {

using hitch::detail::concat;

/// The buckets and their exchange: gradient_exchange on host devices, the device's own machinery elsewhere.
template <class D, bool Host = host_device<D>>
struct bucket_store_of {
    template <class X, class S, class C, class Param>
    using type = gradient_exchange<X, S, C>;
};
template <class D>
struct bucket_store_of<D, false> {
    template <class X, class S, class C, class Param>
    using type = typename device_training<D>::template gradients<X, S, C, Param>;
};

/// Whether data_parallel runs sync policy P on device D (the device path refuses the server and shared-memory
/// policies at construction: train/device_training.hpp).
template <class P, class D>
inline constexpr bool runs_policy_on = host_device<D> || (!sync::server_policy<P> && !shared_memory_policy<P>);

template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
class engine final : public engine_base {
public:
    using options_type = data_parallel_options<O, X, P, S>;
    using user_layer = typename master_weights<Param, D>::user_layer;
    static constexpr bool on_host = host_device<D>;
    using bucket_store = typename bucket_store_of<D>::template type<X, S, C, Param>;
    using server_link_type = std::conditional_t<on_host, server_link<P, O, X, C, D>, no_server_link>;

    engine(C& comm, D& dev, std::vector<user_layer> layers, const options_type& options)
        : options_((options.validate(), check_for_device(options), options)),
          device_(begin_on(dev, options_)),
          control_(comm.split(0, comm.rank())),
          self_(asynchronous_policy<P> ? std::optional<C>(comm.split(comm.rank(), 0)) : std::nullopt),
          nodes_(node_layout_of(control_)),
          group_(comm, options_.observer, options_.stall),
          weights_(dev, agreed_layers(control_, std::move(layers))),
          buckets_(make_buckets(dev)),
          policy_(options_.sync),
          timeline_(options_.timeline),
          pipeline_([this](std::size_t b) { run_bucket(b); }) {
        static_assert(allreduce::check_schedule<S, C>());
        if (options_.broadcast_parameters && control_.size() > 1) {
            buckets_.broadcast_parameters(0);
            weights_.write_back();
        }
        reports_.emplace(layers32(), options_.find_unused_layers);
        ready_in_bucket_.assign(buckets_.size(), 0);
        if constexpr (on_host)  // the device path refused zero_stage (check_for_device)
            start_zero(dev);
        if (options_.uneven_inputs && (!P::exchanges_gradients || asynchronous_policy<P>))
            throw config_error(concat("hitch::data_parallel: option uneven_inputs = true lets ranks join the steps ",
                                      "of ranks that all-reduce gradients every step; the sync policy '", P::name,
                                      "' does not (use sync::hard, or give every rank as many steps)"));
        std::optional<std::vector<optim::piece>> pieces;
        if (options_.zero_stage != 0) pieces = weights_.sharded() ? weights_.optimizer_pieces() : own_pieces_;
        optimizer_.emplace(
            options_.optimizer,
            std::vector<hitch::layer>(weights_.optimizer_layers().begin(), weights_.optimizer_layers().end()), dev,
            options_.execution, std::move(pieces));
        if (options_.loss_scaling) scaler_.emplace(agreement(), options_.scaler);
        if constexpr (on_host) intake_.emplace(weights_, scaler_, options_.accumulation_steps, options_.execution);
        if constexpr (shared_memory_policy<P> && on_host) {
            static_assert(shares_address_space<C>,
                          "hitch::data_parallel: this sync policy (Hogwild) updates one parameter array shared by "
                          "every rank; it needs a communicator whose ranks are threads of one process (comm::local)");
            if constexpr (shares_address_space<C>)
                shared_ = train::detail::shared_parameters::share(control_, layers32(), 1);
        }
        if (options_.overlap && P::exchanges_gradients) pipeline_.start(control_);
        if constexpr (on_host) {
            server_.start(comm, dev, layers32(), options_.optimizer, options_.compressor, policy_, options_.execution);
            if (server_.active()) weights_.write_back();
        } else {
            buckets_.end_step();  // what the model queues next follows the broadcast parameters
        }
        waited_until_last_step_ = group_.waited();
        last_step_end_ = std::chrono::steady_clock::now();
    }

    // ---- the public operations --------------------------------------------------------------------------------

    void gradient_ready(std::size_t layer) override {
        reports_->report(layer, step_);
        if constexpr (on_host) {
            if (options_.check_gradient_contract) reports_->crc(layer) = user_gradient_crc(layer);
        } else {
            buckets_.gradient_ready(layer);  // an event on the model's stream; the host does not wait
        }
        mark_ready(layer);
    }

    step_metrics step(std::optional<double> loss) override {
        if (server_.serves_only())
            throw config_error(concat("hitch::data_parallel::step: rank ", rank(),
                                      " is a dedicated parameter server; call serve() on it instead of step()"));
        if (server_.finished())
            throw config_error("hitch::data_parallel::step: this worker has finished (finish() was called)");
        if (!intake().at_boundary()) return accumulate(loss);
        const auto start = std::chrono::steady_clock::now();
        compute_ms_ += ms(last_step_end_, start);
        if (step_ == 0 || !first_step_) first_step_ = window_start_.value_or(last_step_end_);
        lr_ = options_.learning_rate(step_, options_.steps_per_epoch);
        grad_norm_.reset();
        // Bytes sent and comm_ns_ count from the end of the previous step: buckets launched by gradient_ready
        // during this step's backward pass belong to it.
        sync::step_result result;
        try {
            if (!joined_) count_training_ranks();  // join() counted before this step
            if constexpr (runs_policy_on<P, D>)
                result = policy_.step(*this);
            else
                throw std::logic_error("hitch::data_parallel: a sync policy the device refuses reached step()");
        } catch (...) {
            reset_step();
            end_window();
            if constexpr (!on_host) buckets_.end_step();
            compute_ms_ = 0.0;
            (void)buckets_.take_bytes_sent();
            comm_ns_.store(0);
            waited_until_last_step_ = group_.waited();
            agreement_wait_ns_ = 0;
            throw;
        }
        reset_step();
        const std::uint64_t micro_batches = intake().taken() + 1;
        if (loss) {
            loss_sum_ += *loss;
            ++losses_;
        }
        const std::optional<double> mean_loss =
            losses_ == 0 ? std::nullopt : std::optional<double>(loss_sum_ / static_cast<double>(losses_));
        end_window();
        if (!buffers_.empty() && result.synchronized) sync_buffers(false);
        if constexpr (!on_host) buckets_.end_step();  // the model's stream follows the updated parameters
        ++step_;
        ++since_replica_check_;
        if (options_.replica_check_interval != 0 && result.synchronized &&
            since_replica_check_ >= options_.replica_check_interval) {
            check_replicas();
            since_replica_check_ = 0;
        }
        step_metrics m;
        m.step = step_ - 1;
        m.epoch = (step_ - 1) / options_.steps_per_epoch;
        m.rank = control_.rank();
        m.loss = mean_loss;
        m.lr = lr_;
        m.loss_scale = scaler_ ? static_cast<double>(scaler_->scale()) : 1.0;
        m.skipped = !result.applied;
        m.bytes_sent = buckets_.take_bytes_sent();
        m.comm_ms = static_cast<double>(comm_ns_.exchange(0)) * 1e-6;
        const seconds_f waited = group_.waited();
        if (options_.check_collectives)
            m.wait_ms =
                (waited - waited_until_last_step_).count() * 1e3 + static_cast<double>(agreement_wait_ns_) * 1e-6;
        waited_until_last_step_ = waited;
        agreement_wait_ns_ = 0;
        m.compute_ms = compute_ms_;
        m.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - *first_step_).count();
        m.grad_norm = result.applied ? grad_norm_ : std::nullopt;
        m.micro_batches = micro_batches;
        compute_ms_ = 0.0;
        if (options_.metrics != nullptr) metrics_writer(*options_.metrics).write(m);
        staleness_ = result.staleness;
        if (result.applied) ++histogram_[std::min<std::size_t>(result.staleness, histogram_.size() - 1)];
        dropped_ += result.dropped;
        last_step_end_ = std::chrono::steady_clock::now();
        return m;
    }

    [[nodiscard]] double learning_rate() const override {
        return options_.learning_rate(step_, options_.steps_per_epoch);
    }
    [[nodiscard]] float loss_scale() const override { return scaler_ ? scaler_->scale() : 1.0f; }
    [[nodiscard]] bool accumulation_boundary() const override { return intake().at_boundary(); }

    void register_buffers(std::vector<buffer> buffers) override {
        require_idle("register_buffers");
        if constexpr (asynchronous_policy<P>) {
            throw config_error(concat("hitch::data_parallel::register_buffers: the sync policy '", P::name,
                                      "' lets ranks step on their own, so there is no step at which buffers could be "
                                      "made to agree; use a synchronous policy (hard, local_sgd)"));
        } else {
            buffers_.add(control_, std::move(buffers), D::space);
            sync_buffers(true);  // every rank starts from rank 0's values, as DDP's constructor makes them
        }
    }
    [[nodiscard]] std::uint64_t step_index() const override { return step_; }
    [[nodiscard]] std::uint64_t staleness() const override { return staleness_; }
    [[nodiscard]] std::vector<std::uint64_t> staleness_histogram() const override {
        std::vector<std::uint64_t> h = histogram_;
        while (h.size() > 1 && h.back() == 0) h.pop_back();
        return h;
    }
    [[nodiscard]] std::uint64_t dropped_gradients() const override { return dropped_; }
    [[nodiscard]] bool serves_only() const override { return server_.serves_only(); }
    [[nodiscard]] int worker_count() const override { return server_.workers(size()); }
    void serve() override { server_.serve(); }
    void finish() override { server_.finish(); }
    void join() override;
    [[nodiscard]] int rank() const override { return control_.rank(); }
    [[nodiscard]] int size() const override { return control_.size(); }
    [[nodiscard]] const node_layout& nodes() const override { return nodes_; }
    [[nodiscard]] std::size_t bucket_count() const override { return buckets_.size(); }
    [[nodiscard]] std::vector<std::string_view> bucket_exchanges() const override {
        std::vector<std::string_view> out;
        for (std::size_t b = 0; b < buckets_.size(); ++b) {
            const auto& e = buckets_[b].exchange;
            out.push_back(e ? compress::name(*e) : std::string_view());
        }
        return out;
    }
    [[nodiscard]] std::size_t optimizer_state_bytes() const override { return optimizer_->state_bytes(); }
    [[nodiscard]] std::size_t master_weight_bytes() const override { return weights_.master_bytes(); }
    [[nodiscard]] std::uint64_t parameter_hash() const override { return weights_.hash(); }

    [[nodiscard]] std::filesystem::path checkpoint_path(const std::filesystem::path& prefix) const override {
        return prefix.string() + concat(".rank", rank(), "-of-", size());
    }

    void save(const std::filesystem::path& prefix,
              const std::vector<std::pair<std::string, std::vector<std::byte>>>& extra) override {
        require_idle("save");
        // Server policies' workers save on their own schedules: their files record no common generation.
        const std::uint64_t generation = server_.active() ? 0 : agree_on_generation(control_);
        checkpoint_writer w;
        write_meta(w, identity(), {step_, generation});
        write_parameters(w, weights_.optimizer_layers(), copies());
        if constexpr (on_host)
            if (weights_.sharded()) write_model_parameters(w, weights_.model_parameters());
        w.add_stream("hitch.optimizer", [&](std::ostream& os) { optimizer_->save(os); });
        if constexpr (on_host)
            write_codec_states(w, buckets_.codec(), buckets_.size(),
                               [&](std::size_t b) -> const auto& { return *buckets_[b].codec_state; });
        else
            write_codec_blobs(w, buckets_.size(),
                              [&](std::size_t b, std::vector<std::byte>& one) { buckets_.save_codec_state(b, one); });
        if (scaler_) write_scaler(w, scaler_->state());
        write_sync(w, policy_);
        write_schedule(w, options_.schedule);
        server_.save(w, prefix);
        for (const auto& [name, bytes] : extra) {
            if (name.rfind("hitch.", 0) == 0)
                throw config_error(concat("hitch::data_parallel::save: section name '", name,
                                          "' is reserved (sections of your own must not start with 'hitch.')"));
            w.add(name, bytes);
        }
        w.commit(checkpoint_path(prefix));
    }

    checkpoint_reader load(const std::filesystem::path& prefix, const load_options& options) override {
        require_idle("load");
        if (options.elastic && server_.active())
            throw config_error("hitch::data_parallel::load: the parameter-server policies cannot load elastically");
        if (!server_.active()) {
            // Every rank reads and checks its own file, then all agree (the same save, all readable) before any
            // rank changes anything; a rank that fails before the agreement still takes part, with its error.
            std::optional<checkpoint_reader> r;
            bool agreed = false;
            const auto agree = [&](const checkpoint_position& at) {
                agreed = true;
                agree_on_files(control_, prefix.string(), at, nullptr);
            };
            try {
                const int saved = !options.elastic          ? size()
                                  : options.saved_ranks > 0 ? options.saved_ranks
                                                            : saved_ranks(prefix);
                if (saved != size()) {
                    r.emplace(load_elastic(prefix, saved, agree));
                } else {
                    if (!options.elastic) refuse_other_rank_count(prefix);
                    r.emplace(checkpoint_path(prefix));
                    load_from(*r, agree);
                }
            } catch (...) {
                if (!agreed) agree_on_files(control_, prefix.string(), {}, std::current_exception());
                throw;
            }
            if constexpr (!on_host) buckets_.end_step();  // the model's stream follows the loaded parameters
            return std::move(*r);
        }
        // A parameter server: every worker and every server checks its part before anyone commits.
        std::optional<checkpoint_reader> r;
        std::exception_ptr own;
        std::span<const std::byte> client;
        try {
            r.emplace(checkpoint_path(prefix));
            (void)read_meta(*r, identity());  // server policies: the staged load below is their agreement
            (void)read_parameters(*r, weights_.optimizer_layers());
            (void)read_sync(*r, policy_);
            client = r->section("hitch.server.client");
        } catch (...) {
            own = std::current_exception();
        }
        server_.load(prefix, own, client, [&] { load_from(*r); });
        return std::move(*r);
    }

    // ---- the step context the sync policy drives (see hitch/concepts/sync_policy.hpp) -------------------------

    bool finish_gradient_exchange() {
        settle_reports();
        for (std::size_t k = 0; k < layers32().size(); ++k) mark_ready(k);
        pipeline_.finish();
        if constexpr (!on_host) buckets_.hand_over();  // the optimizer's stream follows the exchanged gradients
        return agree_on_step(control_);
    }

    bool check_local_gradients() {
        settle_reports();
        for (std::size_t b = 0; b < buckets_.size(); ++b) prepare_bucket(b, /*pack=*/false);
        if constexpr (!on_host) buckets_.hand_over();
        return agree_on_step(control_);
    }

    void apply_optimizer() {
        auto span = trace("optimizer", "compute");
        const std::span<const unsigned char> skip = unused_everywhere();
        rescale_for_joined_ranks(skip);
        if (options_.clip_grad_norm > 0.0) clip_gradients(skip);
        const auto update = [&] {
            optimizer_->step(static_cast<float>(lr_), skip, [&](std::span<double> sums) { sum_over_ranks(sums); });
            weights_.write_back();  // sharded: this rank's pieces only
        };
        if constexpr (on_host)
            update();
        else
            buckets_.device_span("optimizer", update);  // a span of the device's own time on the timeline
        if constexpr (on_host) allgather_shards();
    }

    /// ZeRO: every rank gets every rank's updated pieces of the parameters.
    void allgather_shards()
        requires on_host
    {
        if (optimizer_->sharded()) {
            auto gather = trace("all-gather parameters", "comm");
            const auto start = std::chrono::steady_clock::now();
            if constexpr (master_weights<Param, D>::mixed_precision) {
                const auto views = weights_.model_parameters();
                buckets_.allgather_parameters(std::span<const tensor_view<Param>>(views));
            } else {
                std::vector<tensor_view<float>> views;
                for (const hitch::layer& l : layers32()) views.push_back(l.params);
                buckets_.allgather_parameters(std::span<const tensor_view<float>>(views));
            }
            comm_ns_ += ns(start, std::chrono::steady_clock::now());
        }
    }

    void average_parameters(bool with_state) {
        auto span = trace("average parameters", "comm");
        const auto start = std::chrono::steady_clock::now();
        buckets_.average_parameters(options_.schedule);
        if (with_state)
            for (std::size_t k = 0; k < layers32().size(); ++k)
                for (tensor_view<float> buffer : optimizer_->full().state(k).buffers())
                    buckets_.average(buffer, options_.schedule);
        weights_.write_back();
        comm_ns_ += ns(start, std::chrono::steady_clock::now());
    }

    // parameter_context. On a device the host cannot read, a policy reads and rewrites host copies of the FP32
    // parameters: parameters() copies them from the device, parameters_changed() copies them back.
    [[nodiscard]] std::span<const hitch::layer> parameters() {
        if constexpr (on_host) {
            return layers32();
        } else {
            refresh_host_parameters();
            return host_layers_;
        }
    }
    void average(std::span<float> buffer) {
        auto span = trace("average", "comm");
        const auto start = std::chrono::steady_clock::now();
        buckets_.average(tensor_view<float>(buffer.data(), buffer.size()), options_.schedule);
        comm_ns_ += ns(start, std::chrono::steady_clock::now());
    }
    void parameters_changed() {
        if constexpr (!on_host) restore_host_parameters();
        weights_.write_back();
    }
    bool prepare_local_gradients() {
        settle_reports();
        for (std::size_t b = 0; b < buckets_.size(); ++b) prepare_bucket(b, /*pack=*/false);
        if constexpr (!on_host) buckets_.hand_over();
        return agree_on_step(agreement());
    }

    // shared_memory_context (policies that declare shares_memory, over communicators that share an address space)
    [[nodiscard]] std::span<const hitch::layer> shared_parameters() const
        requires shared_memory_policy<P>
    {
        return shared_.layers();
    }
    std::atomic<std::uint64_t>& shared_updates()
        requires shared_memory_policy<P>
    {
        return shared_.updates();
    }

    // server_context (parameter-server policies)
    sync::server_reply exchange_with_server(const sync::server_request& request)
        requires server_link_type::possible
    {
        if (request.push_gradients && options_.clip_grad_norm > 0.0) clip_gradients({});
        auto span = trace("parameter server", "comm");
        const auto start = std::chrono::steady_clock::now();
        const sync::server_reply r = server_.exchange(request, lr_);
        if (r.pulled) weights_.write_back();
        comm_ns_ += ns(start, std::chrono::steady_clock::now());
        return r;
    }

private:
    using bucket = typename gradient_exchange<X, S, C>::bucket;

    // ---- the device ---------------------------------------------------------------------------------------------

    /// Refuses, before anything is built, what the device does not run (train/device_training.hpp).
    static bool check_for_device(const options_type& o) {
        if constexpr (on_host)
            check_host_options(o, D::name);
        else
            check_device_options(o, D::name);
        return true;
    }
    /// The device, once the work queued on the model's stream (its parameters) is done.
    static D* begin_on(D& dev, const options_type& o) {
        if constexpr (!on_host) device_training<D>::begin(dev, o.compute_stream);
        return &dev;
    }
    bucket_store make_buckets(D& dev) {
        if constexpr (on_host) {
            return bucket_store(group_, options_.compressor, weights_.layers(), options_.bucket_bytes,
                                options_.check_collectives, options_.timeline, nodes_);
        } else {
            device_settings s;
            s.bucket_bytes = options_.bucket_bytes;
            s.check_collectives = options_.check_collectives;
            s.trace = options_.timeline;
            s.nodes = nodes_;
            s.window = options_.accumulation_steps;
            s.compute_stream = options_.compute_stream;
            return bucket_store(dev, group_, options_.compressor, options_.schedule, weights_, s);
        }
    }
    /// ZeRO (options.zero_stage): the reduce-scatter and this rank's pieces of the buckets.
    void start_zero(D& dev)
        requires on_host
    {
        if (options_.zero_stage == 0) return;
        if (!P::exchanges_gradients || asynchronous_policy<P>)
            throw config_error(concat("hitch::data_parallel: option zero_stage = ", options_.zero_stage,
                                      " shards the optimizer over ranks that exchange gradients every step; the "
                                      "sync policy '",
                                      P::name, "' does not (use sync::hard)"));
        if (options_.zero_stage == 2 && !plain_float_v<X>)
            throw config_error(concat("hitch::data_parallel: option zero_stage = 2 reduce-scatters plain FP32 ",
                                      "gradients; the compressor '", X::name,
                                      "' needs zero_stage = 1 (its exchange stays as it is)"));
        buckets_.set_reduce_scatter(options_.zero_stage == 2);
        own_pieces_ = buckets_.own_pieces();
        if constexpr (master_weights<Param, D>::mixed_precision) weights_.shard(dev, own_pieces_);
    }

    /// The accumulation window's bookkeeping: the host intake's, or the device machinery's.
    [[nodiscard]] auto& intake() noexcept {
        if constexpr (on_host)
            return *intake_;
        else
            return buckets_;
    }
    [[nodiscard]] const auto& intake() const noexcept {
        if constexpr (on_host)
            return *intake_;
        else
            return buckets_;
    }

    /// Copies between the layers' memory and the host (checkpoints, buffers).
    struct device_copies {
        D* dev;
        void to_host(void* dst, const void* src, std::size_t bytes) const {
            if (bytes != 0) dev->copy_to_host(dst, src, bytes);
        }
        void from_host(void* dst, const void* src, std::size_t bytes) const {
            if (bytes != 0) dev->copy_from_host(dst, src, bytes);
        }
    };
    [[nodiscard]] auto copies() const noexcept {
        if constexpr (on_host)
            return memcpy_copies{};
        else
            return device_copies{device_};
    }

    /// parameter_context on a device: host copies of the FP32 parameters (waits for the device's stream).
    void refresh_host_parameters() {
        if (host_layers_.empty()) {
            host_values_.resize(layers32().size());
            for (std::size_t k = 0; k < layers32().size(); ++k) {
                const hitch::layer& l = layers32()[k];
                host_values_[k].assign(l.size(), 0.0f);
                host_layers_.push_back({l.name, hitch::view(host_values_[k]), {}, l.flags, l.rows});
            }
        }
        for (std::size_t k = 0; k < layers32().size(); ++k)
            copies().to_host(host_values_[k].data(), layers32()[k].params.data(), layers32()[k].size() * sizeof(float));
    }
    void restore_host_parameters() {
        if (host_layers_.empty()) return;  // parameters() was never asked for: nothing was rewritten
        for (std::size_t k = 0; k < layers32().size(); ++k)
            copies().from_host(layers32()[k].params.data(), host_values_[k].data(),
                               layers32()[k].size() * sizeof(float));
    }

    /// Restores everything of this rank's own checkpoint file; validates every section before it changes anything.
    void load_from(const checkpoint_reader& r,
                   const std::function<void(const checkpoint_position&)>& before_change = nullptr);
    /// Restores a checkpoint of `saved` ranks on this run's ranks (train/elastic.hpp); validates every saved rank's
    /// file before it changes anything. Returns the reader of saved rank rank() mod `saved`.
    checkpoint_reader load_elastic(const std::filesystem::path& prefix, int saved,
                                   const std::function<void(const checkpoint_position&)>& before_change);
    /// This rank's file is missing and files of another rank count are there: says so, and how to load them.
    void refuse_other_rank_count(const std::filesystem::path& prefix) const {
        if (std::filesystem::exists(checkpoint_path(prefix))) return;
        const auto found = checkpoint_files(prefix);
        if (found.empty() || found.contains(size())) return;
        std::string counts;
        for (const auto& [p, ranks] : found) counts += concat(counts.empty() ? "" : " and ", p);
        throw mismatch_error(concat("hitch::data_parallel::load: ", prefix.string(), ": the checkpoint was written by ",
                                    counts, found.size() == 1 && found.begin()->first == 1 ? " rank" : " ranks",
                                    ", this run has ", size(),
                                    "; load it with train::load_options{.elastic = true} to redistribute it"));
    }

    /// Whom this rank agrees with on loss scaling and non-finite gradients: every rank, or (asynchronous
    /// policies) itself alone.
    C& agreement() noexcept { return self_ ? *self_ : control_; }

    /// An agreement among every rank run as a call of the group (operation "agreement", `what` as its schedule),
    /// so the stall inspector names a rank that does not come; `body` runs the collective on the communicator given.
    template <class Body>
    void agreement_call(std::string_view what, Body&& body) {
        allreduce::call_options call;
        call.check = false;  // it is itself an agreement
        group_.run(
            call,
            [what] {
                allreduce::call_descriptor d;
                d.operation = static_cast<std::uint8_t>(allreduce::operation::agreement);
                d.set_schedule(what);
                return d;
            },
            [&](allreduce::transport<C>& t, const allreduce::call_descriptor&) { body(t.comm()); });
    }

    static std::vector<user_layer> agreed_layers(C& control, std::vector<user_layer> layers) {
        check_layers_locally(std::span<const user_layer>(layers), D::space, D::name);
        agree_on_layers(control, std::span<const user_layer>(layers), dtype_of<Param>());
        return layers;
    }
    static std::uint64_t ns(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
        return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
    }
    static double ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
        return std::chrono::duration<double, std::milli>(b - a).count();
    }
    [[nodiscard]] timeline::scoped_span trace(std::string name, std::string category) {
        return train::trace(timeline_, std::move(name), std::move(category));
    }
    [[nodiscard]] const std::vector<hitch::layer>& layers32() const noexcept { return weights_.layers(); }

    [[nodiscard]] checkpoint_identity identity() const {
        return {size(),
                rank(),
                optimizer_name(O(options_.optimizer)),
                X::name,
                P::name,
                dtype_of<Param>(),
                buckets_.size(),
                options_.bucket_bytes,
                scaler_.has_value(),
                layers32()};
    }

    // ---- buckets ----------------------------------------------------------------------------------------------

    /// Layer k's gradient is final; launches, in order, every bucket whose layers all are.
    void mark_ready(std::size_t layer) {
        if (!reports_->mark(layer)) return;
        if (!P::exchanges_gradients || !intake().at_boundary()) return;
        ++ready_in_bucket_[buckets_.bucket_of(layer)];
        std::size_t end = pipeline_.launched();
        while (end < buckets_.size() && ready_in_bucket_[end] == buckets_.plan(end).layers.size()) ++end;
        pipeline_.launch_until(end);
    }

    /// Unscales (loss scaling), converts (mixed precision) and checks this rank's gradients of bucket b, and packs
    /// them into the bucket; a bucket with a non-finite gradient is zeroed so it pollutes neither the other ranks'
    /// sums nor this rank's compressor state.
    void prepare_bucket(std::size_t b, bool pack);

    void run_bucket(std::size_t b);

    /// CRC32C of layer k's gradient as the user holds it (the low-precision one under mixed precision).
    [[nodiscard]] std::uint32_t user_gradient_crc(std::size_t k) const;

    /// "hitch::data_parallel step 3, bucket 1 of 4 (layers 'fc1.weight', 'fc1.bias')": what a user knows a
    /// bucket's exchange by (up to 8 layer names, then how many more).
    [[nodiscard]] std::string describe_bucket(std::size_t b) const;

    /// Every rank of `with` learns whether any rank's gradients were not finite; returns whether to apply the step.
    bool agree_on_step(C& with);

    void reset_step() {
        reports_->reset();
        std::fill(ready_in_bucket_.begin(), ready_in_bucket_.end(), 0);
        pipeline_.reset();
        if constexpr (!on_host) buckets_.reset_events();  // the worker is idle now
    }

    void require_idle(std::string_view what) const {
        if (reports_->reported() || pipeline_.launched() != 0)
            throw config_error(concat("hitch::data_parallel::", what,
                                      ": a step is in progress (gradient_ready was called); call it between steps"));
        if (intake().taken() != 0)
            throw config_error(concat("hitch::data_parallel::", what, ": ", intake().taken(), " of ", intake().window(),
                                      " micro-batches of an accumulation window are added up; ",
                                      "call it after the window's last step()"));
    }

    // ---- accumulation, unused layers, clipping, buffers --------------------------------------------------------

    /// A micro-batch that is not its window's last: its gradients are added up here, nothing is sent.
    step_metrics accumulate(std::optional<double> loss);

    void end_window();

    void settle_reports() {
        reports_->settle(step_, control_.rank());
        if constexpr (!on_host) buckets_.settle_events();  // layers not reported share one event, recorded now
    }

    // ---- uneven inputs (train/join.hpp) ------------------------------------------------------------------------

    /// With uneven_inputs, at every synchronised step: how many ranks still train (this one unless it joined).
    void count_training_ranks();
    /// While some ranks have joined, rescales the averaged gradients to the mean over the ranks that train.
    void rescale_for_joined_ranks(std::span<const unsigned char> skip);

    /// find_unused_layers: the layers no rank (of those this rank agrees with) used in this window, as a mask; empty
    /// when there are none. Collective for synchronous policies: one max-all-reduce of a flag per layer.
    std::span<const unsigned char> unused_everywhere();

    /// Clips this rank's FP32 gradients to the global norm (clipping.hpp) and remembers the norm for the metrics.
    /// Under ZeRO stage 2 a rank holds the averaged gradient of its pieces only: their sums of squares are added up
    /// over the ranks.
    void clip_gradients(std::span<const unsigned char> skip);

    /// Replaces each value by its sum over the ranks (ZeRO's partial norms).
    /// Options of the engine's own small collectives (agreements, partial norms, buffers).
    [[nodiscard]] allreduce::call_options internal_call() const {
        allreduce::call_options call;
        call.check = options_.check_collectives;
        return call;
    }
    void sum_over_ranks(std::span<double> values);

    /// Broadcasts and averages the buffers (or, `all_from_root`, gives every rank rank 0's).
    void sync_buffers(bool all_from_root);

    void check_replicas();

    options_type options_;
    D* device_;                  // the device the layers live on
    C control_;                  // agreement traffic (layer checks, overflow flags, replica hashes)
    std::optional<C> self_;      // asynchronous policies: this rank alone, for per-rank agreement
    node_layout nodes_;          // which node each rank runs on (local_rank, local_size)
    bool joined_ = false;        // join() is running: this rank's steps carry zero gradients
    int training_ranks_ = 0;     // uneven_inputs: ranks that trained in this step (0 when not counted)
    allreduce::group<C> group_;  // gradient and parameter collectives
    master_weights<Param, D> weights_;
    bucket_store buckets_;
    std::optional<layer_reports> reports_;      // which layers gradient_ready reported in this micro-batch
    std::vector<std::size_t> ready_in_bucket_;  // per bucket: how many of its layers are ready
    P policy_;
    std::optional<optimizer_stage<O, D>> optimizer_;
    std::vector<optim::piece> own_pieces_;  // ZeRO: this rank's blocks of the buckets, as pieces of the layers
    std::optional<amp::loss_scaler<C>> scaler_;
    std::optional<gradient_intake<Param, D, C>> intake_;
    buffer_set<C> buffers_;
    timeline* timeline_;
    train::detail::shared_parameters shared_;
    std::vector<std::vector<float>> host_values_;  // a device's parameter_context: host copies of the parameters
    std::vector<hitch::layer> host_layers_;        // and their layers

    std::uint64_t step_ = 0;
    std::uint64_t since_replica_check_ = 0;
    std::uint64_t staleness_ = 0;
    std::vector<std::uint64_t> histogram_ = std::vector<std::uint64_t>(256, 0);  // applied steps by staleness
    std::uint64_t dropped_ = 0;
    double lr_ = 0.0;
    double compute_ms_ = 0.0;  // of the present step, over its micro-batches
    std::optional<double> grad_norm_;
    double loss_sum_ = 0.0;  // the losses given for the window's micro-batches
    std::uint64_t losses_ = 0;
    std::optional<std::chrono::steady_clock::time_point> window_start_;
    std::atomic<std::uint64_t> comm_ns_{0};
    seconds_f waited_until_last_step_{};   // group_.waited() at the end of the last step (for wait_ms)
    std::uint64_t agreement_wait_ns_ = 0;  // this step's time in agree_on_step (for wait_ms)
    std::chrono::steady_clock::time_point last_step_end_;
    std::optional<std::chrono::steady_clock::time_point> first_step_;

    server_link_type server_;      // after what it uses (the master layers): destroyed before them
    bucket_pipeline<C> pipeline_;  // last: destroyed first, so its worker stops before what it uses goes
};

}  // namespace train::detail

}  // namespace hitch

#include "hitch/train/engine_step.hpp"  // the definitions of the step internals declared above
#include "hitch/train/join.hpp"         // and of join()
