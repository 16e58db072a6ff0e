#pragma once
// data_parallel's gradient buckets and the collectives that average them over ranks: the fixed plan (buckets.hpp),
// each bucket's staging buffer and aggregation state, and the exchange itself, through the codec
// (compress::aggregate) or, for compress::none, as a plain all-reduce. Bytes put on the wire are counted here.
//
// Under ZeRO (Rajbhandari et al., SC'20) rank r owns block partition(n, p, r) of every bucket of n elements: its
// optimizer steps those pieces of the layers. Stage 2 reduce-scatters the buckets (rank r receives the average of
// its block only); both stages all-gather the parameters after the step, a bucket at a time, with the buckets'
// buffers as staging. The reduce-scatter and all-gather are the ring's (Patarasuk and Yuan 2009): the bandwidth
// optimal pair, and the schedules with a reduce-scatter of their own have none that cuts the same blocks.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "hitch/allreduce/binary_tree.hpp"
#include "hitch/allreduce/collectives.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/partition.hpp"
#include "hitch/amp/nonfinite.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/aggregate.hpp"
#include "hitch/optim/sharded.hpp"
#include "hitch/train/buckets.hpp"
#include "hitch/train/timeline.hpp"

namespace hitch::train::detail {

/// compress::none skips the codec machinery: its buckets are all-reduced as they are.
template <compressor X>
inline constexpr bool plain_float_v = std::is_same_v<X, compress::none>;

template <compressor X, class S, communicator C>
class gradient_exchange {
public:
    struct bucket {
        std::vector<float> data;
        std::optional<compress::aggregation_state<X>> codec_state;
        bool local_bad = false;  // this rank's gradients in it were not finite (it was sent as zeros)
        amp::detail::nonfinite_report report{};
        /// The exchange that carried its last call (compress::aggregate's choice; allreduce for compress::none).
        std::optional<compress::exchange_kind> exchange;
    };

    /// `group` and `layers` must outlive the exchange; `nodes` is the group's node layout (what the bytes sent are
    /// counted on: hierarchical's depend on it).
    gradient_exchange(allreduce::group<C>& group, const X& codec, std::span<const hitch::layer> layers,
                      std::size_t bucket_bytes, bool check_collectives, timeline* trace_to, const node_layout& nodes)
        : group_(group),
          shape_(allreduce::level_shape::of(nodes)),
          codec_(codec),
          layers_(layers),
          plan_(plan_buckets(layers, bucket_bytes)),
          timeline_(trace_to) {
        call_.check = check_collectives;
        bucket_of_layer_.assign(layers_.size(), 0);
        for (std::size_t b = 0; b < plan_.size(); ++b)
            for (std::size_t k : plan_[b].layers) bucket_of_layer_[k] = b;
        buckets_.resize(plan_.size());
        for (std::size_t b = 0; b < plan_.size(); ++b) {
            buckets_[b].data.assign(plan_[b].elements, 0.0f);
            buckets_[b].codec_state.emplace(make_codec_state(b));
        }
    }

    [[nodiscard]] std::size_t size() const noexcept { return plan_.size(); }
    [[nodiscard]] const bucket_plan& plan(std::size_t b) const { return plan_[b]; }
    [[nodiscard]] std::size_t bucket_of(std::size_t layer) const { return bucket_of_layer_[layer]; }
    [[nodiscard]] bucket& operator[](std::size_t b) { return buckets_[b]; }
    [[nodiscard]] const bucket& operator[](std::size_t b) const { return buckets_[b]; }
    [[nodiscard]] const X& codec() const noexcept { return codec_; }
    /// Bytes sent since the last call.
    [[nodiscard]] std::uint64_t take_bytes_sent() noexcept { return bytes_sent_.exchange(0); }

