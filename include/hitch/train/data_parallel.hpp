#pragma once
// hitch::data_parallel<Optimizer, Compressor, SyncPolicy, Schedule>: data-parallel training of a model you
// already have. You give it the communicator, the device, the model's layers (parameter and gradient views with
// names) and typed options; per step you call gradient_ready(i) as backward finishes layer i (optional, to
// overlap communication with the rest of backward) and then step().
//
//   using dp_t = hitch::data_parallel<hitch::optim::lars<hitch::optim::momentum>,
//                                     hitch::compress::none, hitch::sync::hard, hitch::allreduce::ring>;
//   dp_t::options opts;
//   opts.learning_rate = hitch::lr::warmup(hitch::lr::polynomial({...}), {...});
//   dp_t dp(comm, device, layers, opts);
//   for (...) { forward(); backward([&](std::size_t i) { dp.gradient_ready(i); }); dp.step(loss); }
//
// One step, as data flows (DESIGN.md's pipeline):
//   gradients, layer by layer -> unscale (loss scaler) and check finiteness, on this rank
//     -> fusion buckets (a fixed plan, as DDP's reducer; bucket k starts only after buckets < k)
//     -> compressor encode (per-bucket state: residuals, momentum ...) -> all-reduce or all-gather -> decode
//     -> average over ranks -> sync policy -> optimizer (per layer) -> learning-rate schedule ticks
// Bucket exchanges run on a worker thread while backward continues. Every rank agrees whether the step is
// applied (a gradient overflowed under loss scaling, or was not finite): a skipped step is skipped everywhere
// and leaves parameters and optimizer state bitwise unchanged.
//
// The constructor checks that every rank has the same layers (count, names, sizes, element types) and throws
// mismatch_error naming the ranks and layers that differ. A layer that never got gradient_ready in a step where
// others did is config_error naming it, at step(). Checkpoints (save/load) hold everything needed to resume
// exactly; see hitch/train/checkpoint.hpp for the file.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/allreduce/automatic.hpp"
#include "hitch/allreduce/collectives.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/amp/loss_scaler.hpp"
#include "hitch/amp/mixed_precision.hpp"
#include "hitch/amp/nonfinite.hpp"
#include "hitch/comm/agree.hpp"
#include "hitch/compress/aggregate.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/concepts/device.hpp"
#include "hitch/concepts/optimizer.hpp"
#include "hitch/concepts/sync_policy.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/options.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/device/buffer.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/optim/lr/constant.hpp"
#include "hitch/optim/model_optimizer.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/train/buckets.hpp"
#include "hitch/train/checkpoint.hpp"
#include "hitch/train/metrics.hpp"
#include "hitch/train/timeline.hpp"

namespace hitch {

/// Run-time options of data_parallel; every field is checked at construction (config_error).
template <optimizer O, compressor X, sync_policy P, class S>
struct data_parallel_options {
    /// The optimizer's hyper-parameters (momentum, betas, weight decay, LARS's trust coefficient ...).
    typename O::options_type optimizer{};
    /// The gradient codec, with its options (compress::topk({.density = 0.001}) ...).
    X compressor{};
    /// The sync policy's options (local_sgd's period ...).
    typename P::options_type sync{};
    /// The all-reduce schedule, with its options.
    S schedule{};
    /// Learning rate as a function of (step, steps per epoch); any hitch::lr schedule converts.
    std::function<double(std::uint64_t, std::uint64_t)> learning_rate = lr::constant(lr::constant::options_type{0.01});
    /// Steps per epoch, for the learning-rate schedule and the metrics' epoch.
    std::uint64_t steps_per_epoch = 1;
    /// Bytes of gradients per bucket (DDP's and Horovod's default 25 MiB).
    std::size_t bucket_bytes = std::size_t{25} << 20;
    /// Exchange each bucket as soon as gradient_ready completes it (on a worker thread), overlapping backward.
    bool overlap = true;
    /// Scale the loss (use scale() as the factor) and skip overflowing steps; FP16 models need it.
    bool loss_scaling = false;
    amp::loss_scaler_options scaler{};
    /// Without loss scaling: what a non-finite gradient does (throw naming the layer and step, or skip).
    amp::nonfinite_policy nonfinite = amp::nonfinite_policy::throw_error;
    /// Every this many steps compare a hash of the parameters across ranks (0: never); drift is mismatch_error.
    std::uint64_t replica_check_interval = 0;
    /// Check every collective's arguments across ranks (allreduce::call_options::check).
    bool check_collectives = true;
    /// Threads for the optimizer and the gradient passes.
    parallel_options execution{};
    /// Optional sinks: a timeline of every span, and one JSON line of metrics per step.
    train::timeline* timeline = nullptr;
    std::ostream* metrics = nullptr;

    void validate() const {
        option_validator check("hitch::data_parallel");
        check.require(static_cast<bool>(learning_rate), "learning_rate", "empty", "a schedule (e.g. hitch::lr::constant)")
            .at_least("steps_per_epoch", steps_per_epoch, std::uint64_t{1})
            .closed("bucket_bytes", bucket_bytes, std::size_t{4}, std::size_t{1} << 40);
        if (loss_scaling) scaler.validate();
        execution.validate();
    }
};

namespace train::detail {

using hitch::detail::concat;

/// What every rank must agree on about one layer.
struct layer_descriptor {
    std::uint64_t name_hash = 0;
    std::uint64_t size = 0;
    std::uint8_t type = 0;
    char name[47] = {};

