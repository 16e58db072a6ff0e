#pragma once
// Compression-aware aggregation: every rank passes its bucket; every rank gets the sum over ranks of what the
// codec delivers (optionally the mean). The algorithm follows from the codec's traits at compile time:
//
//   low_rank_compressor (powersgd)      P summed by an all-reduce, orthogonalised, Q summed by an all-reduce
//   additive (none, fp16, bf16, randomk and their error_feedback)
//                                       the encoded elements are summed in transit by an all-reduce schedule
//   ring_compressible (onebit, qsgd, terngrad and their error_feedback)
//                                       compression-aware ring (exchange/compressed_ring.hpp)
//   otherwise (threshold, topk, dgc, ...)
//                                       all-gather of the messages, then decode-and-add in rank order
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
// The allgather and ring paths give bit-identical results on every rank (same messages, same decode order). The
// all-reduce paths give whatever the schedule gives (the ring schedules reduce each element in one order, so
// they are bit-identical too).

#include <cstdint>

#include "hitch/allreduce/automatic.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/additive.hpp"
#include "hitch/exchange/aggregation.hpp"
#include "hitch/exchange/allgather.hpp"
#include "hitch/exchange/compressed_ring.hpp"
#include "hitch/exchange/low_rank.hpp"
#include "hitch/exchange/state_blob.hpp"

namespace hitch::compress {

/// Aggregates `bucket` over the group's ranks with the path Codec's traits select; on return the bucket holds the
/// sum over ranks (options.average: the mean) of what each rank's message delivers.
template <class Schedule = allreduce::automatic, communicator C, compressor Codec, class T>
aggregation_stats aggregate(allreduce::group<C>& g, const Codec& codec, aggregation_state<Codec>& s,
                            tensor_view<T> bucket, const Schedule& schedule = Schedule{},
                            const aggregate_options& options = {}) {
    static_assert(floating_element<T>, "aggregate: the bucket's elements must be float, double, half or bfloat16");
    constexpr aggregation_path path = aggregation_path_of<Codec>;
    if constexpr (path == aggregation_path::low_rank)
        return aggregate_low_rank(g, codec, s, bucket, schedule, options);
    else if constexpr (path == aggregation_path::allreduce)
        return aggregate_allreduce(g, codec, s, bucket, schedule, options);
    else if constexpr (path == aggregation_path::compressed_ring)
        return aggregate_ring(g, codec, s, bucket, options);
    else
        return aggregate_allgather(g, codec, s, bucket, options);
}

}  // namespace hitch::compress
