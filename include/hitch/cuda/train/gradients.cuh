#pragma once
// hitch::cuda::train::gradients<X, S, C, Param>: data_parallel's gradient machinery on a GPU (the `gradients` of
// hitch::train::device_training<cuda::device>, train/device_training.hpp). It owns
//
//   the buckets         the host's plan (train/buckets.hpp), each bucket a buffer in GPU memory
//   the intake          each layer's gradient widened (FP16/BF16 models), unscaled (loss scaling), checked for inf
//                       and NaN, averaged over an accumulation window and packed into its bucket: three launches per
//                       bucket (kernels.cuh), then one read of each layer's flags by the host
//   the exchange        the collectives' device backend for compress::none, the device codecs otherwise
//                       (exchange.cuh), the results copied back into the layers' gradients
//   the streams         the model's stream (options.compute_stream, or the device's), the device's stream (the
//                       optimizer, the write-back of FP16/BF16 parameters) and a stream of its own for the intake, the
//                       codecs and the copies (a second cuda::device on the same GPU). gradient_ready(k) records an
//                       event on the model's stream and the bucket's intake waits for it on the exchange stream
//                       (train/ready_events.hpp): the host never waits for backward, and the exchange worker waits
//                       only for its own stream, once a bucket is packed. hand_over() orders the device's stream
//                       after the exchange, end_step() the model's stream after both, by events.
//   the GPU's share     of clipping (the sums of squares in norm.hpp's order), joins (zero gradients on the model's
//                       stream, the rescale), checkpoints (the codecs' states as the host codecs' blobs) and the
//                       timeline (spans of GPU time from events, on a lane "GPU <ordinal>").
//
// Every value has the host path's bits: the per-element math is intake.hpp's, the codecs are bitwise the host's, and
// the collectives sum in the host schedule's order. nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/train/gradients.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/allreduce/binary_tree.hpp"
#include "hitch/allreduce/collectives.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/amp/nonfinite.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/optim/multi_tensor.hpp"
#include "hitch/cuda/train/events.hpp"
#include "hitch/cuda/train/exchange.cuh"
#include "hitch/cuda/train/intake.hpp"
#include "hitch/cuda/train/kernels.cuh"
#include "hitch/device/buffer.hpp"
#include "hitch/exchange/aggregation.hpp"
#include "hitch/exchange/state_blob.hpp"
#include "hitch/train/buckets.hpp"
#include "hitch/train/checkpoint.hpp"
#include "hitch/train/device_training.hpp"
#include "hitch/train/engine_checkpoint.hpp"
#include "hitch/train/gradient_intake.hpp"
#include "hitch/train/master_weights.hpp"
#include "hitch/train/ready_events.hpp"
#include "hitch/train/timeline.hpp"

namespace hitch::cuda::train {

using hitch::detail::concat;

template <compressor X, class S, communicator C, floating_element Param>
class gradients {
    static constexpr bool mixed = !std::is_same_v<Param, float>;
    static constexpr bool plain = std::is_same_v<X, cc::none>;
    static constexpr bool is_half = std::is_same_v<Param, hitch::half>;
    static_assert(std::is_same_v<Param, float> || std::is_same_v<Param, hitch::half> ||
                      std::is_same_v<Param, hitch::bfloat16>,
                  "hitch::data_parallel on the GPU takes FP32 models and FP16 or BF16 models (hitch::half, "
                  "hitch::bfloat16) with FP32 masters");

public:
    using weights_type = hitch::train::detail::master_weights<Param, cuda::device>;

    /// What the engine reads of a bucket after its intake and exchange.
    struct bucket {
        bool local_bad = false;  // this rank's gradients in it were not finite (it was sent as zeros)
        hitch::amp::detail::nonfinite_report report{};
        std::optional<cc::exchange_kind> exchange;
    };
    struct no_state {};
    using codec_state = std::conditional_t<plain, no_state, device_aggregation<X>>;
    /// Codec states read from a checkpoint, checked, not yet in use.
    using pending_states = std::vector<std::optional<codec_state>>;