    friend bool operator==(const layer_descriptor& a, const layer_descriptor& b) noexcept {
        return a.name_hash == b.name_hash && a.size == b.size && a.type == b.type;
    }
};

[[nodiscard]] inline std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 0xcbf29ce484222325ull) noexcept {
    for (char c : s) {
        h ^= static_cast<unsigned char>(c);
        h *= 0x100000001b3ull;
    }
    return h;
}

[[nodiscard]] inline layer_descriptor describe_layer(std::string_view name, std::size_t size, dtype type) {
    layer_descriptor d;
    d.name_hash = fnv1a(name);
    d.size = size;
    d.type = static_cast<std::uint8_t>(type);
    std::memcpy(d.name, name.data(), std::min(name.size(), sizeof(d.name) - 1));
    return d;
}

/// The interface data_parallel forwards to; one engine per (communicator, device, parameter type).
class engine_base {
public:
    virtual ~engine_base() = default;
    virtual void gradient_ready(std::size_t layer) = 0;
    virtual step_metrics step(std::optional<double> loss) = 0;
    virtual void save(const std::filesystem::path& prefix,
                      const std::vector<std::pair<std::string, std::vector<std::byte>>>& extra) = 0;
    virtual checkpoint_reader load(const std::filesystem::path& prefix) = 0;
    [[nodiscard]] virtual double learning_rate() const = 0;
    [[nodiscard]] virtual float loss_scale() const = 0;
    [[nodiscard]] virtual std::uint64_t step_index() const = 0;
    [[nodiscard]] virtual std::uint64_t staleness() const = 0;
    [[nodiscard]] virtual int rank() const = 0;
    [[nodiscard]] virtual int size() const = 0;
    [[nodiscard]] virtual std::uint64_t parameter_hash() const = 0;
    [[nodiscard]] virtual std::size_t bucket_count() const = 0;
    [[nodiscard]] virtual std::filesystem::path checkpoint_path(const std::filesystem::path& prefix) const = 0;
};

/// compress::none skips the codec machinery: its buckets are all-reduced as they are.
template <compressor X>
inline constexpr bool plain_float_v = std::is_same_v<X, compress::none>;

template <optimizer O, compressor X, sync_policy P, class S, communicator C, device D, floating_element Param>
class engine final : public engine_base {
public:
    using options_type = data_parallel_options<O, X, P, S>;
    using user_layer = std::conditional_t<std::is_same_v<Param, float>, hitch::layer, amp::low_precision_layer<Param>>;
    static constexpr bool mixed_precision = !std::is_same_v<Param, float>;

    engine(C& comm, D& dev, std::vector<user_layer> layers, const options_type& options)
        : options_((options.validate(), options)),
          control_(comm.split(0, comm.rank())),
          group_(comm),
          device_(&dev),
          user_layers_(std::move(layers)),
          codec_(options_.compressor),
          policy_(options_.sync),
          timeline_(options_.timeline) {
        static_assert(D::space == memory_space::host,
                      "hitch::data_parallel runs on host devices (hitch::cpu); CUDA devices take the NCCL path");
        static_assert(allreduce::check_schedule<S, C>());
        check_layers_locally();
        agree_on_layers();
        build_internal_layers();
        plan_ = plan_buckets(layers32_, options_.bucket_bytes);
        bucket_of_layer_.assign(layers32_.size(), 0);
        for (std::size_t b = 0; b < plan_.size(); ++b)
            for (std::size_t k : plan_[b].layers) bucket_of_layer_[k] = b;
        buckets_.resize(plan_.size());
        for (std::size_t b = 0; b < plan_.size(); ++b) {
            buckets_[b].data.assign(plan_[b].elements, 0.0f);
            buckets_[b].codec_state.emplace(make_codec_state(b));
        }
        ready_.assign(layers32_.size(), 0);
        ready_in_bucket_.assign(plan_.size(), 0);
        optimizer_.emplace(options_.optimizer, layers32_, dev, options_.execution);
        if (options_.loss_scaling) scaler_.emplace(control_, options_.scaler);
        allreduce::call_options call;
        call.check = options_.check_collectives;
        call_ = call;
        if (options_.overlap && P::exchanges_gradients) worker_ = std::thread([this] { worker_loop(); });
        last_step_end_ = std::chrono::steady_clock::now();
    }

    ~engine() override {
        {
            std::lock_guard lock(m_);
            stop_ = true;
        }
        cv_.notify_all();
        if (worker_.joinable()) worker_.join();
    }

    // ---- the public operations --------------------------------------------------------------------------------

    void gradient_ready(std::size_t layer) override {
        if (layer >= layers32_.size())
            throw config_error(concat("hitch::data_parallel::gradient_ready: layer ", layer,
                                      " is outside the allowed range [0, ", layers32_.size(), ")"));
        if (ready_[layer] != 0)
            throw config_error(concat("hitch::data_parallel::gradient_ready: layer ", layer, " ('",
                                      layers32_[layer].name, "') was reported twice in step ", step_));
        ready_[layer] = 1;
        used_gradient_ready_ = true;
        if (!P::exchanges_gradients) return;
        ++ready_in_bucket_[bucket_of_layer_[layer]];
        launch_ready_buckets();
    }

