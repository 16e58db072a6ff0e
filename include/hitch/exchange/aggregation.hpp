#pragma once
// What the compressed exchange keeps and reports per bucket: the path a codec's traits select, the
// per-bucket state (the codec's state, the compressed ring's residual, reusable buffers), the options of a call
// and what it did. The paths themselves are in exchange/allgather.hpp, additive.hpp, low_rank.hpp and
// compressed_ring.hpp; exchange/aggregate.hpp picks one.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/allreduce/group.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/exchange/detail/sparse_set.hpp"

namespace hitch::compress {

/// The aggregation algorithms.
enum class aggregation_path : std::uint8_t { allreduce = 1, low_rank = 2, allgather = 3, compressed_ring = 4 };

[[nodiscard]] constexpr std::string_view name(aggregation_path p) noexcept {
    switch (p) {
        case aggregation_path::allreduce:
            return "allreduce";
        case aggregation_path::low_rank:
            return "low_rank";
        case aggregation_path::allgather:
            return "allgather";
        case aggregation_path::compressed_ring:
            return "compressed_ring";
    }
    return "invalid-path";
}

/// The exchange that carried a call: the shape the compressed messages travelled in. The codec's path (above)
/// and the schedule together select it (exchange/aggregate.hpp); the trainers report it per bucket.
enum class exchange_kind : std::uint8_t {
    /// Additive codecs: the schedule's own all-reduce of the encoded elements.
    allreduce = 1,
    /// PowerSGD: P and Q each all-reduced by the schedule.
    low_rank = 2,
    /// Ring codecs: the compression-aware ring (re-encode at every hop).
    compressed_ring = 3,
    /// Ring codecs: recursive halving with re-encoding, then recursive doubling of the final messages.
    compressed_halving_doubling = 4,
    /// Ring codecs: exact sum inside each node, the compressed ring between node leaders, the leaders' result
    /// back to their nodes.
    compressed_hierarchical = 5,
    /// All-gather codecs: every rank's message around a ring, then decode-and-add in rank order.
    allgather_ring = 6,
    /// All-gather codecs: recursive doubling over merged sparse sets that turn dense once the union stops being
    /// sparse (SparCML).
    sparse_recursive_doubling = 7,
    /// All-gather codecs: the node's messages merged at its leader, the leaders' sparse recursive doubling, the
    /// result back to their nodes.
    sparse_hierarchical = 8,
};

[[nodiscard]] constexpr std::string_view name(exchange_kind e) noexcept {
    switch (e) {
        case exchange_kind::allreduce:
            return "allreduce";
        case exchange_kind::low_rank:
            return "low_rank";
        case exchange_kind::compressed_ring:
            return "compressed_ring";
        case exchange_kind::compressed_halving_doubling:
            return "compressed_halving_doubling";
        case exchange_kind::compressed_hierarchical:
            return "compressed_hierarchical";
        case exchange_kind::allgather_ring:
            return "allgather_ring";
        case exchange_kind::sparse_recursive_doubling:
            return "sparse_recursive_doubling";
        case exchange_kind::sparse_hierarchical:
            return "sparse_hierarchical";
    }
    return "invalid-exchange";
}

namespace detail {

template <class Codec>
struct is_error_feedback : std::false_type {};
template <class Codec>
struct is_error_feedback<error_feedback<Codec>> : std::true_type {};

/// The codec that encodes at the hops of the compressed ring: the inner codec of error_feedback<X>, else itself.
template <class Codec>
struct ring_codec {
    using type = Codec;
};
template <class Codec>
struct ring_codec<error_feedback<Codec>> {
    using type = Codec;
};

inline constexpr std::string_view aggregate_who = "hitch::compress::aggregate";

}  // namespace detail

/// Whether the compressed ring keeps a residual at every hop: for codecs that need error feedback (biased ones such as
/// onebit, whose compression is a contraction) and for any codec the user wrapped in error_feedback. Unbiased
/// quantisers (qsgd, terngrad) re-encode at each hop without one: error feedback on an unbiased quantiser whose
/// variance exceeds the energy of its input (QSGD with s = 7 on groups of 512: up to 3.2 ||v||^2) is not a
/// contraction, its residual grows step after step, while unbiased hops keep the sum unbiased.
template <class Codec>
inline constexpr bool ring_hop_feedback = detail::is_error_feedback<Codec>::value || Codec::needs_error_feedback;

/// The path `aggregate` takes for Codec.
template <class Codec>
inline constexpr aggregation_path aggregation_path_of = [] {
    if constexpr (low_rank_compressor<Codec>)
        return aggregation_path::low_rank;
    else if constexpr (Codec::additive)
        return aggregation_path::allreduce;
    else if constexpr (Codec::ring_compressible)
        return aggregation_path::compressed_ring;
    else
        return aggregation_path::allgather;
}();

/// Per-bucket state of the aggregation: the codec's state, the ring's residual, and reusable buffers.
template <class Codec>
struct aggregation_state {
    typename Codec::state codec;
    std::size_t count = 0;
    /// This rank's residual at the hops of the compressed ring (unused when Codec is error_feedback<X>, whose own
    /// residual serves, or on the other paths).
    std::vector<float> ring_residual;
    std::vector<float> ring_next;
    // workspace
    std::vector<std::byte> message;
    std::vector<float> accumulator, scratch, p, q;
    std::vector<std::vector<std::byte>> messages;
    // sparse exchanges
    /// This rank's sparse set, a received one and a merge's result, and the wire buffers, kept between calls so a
    /// bucket's sparse exchange reuses its memory (exchange/sparse_recursive_doubling.hpp).
    detail::sparse_set sparse_own, sparse_received, sparse_merged;
    std::vector<std::byte> sparse_out, sparse_in;
    // compressed shapes
    /// A decoded half (compressed_halving_doubling); the node's exact sum at its leader (compressed_hierarchical).
    std::vector<float> shape_values;
};

/// What one call did.
struct aggregation_stats {
    aggregation_path path = aggregation_path::allgather;
    /// The exchange that carried the call.
    exchange_kind exchange = exchange_kind::allgather_ring;
    /// Bytes of this rank's encoded contribution (its message, or the elements it all-reduced).
    std::size_t message_bytes = 0;
    /// Bytes this rank sent, where the path moves its own messages (allgather: the blobs it forwarded; ring: every
    /// hop's message); for the all-reduce paths, the bytes the schedule's all-reduce carries per rank in a ring,
    /// 2 (p - 1) / p of the summed elements.
    std::size_t sent_bytes = 0;
};

struct aggregate_options {
    /// Divide the sum by the number of ranks.
    bool average = false;
    /// Options of the collectives (agreement checks, deadline).
    allreduce::call_options call{};
};

/// A state for a bucket of `count` elements.
template <compressor Codec>
[[nodiscard]] aggregation_state<Codec> make_aggregation_state(const Codec& codec, std::size_t count) {
    return make_aggregation_state(codec, codec.make_state(count), count);
}
/// A state around a codec state made elsewhere (e.g. powersgd's make_state(count, shapes)).
template <compressor Codec>
[[nodiscard]] aggregation_state<Codec> make_aggregation_state(const Codec&, typename Codec::state codec_state,
                                                              std::size_t count) {
    aggregation_state<Codec> s;
    s.codec = std::move(codec_state);
    s.count = count;
    if constexpr (aggregation_path_of<Codec> == aggregation_path::compressed_ring &&
                  !detail::is_error_feedback<Codec>::value && ring_hop_feedback<Codec>) {
        s.ring_residual.assign(count, 0.0f);
        s.ring_next.assign(count, 0.0f);
    }
    return s;
}

}  // namespace hitch::compress