    gradients(cuda::device& dev, hitch::allreduce::group<C>& group, const X& codec, const S& schedule,
              const weights_type& weights, const hitch::train::device_settings& s)
        : dev_(dev),
          xdev_(dev.ordinal()),
          group_(group),
          shape_(hitch::allreduce::level_shape::of(s.nodes)),
          codec_(codec),
          dc_(make_device_codec(codec)),
          layers_(weights.layers()),
          plan_(hitch::train::plan_buckets(layers_, s.bucket_bytes)),
          trace_(s.trace),
          window_(s.window),
          compute_(s.compute_stream != nullptr ? static_cast<cudaStream_t>(s.compute_stream) : dev.stream()),
          events_(layer_events(dev.ordinal(), weights.layers().size(), compute_, xdev_.stream()),
                  weights.layers().size()),
          spans_(s.trace, dev.ordinal(), dev.stream(), concat("GPU ", dev.ordinal())),
          order_(false) {
        call_.check = s.check_collectives;
        if constexpr (!plain) {
            const std::optional<cc::exchange_kind> kind = hitch::train::detail::device_exchange_for(
                cc::aggregation_path_of<X>, hitch::train::detail::shape_of(schedule));
            if (!kind) throw std::logic_error("hitch::cuda::train::gradients: a refused pairing reached the exchange");
            kind_ = *kind;
        }
        if constexpr (mixed)
            for (const auto& l : weights.user_layers()) user_grads_.push_back({l.grads.data(), l.grads.size()});
        bucket_of_layer_.assign(layers_.size(), 0);
        for (std::size_t b = 0; b < plan_.size(); ++b)
            for (std::size_t k : plan_[b].layers) bucket_of_layer_[k] = b;
        buckets_.resize(plan_.size());
        for (std::size_t b = 0; b < plan_.size(); ++b) {
            data_.emplace_back(xdev_, plan_[b].elements);
            if constexpr (!plain) states_.emplace_back(make_state(b));
        }
        if (window_ > 1) {
            for (const hitch::layer& l : layers_) sums_.emplace_back(xdev_, l.size());
            sticky_.resize(layers_.size());
        }
        build_tables();
        // Memory allocated in stream order on either stream (the masters on the device's, the buckets on the
        // exchange's) is used on the other from now on.
        xdev_.synchronize();
        dev_.synchronize();
    }
    gradients(const gradients&) = delete;
    gradients& operator=(const gradients&) = delete;
    ~gradients() {
        try {
            xdev_.synchronize();
            dev_.synchronize();
        } catch (...) {  // a failed GPU: what was queued is lost either way
        }
    }

    // ---- the plan ----------------------------------------------------------------------------------------------

    [[nodiscard]] std::size_t size() const noexcept { return plan_.size(); }
    [[nodiscard]] const hitch::train::bucket_plan& plan(std::size_t b) const { return plan_[b]; }
    [[nodiscard]] std::size_t bucket_of(std::size_t layer) const { return bucket_of_layer_[layer]; }
    [[nodiscard]] bucket& operator[](std::size_t b) { return buckets_[b]; }
    [[nodiscard]] const bucket& operator[](std::size_t b) const { return buckets_[b]; }
    [[nodiscard]] const X& codec() const noexcept { return codec_; }
    /// Bytes sent since the last call.
    [[nodiscard]] std::uint64_t take_bytes_sent() noexcept { return bytes_sent_.exchange(0); }

    // ---- the accumulation window (gradient_intake's bookkeeping) ----------------------------------------------

    [[nodiscard]] std::uint64_t window() const noexcept { return window_; }
    [[nodiscard]] std::uint64_t taken() const noexcept { return taken_; }
    [[nodiscard]] bool at_boundary() const noexcept { return taken_ + 1 >= window_; }
    void micro_batch_done() noexcept { ++taken_; }
    void end_window() noexcept { taken_ = 0; }

    // ---- events and streams ------------------------------------------------------------------------------------