    step_metrics step(std::optional<double> loss) override {
        const auto start = std::chrono::steady_clock::now();
        compute_ms_ = ms(last_step_end_, start);
        if (step_ == 0 || !first_step_) first_step_ = last_step_end_;
        lr_ = options_.learning_rate(step_, options_.steps_per_epoch);
        // bytes_sent_ and comm_ns_ count from the end of the previous step: buckets launched by gradient_ready
        // during this step's backward pass belong to it.
        sync::step_result result;
        try {
            result = policy_.step(*this);
        } catch (...) {
            reset_step();
            bytes_sent_ = 0;
            comm_ns_.store(0);
            throw;
        }
        reset_step();
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
        m.loss = loss;
        m.lr = lr_;
        m.loss_scale = scaler_ ? static_cast<double>(scaler_->scale()) : 1.0;
        m.skipped = !result.applied;
        m.bytes_sent = bytes_sent_.exchange(0);
        m.comm_ms = static_cast<double>(comm_ns_.exchange(0)) * 1e-6;
        m.compute_ms = compute_ms_;
        m.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - *first_step_).count();
        if (options_.metrics != nullptr) metrics_writer(*options_.metrics).write(m);
        staleness_ = result.staleness;
        last_step_end_ = std::chrono::steady_clock::now();
        return m;
    }

    [[nodiscard]] double learning_rate() const override { return options_.learning_rate(step_, options_.steps_per_epoch); }
    [[nodiscard]] float loss_scale() const override { return scaler_ ? scaler_->scale() : 1.0f; }
    [[nodiscard]] std::uint64_t step_index() const override { return step_; }
    [[nodiscard]] std::uint64_t staleness() const override { return staleness_; }
    [[nodiscard]] int rank() const override { return control_.rank(); }
    [[nodiscard]] int size() const override { return control_.size(); }
    [[nodiscard]] std::size_t bucket_count() const override { return plan_.size(); }

    /// CRC32C of every parameter's bytes (the FP32 masters under mixed precision), in layer order.
    [[nodiscard]] std::uint64_t parameter_hash() const override {
        compress::detail::crc32c crc;
        for (const hitch::layer& l : layers32_) crc.update(std::as_bytes(std::span<const float>(l.params.data(), l.size())));
        if constexpr (mixed_precision)
            for (const auto& l : user_layers_)
                crc.update(std::as_bytes(std::span<const Param>(l.params.data(), l.params.size())));
        return crc.value();
    }

    [[nodiscard]] std::filesystem::path checkpoint_path(const std::filesystem::path& prefix) const override {
        return prefix.string() + concat(".rank", rank(), "-of-", size());
    }

    void save(const std::filesystem::path& prefix,
              const std::vector<std::pair<std::string, std::vector<std::byte>>>& extra) override {
        require_idle("save");
        checkpoint_writer w;
        w.add("hitch.meta", to_bytes(meta_text()));
        std::vector<std::byte> params;
        for (const hitch::layer& l : layers32_) {
            const auto bytes = std::as_bytes(std::span<const float>(l.params.data(), l.size()));
            params.insert(params.end(), bytes.begin(), bytes.end());
        }
        w.add("hitch.params", std::move(params));
        w.add_stream("hitch.optimizer", [&](std::ostream& os) { optimizer_->save(os); });
        std::vector<std::byte> codec_blob;
        for (const bucket& b : buckets_) {
            std::vector<std::byte> one;  // the codec's state and the compressed ring's residual, checksummed
            compress::save_state(codec_, *b.codec_state, one);
            append_u64(codec_blob, one.size());
            codec_blob.insert(codec_blob.end(), one.begin(), one.end());
        }
        w.add("hitch.compressor", std::move(codec_blob));
        if (scaler_) {
            const amp::loss_scaler_state s = scaler_->state();
            std::vector<std::byte> blob(sizeof(s));
            std::memcpy(blob.data(), &s, sizeof(s));
            w.add("hitch.scaler", std::move(blob));
        }
        std::vector<std::byte> sync_blob;
        policy_.save_state(sync_blob);
        w.add("hitch.sync", std::move(sync_blob));
        for (const auto& [name, bytes] : extra) {
            if (name.rfind("hitch.", 0) == 0)
                throw config_error(concat("hitch::data_parallel::save: section name '", name,
                                          "' is reserved (sections of your own must not start with 'hitch.')"));
            w.add(name, bytes);
        }
        w.commit(checkpoint_path(prefix));
    }

