#pragma once
// data_parallel on a device whose memory the host cannot read (a GPU): the trait its engine takes the device's
// gradient machinery from, and the checks that refuse, at construction, what the device path does not run.
//
// hitch::train::device_training<D> is specialised in the device's tree (hitch/cuda/train/data_parallel.cuh for
// hitch::cuda::device); this floor knows no device. A specialisation offers
//
//   static void begin(D&, void* compute_stream);      before the engine reads the model: waits for the work queued on
//                                                      the model's stream (its parameters are written)
//   template <compressor X, class S, communicator C, floating_element Param> class gradients;
//       the buckets in device memory, the intake of each layer's gradient (unscale, widen, checks, accumulation),
//       the exchange (the collectives' device backend, the device codecs), the gradient events, the device's
//       share of clipping, joins, checkpoints and the timeline; constructed as
//       gradients(D&, allreduce::group<C>&, const X& codec, const S& schedule, const master_weights<Param, D>&,
//                 const device_settings&)
//       (hitch/cuda/train/gradients.cuh documents its members).
//
// The checks (check_device_options) are host code, so a host test pins their sentences without a GPU.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "hitch/concepts/compressor.hpp"
#include "hitch/concepts/sync_policy.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/exchange/aggregation.hpp"
#include "hitch/exchange/pairing.hpp"
#include "hitch/sync/server/options.hpp"
#include "hitch/train/options.hpp"
#include "hitch/train/timeline.hpp"

namespace hitch::train {

namespace detail {
template <class... T>
inline constexpr bool device_dependent_false = false;
}  // namespace detail

/// How data_parallel trains on device D (see the file comment). Specialised per device.
template <class D>
struct device_training {
    static_assert(detail::device_dependent_false<D>,
                  "hitch::data_parallel: no training machinery for this device is visible here. For "
                  "hitch::cuda::device, include <hitch/cuda/train/data_parallel.cuh> (and the .cuh of your optimizer "
                  "and codec, e.g. <hitch/cuda/optim/adam.cuh>, <hitch/cuda/compress/topk.cuh>) in the .cu file that "
                  "constructs data_parallel; for a device of your own, specialise hitch::train::device_training<D> "
                  "(see hitch/train/device_training.hpp)");
};

/// What the engine tells the device's gradient machinery.
struct device_settings {
    std::size_t bucket_bytes = 0;
    bool check_collectives = true;
    timeline* trace = nullptr;
    node_layout nodes;
    /// Micro-batches per optimizer step (accumulation_steps).
    std::uint64_t window = 1;
    /// The model's stream (a cudaStream_t for hitch::cuda::device); null: the device's own.
    void* compute_stream = nullptr;
};

namespace detail {

using hitch::detail::concat;

/// The exchange a device runs for a codec whose path is `path` over a schedule of shape `shape`. The all-reduce
/// paths (none, the additive codecs, PowerSGD) run the schedule's own all-reduce on device buffers; the codecs that
/// are re-encoded in transit or gathered run the ring: the compression-aware ring and the ring all-gather of the
/// messages, whose messages are staged through host memory (they are bytes, and small). `automatic` takes the ring
/// for them; the other shapes (halving-doubling, recursive doubling, hierarchical) merge or re-encode on host sets,
/// and are refused (nullopt).
[[nodiscard]] constexpr std::optional<compress::exchange_kind> device_exchange_for(compress::aggregation_path path,
                                                                                   compress::exchange_shape shape) {
    using compress::aggregation_path;
    using compress::exchange_kind;
    using compress::exchange_shape;
    if (path == aggregation_path::allreduce) return exchange_kind::allreduce;
    if (path == aggregation_path::low_rank) return exchange_kind::low_rank;
    if (shape != exchange_shape::ring && shape != exchange_shape::automatic) return std::nullopt;
    return path == aggregation_path::compressed_ring ? exchange_kind::compressed_ring : exchange_kind::allgather_ring;
}

/// The shape schedule `s` lends the compressed exchanges.
template <class S>
[[nodiscard]] compress::exchange_shape shape_of(const S& s) {
    if constexpr (compress::shape_chosen_at_run_time<S>)
        return s.exchange_shape();
    else
        return compress::exchange_shape_of<S>;
}

/// The schedule's name for messages.
template <class S>
[[nodiscard]] std::string_view schedule_name_of(const S& s) {
    if constexpr (requires { s.chosen(); })
        return s.chosen();
    else if constexpr (requires { S::name; })
        return S::name;
    else
        return "this schedule";
}

/// Refuses, with config_error naming the option (or the policy, or the codec and schedule) and what works, every
/// configuration the device path of data_parallel does not run. `device` is the device's name ("cuda").
template <class O, class X, class P, class S>
void check_device_options(const data_parallel_options<O, X, P, S>& o, std::string_view device) {
    const auto refuse = [&](auto&&... what) {
        throw config_error(concat("hitch::data_parallel on ", device, ": ", what...));
    };
    if constexpr (sync::server_policy<P>)
        refuse("the sync policy '", P::name,
               "' exchanges with a parameter server, whose shards are host code; on the GPU the sync policies are "
               "hard and local_sgd (train '",
               P::name, "' with hitch::cpu)");
    if constexpr (shared_memory_policy<P>)
        refuse("the sync policy '", P::name,
               "' updates one parameter array in host memory shared by the ranks' threads; on the GPU the sync "
               "policies are hard and local_sgd");
    if (o.zero_stage != 0)
        refuse("option zero_stage = ", o.zero_stage,
               " shards the optimizer state in host memory; on the GPU every rank keeps the whole state (zero_stage "
               "= 0)");
    if (o.check_gradient_contract)
        refuse(
            "option check_gradient_contract = true takes a CRC32C of each gradient on the host when "
            "gradient_ready is called; on the GPU gradient_ready only records an event (the gradient may not be "
            "computed yet): set it to false");
    constexpr compress::aggregation_path path = compress::aggregation_path_of<X>;
    if constexpr (path == compress::aggregation_path::compressed_ring ||
                  path == compress::aggregation_path::allgather) {
        const compress::exchange_shape shape = shape_of(o.schedule);
        if (!device_exchange_for(path, shape)) {
            const bool ring = path == compress::aggregation_path::compressed_ring;
            const std::optional<compress::exchange_kind> host = compress::exchange_for(path, shape);
            refuse("the codec '", X::name, "' is ",
                   ring ? "re-encoded at every hop of the compression-aware ring"
                        : "exchanged by the ring all-gather of its messages",
                   " on the GPU; the schedule '", schedule_name_of(o.schedule), "' ",
                   host ? concat("selects ", compress::name(*host), ", which ")
                        : std::string("has no compressed form, and "),
                   ring ? "re-encodes" : "merges", " on host memory: use allreduce::ring or allreduce::automatic");
        }
    }
}

/// A host device has no streams: options.compute_stream must stay null.
template <class O, class X, class P, class S>
void check_host_options(const data_parallel_options<O, X, P, S>& o, std::string_view device) {
    if (o.compute_stream != nullptr)
        throw config_error(concat("hitch::data_parallel on ", device,
                                  ": option compute_stream names a stream, and this device has none (it is for "
                                  "hitch::cuda::device): leave it null"));
}

}  // namespace detail

}  // namespace hitch::train