    /// gradient_ready(k): an event on the model's stream.
    void gradient_ready(std::size_t k) { events_.reported(k); }
    /// step(): the layers not reported share one event, recorded now.
    void settle_events() { events_.settle(); }
    /// The micro-batch is over (the exchange worker is idle).
    void reset_events() { events_.reset(); }
    /// The device's stream (the optimizer) follows what the exchange stream has queued.
    void hand_over() { stream_order(dev_.ordinal(), dev_.stream(), xdev_.stream(), order_.get()); }
    /// The model's stream follows everything queued so far (the exchange, the optimizer, the write-back); the GPU
    /// spans that have ended go on the timeline.
    void end_step() {
        stream_order(dev_.ordinal(), compute_, xdev_.stream(), order_.get());
        stream_order(dev_.ordinal(), compute_, dev_.stream(), order_.get());
        spans_.flush();
    }
    /// Waits for the model's stream (before the host reads what it wrote: buffers).
    void synchronize_compute() {
        check(cudaSetDevice(dev_.ordinal()), "cudaSetDevice");
        check(cudaStreamSynchronize(compute_), "cudaStreamSynchronize");
    }
    /// Runs f(), which queues work on the device's stream, as a span of GPU time named `name`.
    template <class F>
    void device_span(std::string name, F&& f) {
        spans_.span(dev_.stream(), std::move(name), std::forward<F>(f));
    }

    // ---- the intake --------------------------------------------------------------------------------------------

    /// Takes in the gradients of bucket b's layers (train/gradient_intake.hpp's take, on the GPU, after their
    /// events) and packs them into the bucket; a bucket with an inf or NaN is zeroed. `inv`: the loss scaler's
    /// inverse scale (none without loss scaling); unused(k): the step did not produce layer k's gradient.
    template <class Unused>
    void prepare(std::size_t b, bool pack, std::optional<float> inv, Unused&& unused) {
        const hitch::train::bucket_plan& p = plan_[b];
        bucket& bk = buckets_[b];
        bk.local_bad = false;
        bk.report = {};
        if (p.layers.empty()) return;
        const std::size_t lo = *std::min_element(p.layers.begin(), p.layers.end());
        const std::size_t count = p.layers.size();  // the bucket's layers are lo, lo + 1, ... (train/buckets.hpp)
        upload_unused(lo, count, unused);
        events_.wait_for(p.layers);
        const intake_scalars k = scalars(inv, pack);
        spans_.span(xdev_.stream(), concat("intake bucket ", b), [&] {
            launch_take(chunk_first_[b], chunk_first_[b + 1], lo, count, k);
            launch_finish(chunk_first_[b], chunk_first_[b + 1], k);
        });
        read_reports(lo, count);
        for (const std::size_t layer : p.layers) {
            hitch::train::detail::intake_verdict v = verdict(layer, inv.has_value());
            if (window_ > 1) merge(v, sticky_[layer]);
            bk.local_bad |= v.bad;
            if (bk.report.layer < 0) bk.report = v.report;
        }
        if (pack && bk.local_bad) xdev_.fill_zero(data_[b].data(), data_[b].size() * sizeof(float));
    }

    /// A micro-batch that is not its window's last: every layer's gradient taken in and added to the window's sum
    /// (gradient_intake::add, on the GPU).
    template <class Unused>
    void accumulate(std::optional<float> inv, Unused&& unused) {
        if (layers_.empty()) return;
        upload_unused(0, layers_.size(), unused);
        events_.wait_for_all();
        intake_scalars k = scalars(inv, false);
        spans_.span(xdev_.stream(), "accumulate", [&] {
            launch_take(0, chunk_first_.back(), 0, layers_.size(), k);
            if (chunk_first_.back() != 0) {
                activate();
                kernels::add_kernel<<<kernels::chunk_blocks(chunk_first_.back()), kernels::chunk_threads, 0,
                                      xdev_.stream()>>>(chunks_.data(), chunk_first_.back(), rows_.data(),
                                                        static_cast<std::uint32_t>(taken_));
                hitch::cuda::detail::check_launch("hitch::cuda::train add_kernel");
            }
        });
        read_reports(0, layers_.size());
        for (std::size_t layer = 0; layer < layers_.size(); ++layer) {
            const hitch::train::detail::intake_verdict v = verdict(layer, inv.has_value());
            if (taken_ == 0)
                sticky_[layer] = v;
            else
                merge(sticky_[layer], v);
        }
    }

    // ---- the exchange ------------------------------------------------------------------------------------------