    checkpoint_reader load(const std::filesystem::path& prefix) override {
        require_idle("load");
        checkpoint_reader r(checkpoint_path(prefix));
        // Everything is validated before anything changes.
        const auto meta = r.section("hitch.meta");
        const std::string saved(reinterpret_cast<const char*>(meta.data()), meta.size());
        const std::string expected = meta_text(/*with_step=*/false);
        const std::string saved_config = saved.substr(saved.find('\n') + 1);
        if (saved_config != expected)
            throw mismatch_error(concat("hitch::data_parallel::load: ", r.path(),
                                        " was written by another configuration.\n  saved:    ",
                                        one_line(saved_config), "\n  this run: ", one_line(expected)));
        std::uint64_t saved_step = 0;
        try {
            if (saved.rfind("step ", 0) != 0) throw std::invalid_argument("no step");
            saved_step = std::stoull(saved.substr(5, saved.find('\n') - 5));
        } catch (const std::logic_error&) {
            throw corrupt_message_error(concat("hitch::data_parallel::load: ", r.path(), ": the step number is unreadable"));
        }
        const auto params = r.section("hitch.params");
        std::size_t total = 0;
        for (const hitch::layer& l : layers32_) total += l.size();
        if (params.size() != total * sizeof(float))
            throw corrupt_message_error(concat("hitch::data_parallel::load: ", r.path(), ": parameters section has ",
                                               params.size(), " bytes, expected ", total * sizeof(float)));
        std::vector<std::optional<compress::aggregation_state<X>>> codec_states(buckets_.size());
        {
            const auto blob = r.section("hitch.compressor");
            std::size_t at = 0;
            const auto take = [&](std::uint64_t n) {
                if (blob.size() - at < n)
                    throw corrupt_message_error(concat("hitch::data_parallel::load: ", r.path(),
                                                       ": compressor section is truncated"));
                const auto part = blob.subspan(at, static_cast<std::size_t>(n));
                at += static_cast<std::size_t>(n);
                return part;
            };
            for (std::size_t b = 0; b < buckets_.size(); ++b) {
                codec_states[b].emplace(make_codec_state(b));
                const auto one = take(read_u64(blob, at, r.path()));
                try {
                    compress::load_state(codec_, one, *codec_states[b]);
                } catch (const corrupt_message_error& e) {
                    throw corrupt_message_error(concat("hitch::data_parallel::load: ", r.path(), ": bucket ", b,
                                                       " compressor state: ", e.what()));
                }
            }
            if (at != blob.size())
                throw corrupt_message_error(concat("hitch::data_parallel::load: ", r.path(),
                                                   ": compressor section has trailing bytes"));
        }
        std::optional<amp::loss_scaler_state> scaler_state;
        if (scaler_) {
            const auto blob = r.section("hitch.scaler");
            if (blob.size() != sizeof(amp::loss_scaler_state))
                throw corrupt_message_error(concat("hitch::data_parallel::load: ", r.path(), ": bad scaler section"));
            amp::loss_scaler_state s;
            std::memcpy(&s, blob.data(), sizeof(s));
            option_validator("hitch::data_parallel::load (loss scaler)")
                .closed("scale", s.scale, options_.scaler.min_scale, options_.scaler.max_scale)
                .half_open("good_steps", s.good_steps, std::uint64_t{0}, options_.scaler.growth_interval);
            scaler_state = s;
        }
        P policy = policy_;
        policy.load_state(r.section("hitch.sync"));
        {
            auto stream = r.stream("hitch.optimizer");
            optimizer_->load(stream);  // validates everything before it changes anything
        }
        // Commit.
        std::size_t at = 0;
        for (const hitch::layer& l : layers32_) {
            std::memcpy(l.params.data(), params.data() + at, l.size() * sizeof(float));
            at += l.size() * sizeof(float);
        }
        write_back_low_precision();
        for (std::size_t b = 0; b < buckets_.size(); ++b) buckets_[b].codec_state = std::move(codec_states[b]);
        if (scaler_state) scaler_->set_state(*scaler_state);
        policy_ = std::move(policy);
        step_ = saved_step;
        return r;
    }

    // ---- the step context the sync policy drives (see hitch/concepts/sync_policy.hpp) -------------------------

    bool finish_gradient_exchange() {
        if (used_gradient_ready_) require_every_layer_ready();
        else
            for (std::size_t k = 0; k < layers32_.size(); ++k) gradient_ready_internal(k);
        if (!worker_.joinable()) {
            while (next_to_run_ < launched_) run_bucket(next_to_run_++);
        }
        wait_for_buckets();
        return agree_on_step();
    }

    bool check_local_gradients() {
        if (used_gradient_ready_) require_every_layer_ready();
        for (std::size_t b = 0; b < plan_.size(); ++b) prepare_bucket(b, /*pack=*/false);
        return agree_on_step();
    }

    void apply_optimizer() {
        auto span = trace("optimizer", "compute");
        optimizer_->step(static_cast<float>(lr_));
        write_back_low_precision();
    }

    void average_parameters(bool with_state) {
        auto span = trace("average parameters", "comm");
        const auto start = std::chrono::steady_clock::now();
        for (std::size_t b = 0; b < plan_.size(); ++b) {
            bucket& bk = buckets_[b];
            for (std::size_t i = 0; i < plan_[b].layers.size(); ++i) {
                const hitch::layer& l = layers32_[plan_[b].layers[i]];
                std::memcpy(bk.data.data() + plan_[b].offsets[i], l.params.data(), l.size() * sizeof(float));
            }
            average_in_place(tensor_view<float>(bk.data.data(), bk.data.size()));
            for (std::size_t i = 0; i < plan_[b].layers.size(); ++i) {
                const hitch::layer& l = layers32_[plan_[b].layers[i]];
                std::memcpy(l.params.data(), bk.data.data() + plan_[b].offsets[i], l.size() * sizeof(float));
            }
        }
        if (with_state)
            for (std::size_t k = 0; k < layers32_.size(); ++k)
                for (tensor_view<float> buffer : optimizer_->state(k).buffers()) average_in_place(buffer);
        write_back_low_precision();
        comm_ns_ += ns(start, std::chrono::steady_clock::now());
    }

private:
    struct bucket {
        std::vector<float> data;
        std::optional<compress::aggregation_state<X>> codec_state;
        bool local_bad = false;
        amp::detail::nonfinite_report report{};
    };

