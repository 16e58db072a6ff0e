#pragma once
// Compression-aware aggregation: every rank passes its bucket; every rank gets the sum over ranks of what the
// codec delivers (optionally the mean). The codec's traits select a path and the schedule gives it its shape
// (exchange/pairing.hpp has the table):
//
//   low_rank_compressor (powersgd)      P summed by the schedule's all-reduce, orthogonalised, Q summed by it
//   additive (none, fp16, bf16, randomk and their error_feedback)
//                                       the encoded elements summed in transit by the schedule's all-reduce
//   ring_compressible (onebit, qsgd, terngrad and their error_feedback)
//                                       re-encoded at every hop: compressed_ring (ring), compressed_halving_doubling
//                                       (rabenseifner), compressed_hierarchical (hierarchical)
//   otherwise (threshold, topk, dgc, ...)
//                                       messages gathered and decoded: allgather_ring (ring), sparse_recursive_doubling
//                                       (recursive_doubling), sparse_hierarchical (hierarchical)
//
// `automatic` chooses among the path's exchanges per call with the cost model of exchange/exchange_cost.hpp (from
// the codec's message size for the bucket, the node layout and the group's cost constants: the same choice on
// every rank). A schedule the path has no form for is a compile-time error naming both types (schedule_pairing),
// or config_error for a schedule that chooses at run time.
//
//   hitch::allreduce::group g(comm);
//   hitch::compress::qsgd codec;
//   auto state = hitch::compress::make_aggregation_state(codec, bucket.size());
//   hitch::compress::aggregate(g, codec, state, hitch::view(bucket));   // bucket: mine in, sum over ranks out
//
// Guarantees of every path: all ranks call it with the same bucket size (checked: mismatch_error); a rank whose
// encode fails (non_finite_error, ...) tells the others through the exchange's first collective, every rank
// throws, no rank waits for a deadline, and nothing is lost: the failing rank's state never changed and the others
// take back their encode (undo). Blocking calls have the group's deadline (timeout_error).
//
// The compressed and sparse exchanges give bit-identical results on every rank (same messages or sets, same
// decode order, commutative merges). The all-reduce paths give whatever the schedule gives (the ring schedules
// reduce each element in one order, so they are bit-identical too).

#include <cstdint>
#include <stdexcept>

#include "hitch/allreduce/automatic.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/additive.hpp"
#include "hitch/exchange/aggregation.hpp"
#include "hitch/exchange/allgather.hpp"
#include "hitch/exchange/compressed_halving_doubling.hpp"
#include "hitch/exchange/compressed_hierarchical.hpp"
#include "hitch/exchange/compressed_ring.hpp"
#include "hitch/exchange/exchange_choice.hpp"
#include "hitch/exchange/low_rank.hpp"
#include "hitch/exchange/pairing.hpp"
#include "hitch/exchange/sparse_hierarchical.hpp"
#include "hitch/exchange/sparse_recursive_doubling.hpp"
#include "hitch/exchange/state_blob.hpp"

namespace hitch::compress {

/// Aggregates `bucket` over the group's ranks with the exchange Codec's path and the schedule select; on return the
/// bucket holds the sum over ranks (options.average: the mean) of what each rank's message delivers.
template <class Schedule = allreduce::automatic, communicator C, compressor Codec, class T>
aggregation_stats aggregate(allreduce::group<C>& g, const Codec& codec, aggregation_state<Codec>& s,
                            tensor_view<T> bucket, const Schedule& schedule = Schedule{},
                            const aggregate_options& options = {}) {
    static_assert(floating_element<T>, "aggregate: the bucket's elements must be float, double, half or bfloat16");
    constexpr aggregation_path path = aggregation_path_of<Codec>;
    if constexpr (path == aggregation_path::low_rank) {
        return aggregate_low_rank(g, codec, s, bucket, schedule, options);
    } else if constexpr (path == aggregation_path::allreduce) {
        return aggregate_allreduce(g, codec, s, bucket, schedule, options);
    } else {
        static_assert(sizeof(schedule_pairing<Codec, Schedule>) > 0);  // its own assertions name the pair
        const exchange_choice choice = choose_exchange(g, codec, s.count, schedule);
        switch (choice.exchange) {
            case exchange_kind::compressed_halving_doubling:
                if constexpr (path == aggregation_path::compressed_ring)
                    return aggregate_compressed_halving_doubling(g, codec, s, bucket, options);
                break;
            case exchange_kind::compressed_hierarchical:
                if constexpr (path == aggregation_path::compressed_ring)
                    return aggregate_compressed_hierarchical(g, codec, s, bucket, choice.nodes, options);
                break;
            case exchange_kind::compressed_ring:
                if constexpr (path == aggregation_path::compressed_ring)
                    return aggregate_ring(g, codec, s, bucket, options);
                break;
            case exchange_kind::sparse_recursive_doubling:
                if constexpr (path == aggregation_path::allgather)
                    return aggregate_sparse_recursive_doubling(g, codec, s, bucket, options);
                break;
            case exchange_kind::sparse_hierarchical:
                if constexpr (path == aggregation_path::allgather)
                    return aggregate_sparse_hierarchical(g, codec, s, bucket, choice.nodes, options);
                break;
            case exchange_kind::allgather_ring:
                if constexpr (path == aggregation_path::allgather)
                    return aggregate_allgather(g, codec, s, bucket, options);
                break;
            case exchange_kind::allreduce:
            case exchange_kind::low_rank:
                break;
        }
        throw std::logic_error(hitch::detail::concat(detail::aggregate_who, ": no exchange ", name(choice.exchange),
                                                     " for the codec ", Codec::name));
    }
}

}  // namespace hitch::compress