    /// Replaces bucket b by the average over ranks of every rank's (encoded, exchanged, decoded) bucket.
    void exchange(std::size_t b, const S& schedule) {
        bucket& bk = buckets_[b];
        const tensor_view<float> data = data_[b].view();
        xdev_.synchronize();  // the collectives read what the exchange stream has finished writing
        if constexpr (plain) {
            average_view(data, schedule);
            bk.exchange = cc::exchange_kind::allreduce;
        } else {
            auto span = hitch::train::trace(trace_, "compress + exchange", "compress");
            cc::aggregate_options ao;
            ao.average = true;
            ao.call = call_;
            device_aggregation<X>& st = states_[b];
            cc::aggregation_stats stats;
            switch (kind_) {
                case cc::exchange_kind::allreduce:
                    if constexpr (cc::aggregation_path_of<X> == cc::aggregation_path::allreduce)
                        stats = device_aggregate_allreduce(group_, xdev_, dc_, st, data, schedule, ao);
                    break;
                case cc::exchange_kind::low_rank:
                    if constexpr (cc::aggregation_path_of<X> == cc::aggregation_path::low_rank)
                        stats = device_aggregate_low_rank(group_, xdev_, dc_, st, data, schedule, ao);
                    break;
                case cc::exchange_kind::allgather_ring:
                    if constexpr (cc::aggregation_path_of<X> == cc::aggregation_path::allgather)
                        stats = device_aggregate_allgather(group_, xdev_, dc_, st, data, ao);
                    break;
                case cc::exchange_kind::compressed_ring:
                    if constexpr (cc::aggregation_path_of<X> == cc::aggregation_path::compressed_ring)
                        stats = device_aggregate_ring(group_, xdev_, dc_, st, data, ao);
                    break;
                default:
                    throw std::logic_error("hitch::cuda::train::gradients: an exchange the GPU does not run");
            }
            bytes_sent_ += stats.sent_bytes;
            bk.exchange = stats.exchange;
            span.arg("exchange", cc::name(stats.exchange));
        }
    }

    /// Copies the layers' gradients out of bucket b after its exchange (queued on the exchange stream).
    void unpack_gradients(std::size_t b) {
        spans_.span(xdev_.stream(), concat("unpack bucket ", b), [&] {
            for (std::size_t i = 0; i < plan_[b].layers.size(); ++i) {
                const hitch::layer& l = layers_[plan_[b].layers[i]];
                xdev_.copy(l.grads.data(), data_[b].data() + plan_[b].offsets[i], l.size() * sizeof(float));
            }
        });
    }

    /// All-reduce-averages `data` over ranks: GPU memory (an optimizer state, once the device's stream has written
    /// it) or host memory (a sync policy's host copies).
    void average(tensor_view<float> data, const S& schedule) {
        if (!data.on_host()) dev_.synchronize();
        average_view(data, schedule);
    }

    /// Averages every parameter over ranks, a bucket at a time, with the buckets as staging.
    void average_parameters(const S& schedule) {
        stream_order(dev_.ordinal(), xdev_.stream(), dev_.stream(), order_.get());
        for (std::size_t b = 0; b < plan_.size(); ++b) {
            copy_parameters(b, true);
            xdev_.synchronize();
            average_view(data_[b].view(), schedule);
            copy_parameters(b, false);
        }
        hand_over();
    }

    /// Every rank takes rank `root`'s parameters, a bucket at a time.
    void broadcast_parameters(int root) {
        hitch::allreduce::call_options call = call_;
        call.check = false;  // the layers were agreed on: the sizes match everywhere
        stream_order(dev_.ordinal(), xdev_.stream(), dev_.stream(), order_.get());
        for (std::size_t b = 0; b < plan_.size(); ++b) {
            copy_parameters(b, true);
            xdev_.synchronize();
            hitch::allreduce::broadcast(group_, data_[b].view(), root, hitch::allreduce::binary_tree{}, call);
            copy_parameters(b, false);
        }
        hand_over();
    }

    // ---- clipping and joins ------------------------------------------------------------------------------------