    static std::uint64_t ns(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
        return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
    }
    static double ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
        return std::chrono::duration<double, std::milli>(b - a).count();
    }
    [[nodiscard]] timeline::scoped_span trace(std::string name, std::string category) {
        if (timeline_ == nullptr) return timeline::scoped_span(nullptr, {}, {});
        return timeline_->span(std::move(name), std::move(category));
    }
    static std::vector<std::byte> to_bytes(const std::string& s) {
        const auto* p = reinterpret_cast<const std::byte*>(s.data());
        return {p, p + s.size()};
    }
    static void append_u64(std::vector<std::byte>& out, std::uint64_t v) {
        const auto* p = reinterpret_cast<const std::byte*>(&v);
        out.insert(out.end(), p, p + sizeof(v));
    }
    static std::uint64_t read_u64(std::span<const std::byte> blob, std::size_t& at, const std::string& path) {
        if (blob.size() - at < sizeof(std::uint64_t))
            throw corrupt_message_error(concat("hitch::data_parallel::load: ", path, ": compressor section is truncated"));
        std::uint64_t v = 0;
        std::memcpy(&v, blob.data() + at, sizeof(v));
        at += sizeof(v);
        return v;
    }
    static std::string one_line(std::string s) {
        std::replace(s.begin(), s.end(), '\n', ' ');
        return s;
    }

    // ---- construction checks ----------------------------------------------------------------------------------

    void check_layers_locally() {
        if (user_layers_.empty()) throw config_error("hitch::data_parallel: the model has no layers");
        for (std::size_t k = 0; k < user_layers_.size(); ++k) {
            const auto& l = user_layers_[k];
            if (l.params.size() != l.grads.size())
                throw config_error(concat("hitch::data_parallel: layer ", k, " ('", l.name, "') has ",
                                          l.params.size(), " parameters but ", l.grads.size(), " gradient elements"));
            if (!l.params.on_host() || !l.grads.on_host())
                throw config_error(concat("hitch::data_parallel: layer ", k, " ('", l.name,
                                          "') is not in host memory"));
        }
    }

    /// Every rank must have the same layers: count, then each layer's name, size and element type.
    void agree_on_layers() {
        comm::agree(control_, static_cast<std::uint64_t>(user_layers_.size()),
                    "hitch::data_parallel: number of layers");
        std::uint64_t fingerprint = 0xcbf29ce484222325ull;
        std::vector<layer_descriptor> mine;
        for (const auto& l : user_layers_) {
            mine.push_back(describe_layer(l.name, l.params.size(), dtype_of<Param>()));
            fingerprint = fnv1a(std::string_view(reinterpret_cast<const char*>(&mine.back()), 17), fingerprint);
        }
        const auto fingerprints = comm::allgather_value(control_, fingerprint);
        if (std::all_of(fingerprints.begin(), fingerprints.end(), [&](std::uint64_t f) { return f == fingerprints[0]; }))
            return;
        // Find and name the differences, layer by layer.
        std::ostringstream s;
        s << "hitch::data_parallel: ranks have different layers:";
        for (std::size_t k = 0; k < mine.size(); ++k) {
            const auto all = comm::allgather_value(control_, mine[k]);
            if (std::all_of(all.begin(), all.end(), [&](const layer_descriptor& d) { return d == all[0]; })) continue;
            s << " layer " << k << ":";
            for (std::size_t r = 0; r < all.size(); ++r)
                s << (r == 0 ? " " : ", ") << "rank " << r << " has '" << all[r].name << "' (" << all[r].size << " x "
                  << name(static_cast<dtype>(all[r].type)) << ")";
            s << ';';
        }
        std::string text = s.str();
        if (text.back() == ';') text.pop_back();
        throw mismatch_error(text);
    }

    void build_internal_layers() {
        if constexpr (mixed_precision) {
            for (const auto& l : user_layers_) {
                masters_.emplace_back(*device_, l.params.size());
                grads32_.emplace_back(*device_, l.params.size());
                float* w = masters_.back().data();
                for (std::size_t i = 0; i < l.params.size(); ++i) w[i] = static_cast<float>(l.params[i]);
                layers32_.push_back(
                    hitch::layer{l.name, masters_.back().view(), grads32_.back().view(), l.flags, l.rows});
            }
        } else {
            layers32_ = user_layers_;
        }
    }

    // ---- buckets ----------------------------------------------------------------------------------------------

    void gradient_ready_internal(std::size_t layer) {
        if (ready_[layer] != 0) return;
        ready_[layer] = 1;
        if (!P::exchanges_gradients) return;
        ++ready_in_bucket_[bucket_of_layer_[layer]];
        launch_ready_buckets();
    }

    /// Launches buckets in order, each once all its layers are ready.
    void launch_ready_buckets() {
        std::size_t launched = launched_;
        while (launched < plan_.size() && ready_in_bucket_[launched] == plan_[launched].layers.size()) ++launched;
        if (launched == launched_) return;
        if (!worker_.joinable()) {
            launched_ = launched;
            return;
        }
        {
            std::lock_guard lock(m_);
            for (std::size_t b = launched_; b < launched; ++b) queue_.push_back(b);
            launched_ = launched;
        }
        cv_.notify_all();
    }

    void require_every_layer_ready() {
        std::string missing;
        for (std::size_t k = 0; k < ready_.size(); ++k)
            if (ready_[k] == 0) missing += concat(missing.empty() ? "" : ", ", k, " ('", layers32_[k].name, "')");
        if (!missing.empty()) {
            broken_ = true;
            throw config_error(concat("hitch::data_parallel::step: step ", step_, " on rank ", control_.rank(),
                                      ": gradient_ready was called for some layers but never for layer(s) ", missing));
        }
    }

    void worker_loop() {
        for (;;) {
            std::size_t b = 0;
            {
                std::unique_lock lock(m_);
                cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
                if (stop_ && queue_.empty()) return;
                b = queue_.front();
                queue_.pop_front();
            }
            std::exception_ptr failure;
            try {
                run_bucket(b);
            } catch (...) {
                failure = std::current_exception();
            }
            {
                std::lock_guard lock(m_);
                if (failure && !worker_error_) worker_error_ = failure;
                ++finished_;
            }
            done_cv_.notify_all();
        }
    }

    void wait_for_buckets() {
        if (worker_.joinable()) {
            std::unique_lock lock(m_);
            done_cv_.wait(lock, [&] { return finished_ == launched_; });
            if (worker_error_) {
                auto e = std::exchange(worker_error_, nullptr);
                broken_ = true;
                std::rethrow_exception(e);
            }
        }
    }

    /// Unscales (loss scaling), converts (mixed precision) and checks this rank's gradients of bucket b, and packs
    /// them into the bucket; a bucket with a non-finite gradient is zeroed so it pollutes neither the other ranks'
    /// sums nor this rank's compressor state.
    void prepare_bucket(std::size_t b, bool pack) {
        auto span = trace(concat("prepare bucket ", b), "pack");
        bucket& bk = buckets_[b];
        bk.local_bad = false;
        bk.report = {};
        for (std::size_t i = 0; i < plan_[b].layers.size(); ++i) {
            const std::size_t k = plan_[b].layers[i];
            const hitch::layer& l = layers32_[k];
            bool overflow = false;
            if constexpr (mixed_precision) {
                const auto& low = user_layers_[k];
                if (scaler_) {
                    overflow = scaler_->unscale(tensor_view<const Param>(low.grads.data(), low.grads.size()), l.grads);
                } else {
                    for (std::size_t e = 0; e < l.size(); ++e) l.grads[e] = static_cast<float>(low.grads[e]);
                }
            } else if (scaler_) {
                overflow = scaler_->unscale(l.grads);
            }
            if (!scaler_ && bk.report.layer < 0) {
                const std::size_t bad =
                    amp::detail::first_nonfinite(tensor_view<const float>(l.grads.data(), l.size()), options_.execution);
                if (bad != amp::detail::npos)
                    bk.report = {static_cast<std::int64_t>(k), static_cast<std::int64_t>(bad), l.grads[bad]};
            }
            bk.local_bad |= overflow || bk.report.layer >= 0;
            if (pack) std::memcpy(bk.data.data() + plan_[b].offsets[i], l.grads.data(), l.size() * sizeof(float));
        }
        if (pack && bk.local_bad) std::fill(bk.data.begin(), bk.data.end(), 0.0f);
    }

    void run_bucket(std::size_t b) {
        prepare_bucket(b, /*pack=*/true);
        bucket& bk = buckets_[b];
        const auto start = std::chrono::steady_clock::now();
        {
            auto span = trace(concat("exchange bucket ", b), "comm");
            exchange(bk, tensor_view<float>(bk.data.data(), bk.data.size()));
        }
        comm_ns_ += ns(start, std::chrono::steady_clock::now());
        for (std::size_t i = 0; i < plan_[b].layers.size(); ++i) {
            const hitch::layer& l = layers32_[plan_[b].layers[i]];
            std::memcpy(l.grads.data(), bk.data.data() + plan_[b].offsets[i], l.size() * sizeof(float));
        }
    }

    /// Replaces `data` by the average over ranks of everyone's (encoded, exchanged, decoded) `data`. The path
    /// follows from the codec's traits (compress::aggregate): an all-reduce of additive codecs, PowerSGD's two
    /// all-reduces, the compression-aware ring, or an all-gather of the messages.
    void exchange(bucket& bk, tensor_view<float> data) {
        if constexpr (plain_float_v<X>) {
            average_in_place(data);
        } else {
            auto span = trace("compress + exchange", "compress");
            compress::aggregate_options ao;
            ao.average = true;
            ao.call = call_;
            const compress::aggregation_stats stats =
                compress::aggregate(group_, codec_, *bk.codec_state, data, options_.schedule, ao);
            bytes_sent_ += stats.sent_bytes;
        }
    }

    /// The aggregation state of bucket b; a low-rank codec learns each layer's matrix shape.
    [[nodiscard]] compress::aggregation_state<X> make_codec_state(std::size_t b) const {
        const std::size_t n = plan_[b].elements;
        if constexpr (requires(const X& x, std::span<const compress::matrix_shape> s) { x.make_state(n, s); }) {
            std::vector<compress::matrix_shape> shapes;
            for (std::size_t k : plan_[b].layers) {
                const hitch::layer& l = layers32_[k];
                if (l.size() == 0) continue;
                const std::size_t rows = l.rows == 0 ? l.size() : l.rows;
                if (l.size() % rows != 0)
                    throw config_error(concat("hitch::data_parallel: layer '", l.name, "' has ", l.size(),
                                              " elements, not a multiple of its rows = ", l.rows));
                shapes.push_back({rows, l.size() / rows});
            }
            return compress::make_aggregation_state(codec_, codec_.make_state(n, shapes), n);
        } else {
            return compress::make_aggregation_state(codec_, n);
        }
    }

    void average_in_place(tensor_view<float> data) {
        if (data.empty()) return;
        allreduce::allreduce(group_, data, allreduce::reduce_op::average, options_.schedule, call_);
        bytes_sent_ += allreduce_bytes(data.size_bytes());
    }

    [[nodiscard]] std::uint64_t allreduce_bytes(std::size_t n_bytes) const {
        allreduce::cost_constants k = group_.constants().value_or(allreduce::cost_constants{});
        return static_cast<std::uint64_t>(options_.schedule.cost(group_.size(), n_bytes, k).sent_bytes);
    }

    static void scale(tensor_view<float> data, float factor) {
        for (float& x : data) x *= factor;
    }

    /// Every rank learns whether any rank's gradients were not finite; returns whether to apply the step.
    bool agree_on_step() {
        auto span = trace("agree", "comm");
        bool local_bad = false;
        amp::detail::nonfinite_report report{};
        for (const bucket& bk : buckets_) {
            local_bad |= bk.local_bad;
            if (report.layer < 0 && bk.report.layer >= 0) report = bk.report;
        }
        if (scaler_) return scaler_->update(local_bad);
        const auto reports = amp::detail::gather_reports(control_, report);
        const bool any = std::any_of(reports.begin(), reports.end(), [](const auto& r) { return r.layer >= 0; });
        if (!any) return true;
        if (options_.nonfinite == amp::nonfinite_policy::skip_step) return false;
        throw amp::nonfinite_gradient_error(concat(
            "hitch::data_parallel: ",
            amp::detail::describe(reports, step_, true, [&](std::size_t k) { return layers32_.at(k).name; })));
    }

    void reset_step() {
        std::fill(ready_.begin(), ready_.end(), 0);
        std::fill(ready_in_bucket_.begin(), ready_in_bucket_.end(), 0);
        used_gradient_ready_ = false;
        if (worker_.joinable()) {
            std::unique_lock lock(m_);
            done_cv_.wait(lock, [&] { return finished_ == launched_; });
            worker_error_ = nullptr;
        }
        launched_ = 0;
        finished_ = 0;
        next_to_run_ = 0;
    }

    void require_idle(std::string_view what) const {
        if (used_gradient_ready_ || launched_ != 0)
            throw config_error(concat("hitch::data_parallel::", what,
                                      ": a step is in progress (gradient_ready was called); call it between steps"));
    }

    void write_back_low_precision() {
        if constexpr (mixed_precision) {
            for (std::size_t k = 0; k < user_layers_.size(); ++k) {
                const float* w = layers32_[k].params.data();
                Param* low = user_layers_[k].params.data();
                for (std::size_t i = 0; i < layers32_[k].size(); ++i) low[i] = Param(w[i]);
            }
        }
    }

    void check_replicas() {
        auto span = trace("replica check", "comm");
        comm::agree(control_, parameter_hash(), concat("hitch::data_parallel: replica check after step ", step_ - 1,
                                                       ": parameter hashes differ"),
                    [](std::ostream& os, std::uint64_t h) { os << "0x" << std::hex << h << std::dec; });
    }

    /// The configuration a checkpoint must match, one item per line; the first line is the step.
    [[nodiscard]] std::string meta_text(bool with_step = true) const {
        std::ostringstream s;
        if (with_step) s << "step " << step_ << '\n';
        s << "hitch checkpoint 1\n"
          << "ranks " << size() << " rank " << rank() << '\n'
          << "optimizer " << O::name << '\n'
          << "compressor " << X::name << '\n'
          << "sync " << P::name << '\n'
          << "parameters " << name(dtype_of<Param>()) << '\n'
          << "buckets " << plan_.size() << " of " << options_.bucket_bytes << " bytes\n"
          << "loss_scaling " << (scaler_ ? "on" : "off") << '\n';
        for (const hitch::layer& l : layers32_) s << "layer " << l.name << ' ' << l.size() << '\n';
        return s.str();
    }

    options_type options_;
    C control_;                    // agreement traffic (layer checks, overflow flags, replica hashes)
    allreduce::group<C> group_;    // gradient and parameter collectives
    allreduce::call_options call_{};
    D* device_;
    std::vector<user_layer> user_layers_;
    std::vector<device_buffer<float, D>> masters_;  // mixed precision: FP32 master weights
    std::vector<device_buffer<float, D>> grads32_;  // mixed precision: FP32 gradients
    std::vector<hitch::layer> layers32_;
    std::vector<bucket_plan> plan_;
    std::vector<std::size_t> bucket_of_layer_;
    std::vector<bucket> buckets_;
    std::vector<unsigned char> ready_;
    std::vector<std::size_t> ready_in_bucket_;
    bool used_gradient_ready_ = false;
    bool broken_ = false;
    X codec_;
    P policy_;
    std::optional<optim::model_optimizer<O, D>> optimizer_;
    std::optional<amp::loss_scaler<C>> scaler_;
    timeline* timeline_;

    std::thread worker_;
    std::mutex m_;
    std::condition_variable cv_;
    std::condition_variable done_cv_;
    std::deque<std::size_t> queue_;
    bool stop_ = false;
    std::size_t launched_ = 0;     // buckets handed to the worker (or due to run inline) this step
    std::size_t finished_ = 0;     // buckets the worker finished this step
    std::size_t next_to_run_ = 0;  // inline mode: next bucket to run
    std::exception_ptr worker_error_;

    std::uint64_t step_ = 0;
    std::uint64_t since_replica_check_ = 0;
    std::uint64_t staleness_ = 0;
    double lr_ = 0.0;
    double compute_ms_ = 0.0;
    std::atomic<std::uint64_t> bytes_sent_{0};
    std::atomic<std::uint64_t> comm_ns_{0};
    std::chrono::steady_clock::time_point last_step_end_;
    std::optional<std::chrono::steady_clock::time_point> first_step_;
};

}  // namespace train::detail

