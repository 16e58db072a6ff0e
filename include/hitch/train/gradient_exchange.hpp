#pragma once
// data_parallel's gradient buckets and the collectives that average them over ranks: the fixed plan (buckets.hpp),
// each bucket's staging buffer and aggregation state, and the exchange itself, through the codec
// (compress::aggregate) or, for compress::none, as a plain all-reduce. Bytes put on the wire are counted here.

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

#include "hitch/allreduce/collectives.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/amp/nonfinite.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/aggregate.hpp"
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
    };

    /// `group` and `layers` must outlive the exchange.
    gradient_exchange(allreduce::group<C>& group, const X& codec, std::span<const hitch::layer> layers,
                      std::size_t bucket_bytes, bool check_collectives, timeline* trace_to)
        : group_(group),
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
        if constexpr (plain_float_v<X>) {
            average(data, schedule);
        } else {
            auto span = trace(timeline_, "compress + exchange", "compress");
            compress::aggregate_options ao;
            ao.average = true;
            ao.call = call_;
            const compress::aggregation_stats stats =
                compress::aggregate(group_, codec_, *bk.codec_state, data, schedule, ao);
            bytes_sent_ += stats.sent_bytes;
        }
    }

    /// All-reduce-averages `data` over ranks.
    void average(tensor_view<float> data, const S& schedule) {
        if (data.empty()) return;
        allreduce::allreduce(group_, data, allreduce::reduce_op::average, schedule, call_);
        const allreduce::cost_constants k = group_.constants().value_or(allreduce::cost_constants{});
        bytes_sent_ += static_cast<std::uint64_t>(schedule.cost(group_.size(), data.size_bytes(), k).sent_bytes);
    }

    /// Copies the layers' gradients out of bucket b after its exchange.
    void unpack_gradients(std::size_t b) const {
        for (std::size_t i = 0; i < plan_[b].layers.size(); ++i) {
            const hitch::layer& l = layers_[plan_[b].layers[i]];
            std::memcpy(l.grads.data(), buckets_[b].data.data() + plan_[b].offsets[i], l.size() * sizeof(float));
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
    allreduce::group<C>& group_;
    allreduce::call_options call_{};
    X codec_;
    std::span<const hitch::layer> layers_;
    std::vector<bucket_plan> plan_;
    std::vector<std::size_t> bucket_of_layer_;
    std::vector<bucket> buckets_;
    timeline* timeline_;
    std::atomic<std::uint64_t> bytes_sent_{0};
};

}  // namespace hitch::train::detail