    /// The sum of the squares of every gradient of `layers` (train/clipping.hpp's, in its order: each layer's
    /// block sums added in block order from 0.0, the layers' sums in layer order). Waits for the device's stream.
    [[nodiscard]] double gradient_sum_of_squares(std::span<const hitch::layer> layers) {
        std::vector<kernels::square_row> rows;
        std::vector<std::size_t> sizes;
        for (const hitch::layer& l : layers) {
            rows.push_back({l.grads.data(), l.grads.size()});
            sizes.push_back(l.grads.size());
        }
        const hitch::cuda::optim::chunk_layout layout = hitch::cuda::optim::make_chunk_layout(sizes);
        const std::size_t chunks = layout.chunks.size();
        std::vector<double> partial(chunks);
        if (chunks != 0) {
            device_buffer<kernels::square_row, cuda::device> d_rows(dev_, rows.size());
            device_buffer<hitch::cuda::optim::chunk_entry, cuda::device> d_chunks(dev_, chunks);
            device_buffer<double, cuda::device> d_partial(dev_, chunks);
            dev_.copy_from_host(d_rows.data(), rows.data(), rows.size() * sizeof(kernels::square_row));
            dev_.copy_from_host(d_chunks.data(), layout.chunks.data(),
                                chunks * sizeof(hitch::cuda::optim::chunk_entry));
            activate();
            const std::uint64_t groups = (chunks + kernels::square_groups - 1) / kernels::square_groups;
            kernels::squares_kernel<<<kernels::chunk_blocks(groups), kernels::square_groups * 16, 0, dev_.stream()>>>(
                d_chunks.data(), chunks, d_rows.data(), d_partial.data());
            hitch::cuda::detail::check_launch("hitch::cuda::train squares_kernel");
            dev_.copy_to_host(partial.data(), d_partial.data(), chunks * sizeof(double));
        }
        double total = 0.0;
        for (std::size_t t = 0; t < sizes.size(); ++t) {
            double layer_sum = 0.0;
            const std::uint64_t first = t < layout.first_chunk.size() ? layout.first_chunk[t] : 0;
            for (std::uint64_t c = 0; c < hitch::cuda::optim::chunk_count(sizes[t]); ++c)
                layer_sum += partial[first + c];
            total += layer_sum;
        }
        return total;
    }

    /// train/clipping.hpp's clip_to_norm: scales every gradient of `layers` (on the device's stream) so the global
    /// norm is at most max_norm; returns the norm before clipping.
    double clip_to_norm(std::span<const hitch::layer> layers, double sum_of_squares, double max_norm) {
        const double norm = std::sqrt(sum_of_squares);
        if (!std::isfinite(norm) || !(norm > max_norm)) return norm;
        const float coefficient = static_cast<float>(max_norm / (norm + 1e-6));
        for (const hitch::layer& l : layers) scale(l.grads.data(), l.grads.size(), coefficient);
        return norm;
    }

    /// g = g * factor over n gradient elements (queued on the device's stream).
    void scale(float* g, std::size_t n, float factor) {
        if (n == 0) return;
        activate();
        kernels::
            scale_kernel<<<hitch::cuda::detail::grid_blocks(n), hitch::cuda::detail::block_threads, 0, dev_.stream()>>>(
                g, n, factor);
        hitch::cuda::detail::check_launch("hitch::cuda::train scale_kernel");
    }

    /// join(): the model's gradients are zero, written on the model's stream (ordered before the step's event).
    void zero_user_gradients() {
        check(cudaSetDevice(dev_.ordinal()), "cudaSetDevice");
        if constexpr (mixed) {
            for (const auto& [p, n] : user_grads_)
                if (n != 0) check(cudaMemsetAsync(p, 0, n * sizeof(Param), compute_), "cudaMemsetAsync");
        } else {
            for (const hitch::layer& l : layers_)
                if (l.size() != 0)
                    check(cudaMemsetAsync(l.grads.data(), 0, l.size() * sizeof(float), compute_), "cudaMemsetAsync");
        }
    }

    // ---- checkpoints -------------------------------------------------------------------------------------------

    /// Bucket b's aggregation state as cc::save_state writes the host's (the codec's blob nested with the
    /// ring's residual), so a host run reads it.
    void save_codec_state(std::size_t b, std::vector<std::byte>& blob) {
        cc::aggregation_state<X> h = host_state(b);
        if constexpr (!plain) {
            device_aggregation<X>& st = states_[b];
            std::vector<std::byte> inner;
            dc_.save_state(xdev_, st.codec, inner);
            codec_.load_state(inner, h.codec);
            if constexpr (needs_ring_residual<X>)
                if (st.count != 0)
                    xdev_.copy_to_host(h.ring_residual.data(), st.ring_residual.data(), st.count * sizeof(float));
        }
        cc::save_state(codec_, h, blob);
    }

