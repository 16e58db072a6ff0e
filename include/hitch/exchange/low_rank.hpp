#pragma once
// The low-rank path of the compressed exchange (powersgd): P summed by an all-reduce, orthogonalised on every
// rank, Q summed by an all-reduce.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>

#include "hitch/allreduce/automatic.hpp"
#include "hitch/allreduce/collectives.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/aggregation.hpp"
#include "hitch/exchange/detail/bucket.hpp"
#include "hitch/exchange/detail/encode_failure.hpp"

namespace hitch::compress {

/// PowerSGD's two rounds: P summed, orthogonalised on every rank, Q summed.
template <class Schedule = allreduce::automatic, communicator C, compressor Codec, floating_element T>
aggregation_stats aggregate_low_rank(allreduce::group<C>& g, const Codec& codec, aggregation_state<Codec>& s,
                                     tensor_view<T> bucket, const Schedule& schedule = Schedule{},
                                     const aggregate_options& options = {}) {
    static_assert(low_rank_compressor<Codec>, "aggregate_low_rank: Codec must model hitch::low_rank_compressor");
    detail::require_bucket(bucket, s.count);
    s.p.resize(codec.p_count(s.codec));
    s.q.resize(codec.q_count(s.codec));
    std::exception_ptr error;
    // compute_p validates the bucket and changes no lasting state, so nothing needs undoing on failure.
    const std::uint8_t code = detail::attempt(
        [&] { codec.compute_p(tensor_view<const T>(bucket.data(), bucket.size()), s.codec, std::span<float>(s.p)); },
        error);
    detail::settle(codec, s.codec, detail::exchange_codes(g, code, s.count, options.call), g.rank(), error);
    allreduce::allreduce(g, tensor_view<float>(s.p), allreduce::reduce_op::sum, schedule, options.call);
    codec.compute_q(std::span<const float>(s.p), s.codec, std::span<float>(s.q));
    allreduce::allreduce(g, tensor_view<float>(s.q), allreduce::reduce_op::sum, schedule, options.call);
    if (options.average) {
        s.accumulator.resize(s.count);
        codec.finish_low_rank(std::span<const float>(s.p), std::span<const float>(s.q), s.codec,
                              tensor_view<float>(s.accumulator));
        detail::write_result(s.accumulator, bucket, true, g.size());
    } else {
        codec.finish_low_rank(std::span<const float>(s.p), std::span<const float>(s.q), s.codec, bucket);
    }
    const auto p = static_cast<std::size_t>(g.size());
    const std::size_t bytes = 4 * (s.p.size() + s.q.size());
    return {aggregation_path::low_rank, exchange_kind::low_rank, bytes, p > 1 ? 2 * (p - 1) * bytes / p : 0};
}

}  // namespace hitch::compress