    /// Replaces bucket b's data by the average over ranks of everyone's (encoded, exchanged, decoded) data. The
    /// path follows from the codec's traits (compress::aggregate): an all-reduce of additive codecs, PowerSGD's two
    /// all-reduces, the compression-aware ring, or an all-gather of the messages.
    void exchange(std::size_t b, const S& schedule) {
        bucket& bk = buckets_[b];
        const tensor_view<float> data(bk.data.data(), bk.data.size());
        if (scatter_) {
            if constexpr (plain_float_v<X>) {
                (void)allreduce::reduce_scatter(group_, data, allreduce::reduce_op::average, call_);
                const std::size_t p = static_cast<std::size_t>(group_.size());
                bytes_sent_ += static_cast<std::uint64_t>((p - 1) * (data.size_bytes() / p));
            }
            return;
        }
        if constexpr (plain_float_v<X>) {
            average(data, schedule);
            bk.exchange = compress::exchange_kind::allreduce;
        } else {
            auto span = trace(timeline_, "compress + exchange", "compress");
            compress::aggregate_options ao;
            ao.average = true;
            ao.call = call_;
            const compress::aggregation_stats stats =
                compress::aggregate(group_, codec_, *bk.codec_state, data, schedule, ao);
            bytes_sent_ += stats.sent_bytes;
            bk.exchange = stats.exchange;
            span.arg("exchange", compress::name(stats.exchange));
        }
    }

    /// All-reduce-averages `data` over ranks.
    void average(tensor_view<float> data, const S& schedule) {
        if (data.empty()) return;
        allreduce::allreduce(group_, data, allreduce::reduce_op::average, schedule, call_);
        const allreduce::cost_constants k = group_.constants().value_or(allreduce::cost_constants{});
        bytes_sent_ +=
            static_cast<std::uint64_t>(allreduce::cost_on(schedule, shape_, data.size_bytes(), k).sent_bytes);
    }

    /// Copies the layers' gradients out of bucket b after its exchange (after a reduce-scatter: this rank's block).
    void unpack_gradients(std::size_t b) const {
        const allreduce::block mine = scatter_ ? own_block(b) : allreduce::block{0, plan_[b].elements};
        for_each_overlap(b, mine, [&](const hitch::layer& l, std::size_t at, std::size_t in_bucket, std::size_t n) {
            std::memcpy(l.grads.data() + at, buckets_[b].data.data() + in_bucket, n * sizeof(float));
        });
    }

    // ---- ZeRO ----

    /// Stage 2: exchange() reduce-scatters instead of all-reducing (compress::none only).
    void set_reduce_scatter(bool on) noexcept { scatter_ = on; }
    /// This rank's block of bucket b.
    [[nodiscard]] allreduce::block own_block(std::size_t b) const {
        return allreduce::partition(plan_[b].elements, group_.size(), group_.rank());
    }
    /// This rank's pieces of the layers: its blocks of every bucket.
    [[nodiscard]] std::vector<optim::piece> own_pieces() const {
        std::vector<optim::piece> out;
        for (std::size_t b = 0; b < plan_.size(); ++b)
            for_each_overlap(b, own_block(b), [&](const hitch::layer& l, std::size_t at, std::size_t, std::size_t n) {
                out.push_back({static_cast<std::size_t>(&l - layers_.data()), at, at + n});
            });
        return out;
    }
    /// Every rank gets every rank's pieces of the parameters `params` (a view per layer, of the layer's size: the
    /// FP32 parameters, or an FP16 or BF16 model's own): per bucket, this rank's block in, an all-gather, all out,
    /// with the bucket's buffer as staging (T is at most 4 bytes). Counts the bytes sent.
    template <class T>
    void allgather_parameters(std::span<const tensor_view<T>> params) {
        static_assert(sizeof(T) <= sizeof(float));
        const std::size_t p = static_cast<std::size_t>(group_.size());
        const auto index = [&](const hitch::layer& l) { return static_cast<std::size_t>(&l - layers_.data()); };
        for (std::size_t b = 0; b < plan_.size(); ++b) {
            T* staging = reinterpret_cast<T*>(buckets_[b].data.data());
            for_each_overlap(b, own_block(b),
                             [&](const hitch::layer& l, std::size_t at, std::size_t in_bucket, std::size_t n) {
                                 std::memcpy(staging + in_bucket, params[index(l)].data() + at, n * sizeof(T));
                             });
            allreduce::allgather(group_, tensor_view<T>(staging, plan_[b].elements), call_);
            bytes_sent_ += static_cast<std::uint64_t>((p - 1) * (plan_[b].elements * sizeof(T) / p));
            for_each_overlap(b, {0, plan_[b].elements},
                             [&](const hitch::layer& l, std::size_t at, std::size_t in_bucket, std::size_t n) {
                                 std::memcpy(params[index(l)].data() + at, staging + in_bucket, n * sizeof(T));
                             });
        }
    }