    /// Every bucket's saved state, checked by the host codec and moved to the GPU, kept aside (changes nothing).
    [[nodiscard]] pending_states read_codec_states(const hitch::train::checkpoint_reader& r) {
        pending_states pending(plan_.size());
        hitch::train::detail::read_codec_blobs(r, plan_.size(), [&](std::size_t b, std::span<const std::byte> bytes) {
            cc::aggregation_state<X> h = host_state(b);
            cc::load_state(codec_, bytes, h);
            if constexpr (plain) {
                pending[b].emplace();
            } else {
                device_aggregation<X> st = make_state(b);
                std::vector<std::byte> inner;
                codec_.save_state(h.codec, inner);
                dc_.load_state(xdev_, inner, st.codec);
                if constexpr (needs_ring_residual<X>)
                    if (st.count != 0)
                        xdev_.copy_from_host(st.ring_residual.data(), h.ring_residual.data(), st.count * sizeof(float));
                pending[b].emplace(std::move(st));
            }
        });
        return pending;
    }
    /// Puts states read by read_codec_states in use.
    void commit_codec_states(pending_states&& pending) {
        if constexpr (!plain)
            for (std::size_t b = 0; b < plan_.size(); ++b) states_[b] = std::move(*pending[b]);
    }

private:
    using device_codec_type = std::conditional_t<plain, no_state, cc::device_codec<X, cuda::device>>;

    static device_codec_type make_device_codec(const X& codec) {
        if constexpr (plain)
            return {};
        else
            return device_codec_type(codec);
    }

    void activate() { check(cudaSetDevice(dev_.ordinal()), "cudaSetDevice"); }

    /// A fresh device state for bucket b (a low-rank codec learns each layer's matrix shape).
    [[nodiscard]] device_aggregation<X> make_state(std::size_t b)
        requires(!plain)
    {
        const std::vector<cc::matrix_shape> shapes = matrix_shapes(b);
        return make_device_aggregation<X>(xdev_, dc_, plan_[b].elements, shapes);
    }
    /// A fresh host state for bucket b (gradient_exchange::make_codec_state's).
    [[nodiscard]] cc::aggregation_state<X> host_state(std::size_t b) const {
        const std::size_t n = plan_[b].elements;
        if constexpr (requires(const X& x, std::span<const cc::matrix_shape> s) { x.make_state(n, s); }) {
            const std::vector<cc::matrix_shape> shapes = matrix_shapes(b);
            return cc::make_aggregation_state(codec_, codec_.make_state(n, shapes), n);
        } else {
            return cc::make_aggregation_state(codec_, n);
        }
    }
    /// The matrices of bucket b's layers, for a low-rank codec (empty for the others).
    [[nodiscard]] std::vector<cc::matrix_shape> matrix_shapes(std::size_t b) const {
        std::vector<cc::matrix_shape> shapes;
        if constexpr (hitch::low_rank_compressor<X>) {
            for (std::size_t k : plan_[b].layers) {
                const hitch::layer& l = layers_[k];
                if (l.size() == 0) continue;
                const std::size_t rows = l.rows == 0 ? l.size() : l.rows;
                if (l.size() % rows != 0)
                    throw config_error(concat("hitch::data_parallel: layer '", l.name, "' has ", l.size(),
                                              " elements, not a multiple of its rows = ", l.rows));
                shapes.push_back({rows, l.size() / rows});
            }
        }
        return shapes;
    }