/// Data-parallel training with the optimizer, compressor, sync policy and all-reduce schedule as template
/// arguments (see the file comment). Move-only.
template <class Optimizer, class Compressor = compress::none, class SyncPolicy = sync::hard,
          class Schedule = allreduce::automatic>
class data_parallel {
    static_assert(check_optimizer<Optimizer>());
    static_assert(check_compressor<Compressor>());
    static_assert(check_sync_policy<SyncPolicy>());

public:
    using options = data_parallel_options<Optimizer, Compressor, SyncPolicy, Schedule>;
    using optimizer_type = Optimizer;
    using compressor_type = Compressor;
    using sync_policy_type = SyncPolicy;
    using schedule_type = Schedule;

    /// An FP32 model. Collective: every rank of `comm` constructs it with the same layers.
    template <class C, class D, bool = check_communicator<C>() && check_device<D>()>  // before the engine names them
    data_parallel(C& comm, D& dev, std::vector<hitch::layer> layers, const options& opts = {})
        : engine_(std::make_unique<train::detail::engine<Optimizer, Compressor, SyncPolicy, Schedule, C, D, float>>(
              comm, dev, std::move(layers), opts)) {}

    /// An FP16 or BF16 model: data_parallel keeps FP32 master weights and gradients, steps the masters and
    /// writes the rounded low-precision parameters back (Micikevicius et al. 2018).
    template <communicator C, device D, floating_element Low>
        requires(!std::same_as<Low, float> && !std::same_as<Low, double>)
    data_parallel(C& comm, D& dev, std::vector<amp::low_precision_layer<Low>> layers, const options& opts = {})
        : engine_(std::make_unique<train::detail::engine<Optimizer, Compressor, SyncPolicy, Schedule, C, D, Low>>(
              comm, dev, std::move(layers), opts)) {}