    /// Every rank takes rank `root`'s parameters, a bucket at a time, with the buckets' buffers as staging.
    void broadcast_parameters(int root) {
        allreduce::call_options call = call_;
        call.check = false;  // the layers were agreed on: the sizes match everywhere
        for (std::size_t b = 0; b < plan_.size(); ++b) {
            bucket& bk = buckets_[b];
            for_each_overlap(b, {0, plan_[b].elements},
                             [&](const hitch::layer& l, std::size_t at, std::size_t in_bucket, std::size_t n) {
                                 std::memcpy(bk.data.data() + in_bucket, l.params.data() + at, n * sizeof(float));
                             });
            allreduce::broadcast(group_, tensor_view<float>(bk.data.data(), bk.data.size()), root,
                                 allreduce::binary_tree{}, call);
            for_each_overlap(b, {0, plan_[b].elements},
                             [&](const hitch::layer& l, std::size_t at, std::size_t in_bucket, std::size_t n) {
                                 std::memcpy(l.params.data() + at, bk.data.data() + in_bucket, n * sizeof(float));
                             });
        }
    }

    /// Averages every parameter over ranks, a bucket at a time, with the buckets' buffers as staging.
    void average_parameters(const S& schedule) {
        for (std::size_t b = 0; b < plan_.size(); ++b) {
            bucket& bk = buckets_[b];
            for (std::size_t i = 0; i < plan_[b].layers.size(); ++i) {
                const hitch::layer& l = layers_[plan_[b].layers[i]];
                std::memcpy(bk.data.data() + plan_[b].offsets[i], l.params.data(), l.size() * sizeof(float));
            }
            average(tensor_view<float>(bk.data.data(), bk.data.size()), schedule);
            for (std::size_t i = 0; i < plan_[b].layers.size(); ++i) {
                const hitch::layer& l = layers_[plan_[b].layers[i]];
                std::memcpy(l.params.data(), bk.data.data() + plan_[b].offsets[i], l.size() * sizeof(float));
            }
        }
    }

    /// A fresh aggregation state for bucket b; a low-rank codec learns each layer's matrix shape.
    [[nodiscard]] compress::aggregation_state<X> make_codec_state(std::size_t b) const {
        const std::size_t n = plan_[b].elements;
        if constexpr (requires(const X& x, std::span<const compress::matrix_shape> s) { x.make_state(n, s); }) {
            std::vector<compress::matrix_shape> shapes;
            for (std::size_t k : plan_[b].layers) {
                const hitch::layer& l = layers_[k];
                if (l.size() == 0) continue;
                const std::size_t rows = l.rows == 0 ? l.size() : l.rows;
                if (l.size() % rows != 0)
                    throw config_error(hitch::detail::concat("hitch::data_parallel: layer '", l.name, "' has ",
                                                             l.size(),
                                                             " elements, not a multiple of its rows = ", l.rows));
                shapes.push_back({rows, l.size() / rows});
            }
            return compress::make_aggregation_state(codec_, codec_.make_state(n, shapes), n);
        } else {
            return compress::make_aggregation_state(codec_, n);
        }
    }

private:
    /// fn(layer, offset in the layer, offset in the bucket, count) for each layer of bucket b that meets `range`.
    template <class Fn>
    void for_each_overlap(std::size_t b, allreduce::block range, Fn&& fn) const {
        for (std::size_t i = 0; i < plan_[b].layers.size(); ++i) {
            const hitch::layer& l = layers_[plan_[b].layers[i]];
            const std::size_t lo = std::max(range.offset, plan_[b].offsets[i]);
            const std::size_t hi = std::min(range.offset + range.count, plan_[b].offsets[i] + l.size());
            if (lo < hi) fn(l, lo - plan_[b].offsets[i], lo, hi - lo);
        }
    }

    allreduce::group<C>& group_;
    allreduce::level_shape shape_;
    allreduce::call_options call_{};
    X codec_;
    std::span<const hitch::layer> layers_;
    std::vector<bucket_plan> plan_;
    std::vector<std::size_t> bucket_of_layer_;
    std::vector<bucket> buckets_;
    timeline* timeline_;
    std::atomic<std::uint64_t> bytes_sent_{0};
    bool scatter_ = false;
};

}  // namespace hitch::train::detail