    /// The intake's tables in GPU memory: a row per layer (indexed by layer), the chunks of each bucket's layers
    /// (bucket b's are [chunk_first_[b], chunk_first_[b + 1])), a report and an unused flag per layer.
    void build_tables() {
        std::vector<intake_row> rows(layers_.size());
        for (std::size_t b = 0; b < plan_.size(); ++b)
            for (std::size_t i = 0; i < plan_[b].layers.size(); ++i) {
                const std::size_t k = plan_[b].layers[i];
                intake_row& r = rows[k];
                r.g = layers_[k].grads.data();
                if constexpr (mixed) r.low = reinterpret_cast<const std::uint16_t*>(user_grads_[k].first);
                r.sum = window_ > 1 ? sums_[k].data() : nullptr;
                r.packed = data_[b].data() + plan_[b].offsets[i];
                r.n = layers_[k].size();
            }
        std::vector<std::size_t> sizes;
        for (const hitch::layer& l : layers_) sizes.push_back(l.size());
        const intake_layout layout = make_intake_layout(plan_, sizes);
        const std::vector<hitch::cuda::optim::chunk_entry>& chunks = layout.chunks;
        chunk_first_ = layout.first;
        rows_ = device_buffer<intake_row, cuda::device>(xdev_, rows.size());
        chunks_ = device_buffer<hitch::cuda::optim::chunk_entry, cuda::device>(xdev_, chunks.size());
        reports_ = device_buffer<intake_report, cuda::device>(xdev_, layers_.size());
        unused_ = device_buffer<std::uint8_t, cuda::device>(xdev_, layers_.size());
        if (!rows.empty()) xdev_.copy_from_host(rows_.data(), rows.data(), rows.size() * sizeof(intake_row));
        if (!chunks.empty())
            xdev_.copy_from_host(chunks_.data(), chunks.data(),
                                 chunks.size() * sizeof(hitch::cuda::optim::chunk_entry));
        unused_host_.assign(layers_.size(), 0);
        host_reports_.resize(layers_.size());
    }

    [[nodiscard]] intake_scalars scalars(std::optional<float> inv, bool pack) const {
        intake_scalars k;
        k.inv = inv.value_or(1.0f);
        k.scale = inv ? 1u : 0u;
        k.locate = inv ? 0u : 1u;
        k.taken = static_cast<std::uint32_t>(window_ > 1 ? taken_ : 0);
        k.count = static_cast<float>(taken_ + 1);
        k.pack = pack ? 1u : 0u;
        return k;
    }

    /// The unused flags of layers [lo, lo + count), uploaded when they changed.
    template <class Unused>
    void upload_unused(std::size_t lo, std::size_t count, Unused& unused) {
        bool changed = false;
        for (std::size_t k = lo; k < lo + count; ++k) {
            const std::uint8_t u = unused(k) ? 1 : 0;
            changed |= u != unused_host_[k];
            unused_host_[k] = u;
        }
        if (changed) xdev_.copy_from_host(unused_.data() + lo, unused_host_.data() + lo, count);
    }

    /// take (and capture, without loss scaling) over chunks [c0, c1) of the rows [lo, lo + count).
    void launch_take(std::uint64_t c0, std::uint64_t c1, std::size_t lo, std::size_t count, const intake_scalars& k) {
        activate();
        kernels::reset_reports_kernel<<<hitch::cuda::detail::grid_blocks(count), hitch::cuda::detail::block_threads, 0,
                                        xdev_.stream()>>>(reports_.data() + lo, count);
        hitch::cuda::detail::check_launch("hitch::cuda::train reset_reports_kernel");
        if (c1 > c0) {
            kernels::take_kernel<is_half>
                <<<kernels::chunk_blocks(c1 - c0), kernels::chunk_threads, 0, xdev_.stream()>>>(
                    chunks_.data() + c0, c1 - c0, rows_.data(), unused_.data(), k, reports_.data());
            hitch::cuda::detail::check_launch("hitch::cuda::train take_kernel");
        }
        if (k.locate != 0) {
            kernels::capture_kernel<<<hitch::cuda::detail::grid_blocks(count), hitch::cuda::detail::block_threads, 0,
                                      xdev_.stream()>>>(rows_.data() + lo, reports_.data() + lo, count);
            hitch::cuda::detail::check_launch("hitch::cuda::train capture_kernel");
        }
    }
    /// mean and pack over chunks [c0, c1).
    void launch_finish(std::uint64_t c0, std::uint64_t c1, const intake_scalars& k) {
        if (c1 <= c0 || (k.taken == 0 && k.pack == 0)) return;
        activate();
        kernels::finish_kernel<<<kernels::chunk_blocks(c1 - c0), kernels::chunk_threads, 0, xdev_.stream()>>>(
            chunks_.data() + c0, c1 - c0, rows_.data(), k);
        hitch::cuda::detail::check_launch("hitch::cuda::train finish_kernel");
    }
    /// Copies the reports of layers [lo, lo + count) to the host (waits for the exchange stream).
    void read_reports(std::size_t lo, std::size_t count) {
        xdev_.copy_to_host(host_reports_.data() + lo, reports_.data() + lo, count * sizeof(intake_report));
    }
    /// What layer k's gradient looked like (gradient_intake's take_own), from its report.
    [[nodiscard]] hitch::train::detail::intake_verdict verdict(std::size_t k, bool scaled) const {
        hitch::train::detail::intake_verdict v;
        if (unused_host_[k] != 0) return v;
        const intake_report& r = host_reports_[k];
        v.bad = r.bad != 0;
        if (!scaled && r.first != ~0ull)
            v.report = {static_cast<std::int64_t>(k), static_cast<std::int64_t>(r.first), r.value};
        return v;
    }
    static void merge(hitch::train::detail::intake_verdict& into, const hitch::train::detail::intake_verdict& from) {
        into.bad |= from.bad;
        if (into.report.layer < 0) into.report = from.report;
    }