    /// Layer i's gradient is final: its bucket joins the exchange as soon as the bucket is complete.
    void gradient_ready(std::size_t layer) { engine_->gradient_ready(layer); }
    /// Finishes the exchange, applies the optimizer as the sync policy says, ticks the schedules. Collective.
    train::step_metrics step(std::optional<double> loss = std::nullopt) { return engine_->step(loss); }

    /// Writes a checkpoint to "<prefix>.rank<r>-of-<p>" (each rank its own file, atomically), with sections of
    /// your own (data position, RNG state ...; names must not start with "hitch.").
    void save(const std::filesystem::path& prefix,
              const std::vector<std::pair<std::string, std::vector<std::byte>>>& extra = {}) {
        engine_->save(prefix, extra);
    }
    /// Restores a checkpoint written by save() under the same configuration; returns the reader so you can read
    /// your own sections. A corrupt file is corrupt_message_error, another configuration mismatch_error; either
    /// way nothing changes.
    train::checkpoint_reader load(const std::filesystem::path& prefix) { return engine_->load(prefix); }
    [[nodiscard]] std::filesystem::path checkpoint_path(const std::filesystem::path& prefix) const {
        return engine_->checkpoint_path(prefix);
    }

    /// The learning rate the next step will use.
    [[nodiscard]] double learning_rate() const { return engine_->learning_rate(); }
    /// Multiply the loss by this before backward (1 without loss scaling).
    [[nodiscard]] float loss_scale() const { return engine_->loss_scale(); }
    /// Steps taken so far (applied or skipped).
    [[nodiscard]] std::uint64_t step_index() const { return engine_->step_index(); }
    [[nodiscard]] std::uint64_t staleness() const { return engine_->staleness(); }
    [[nodiscard]] int rank() const { return engine_->rank(); }
    [[nodiscard]] int size() const { return engine_->size(); }
    [[nodiscard]] std::size_t bucket_count() const { return engine_->bucket_count(); }
    /// CRC32C of the parameters (equal on every rank under hard sync).
    [[nodiscard]] std::uint64_t parameter_hash() const { return engine_->parameter_hash(); }

private:
    std::unique_ptr<train::detail::engine_base> engine_;
};

}  // namespace hitch