    /// Bucket b's layers' parameters into the bucket (`in`) or back out of it, on the exchange stream.
    void copy_parameters(std::size_t b, bool in) {
        for (std::size_t i = 0; i < plan_[b].layers.size(); ++i) {
            const hitch::layer& l = layers_[plan_[b].layers[i]];
            float* at = data_[b].data() + plan_[b].offsets[i];
            if (in)
                xdev_.copy(at, l.params.data(), l.size() * sizeof(float));
            else
                xdev_.copy(l.params.data(), at, l.size() * sizeof(float));
        }
    }

    /// The schedule's all-reduce-average of `data` (its writes complete), counting the bytes the schedule sends.
    void average_view(tensor_view<float> data, const S& schedule) {
        if (data.empty()) return;
        hitch::allreduce::allreduce(group_, data, hitch::allreduce::reduce_op::average, schedule, call_);
        const hitch::allreduce::cost_constants k = group_.constants().value_or(hitch::allreduce::cost_constants{});
        bytes_sent_ +=
            static_cast<std::uint64_t>(hitch::allreduce::cost_on(schedule, shape_, data.size_bytes(), k).sent_bytes);
    }

    cuda::device& dev_;
    cuda::device xdev_;  // the same GPU, the exchange's own stream; before everything it allocates
    hitch::allreduce::group<C>& group_;
    hitch::allreduce::level_shape shape_;
    hitch::allreduce::call_options call_{};
    X codec_;
    device_codec_type dc_;
    std::span<const hitch::layer> layers_;
    std::vector<hitch::train::bucket_plan> plan_;
    hitch::train::timeline* trace_;
    std::uint64_t window_;
    std::uint64_t taken_ = 0;
    cudaStream_t compute_;
    hitch::train::detail::ready_events<layer_events> events_;
    device_spans spans_;
    owned_event order_;
    cc::exchange_kind kind_ = cc::exchange_kind::allreduce;
    std::vector<std::pair<Param*, std::size_t>> user_grads_;  // mixed precision: the model's gradients
    std::vector<std::size_t> bucket_of_layer_;
    std::vector<bucket> buckets_;
    std::vector<gpu_floats> data_;                              // each bucket's buffer
    std::vector<codec_state> states_;                           // each bucket's codec state (none for cc::none)
    std::vector<gpu_floats> sums_;                              // accumulation: each layer's sum over the window
    std::vector<hitch::train::detail::intake_verdict> sticky_;  // accumulation: each layer's window so far
    device_buffer<intake_row, cuda::device> rows_;
    device_buffer<hitch::cuda::optim::chunk_entry, cuda::device> chunks_;
    std::vector<std::uint64_t> chunk_first_;
    device_buffer<intake_report, cuda::device> reports_;
    device_buffer<std::uint8_t, cuda::device> unused_;
    std::vector<std::uint8_t> unused_host_;
    std::vector<intake_report> host_reports_;
    std::atomic<std::uint64_t> bytes_sent_{0};
};

}  // namespace hitch::cuda::train
