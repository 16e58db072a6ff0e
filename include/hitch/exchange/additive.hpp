#pragma once
// The additive path of the compressed exchange (none, fp16, bf16, randomk and their error_feedback): the
// encoded elements are summed in transit by an all-reduce schedule.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <type_traits>
#include <vector>

#include "hitch/allreduce/automatic.hpp"
#include "hitch/allreduce/collectives.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/aggregation.hpp"
#include "hitch/exchange/detail/bucket.hpp"
#include "hitch/exchange/detail/encode_failure.hpp"

namespace hitch::compress {

/// The additive path: encode_summable, all-reduce (sum) with Schedule, decode_summed.
template <class Schedule = allreduce::automatic, communicator C, compressor Codec, floating_element T>
aggregation_stats aggregate_allreduce(allreduce::group<C>& g, const Codec& codec, aggregation_state<Codec>& s,
                                      tensor_view<T> bucket, const Schedule& schedule = Schedule{},
                                      const aggregate_options& options = {}) {
    static_assert(summable_compressor<Codec>,
                  "aggregate_allreduce: Codec::additive is true but it lacks the summable form (summable_t, "
                  "summable_count, encode_summable, decode_summed); see hitch::summable_compressor");
    detail::require_bucket(bucket, s.count);
    const auto p = static_cast<std::size_t>(g.size());
    const allreduce::reduce_op op = options.average ? allreduce::reduce_op::average : allreduce::reduce_op::sum;
    aggregation_stats stats{aggregation_path::allreduce, exchange_kind::allreduce, 0, 0};
    if constexpr (std::is_same_v<Codec, none>) {
        // Identity: the bucket itself is all-reduced (the all-reduce checks the sizes).
        allreduce::allreduce(g, bucket, op, schedule, options.call);
        stats.message_bytes = bucket.size_bytes();
        stats.sent_bytes = p > 1 ? 2 * (p - 1) * bucket.size_bytes() / p : 0;
        return stats;
    } else {
        using S = typename Codec::template summable_t<T>;
        const std::size_t m = codec.summable_count(s.codec, s.count);
        std::vector<S> values(m);
        std::exception_ptr error;
        const std::uint8_t code = detail::attempt(
            [&] {
                codec.encode_summable(tensor_view<const T>(bucket.data(), bucket.size()), s.codec,
                                      std::span<S>(values));
            },
            error);
        const std::vector<std::uint8_t> codes = detail::exchange_codes(g, code, s.count, options.call);
        detail::settle(codec, s.codec, codes, g.rank(), error);
        allreduce::call_options call = options.call;
        if constexpr (requires { codec.agreement_value(s.codec); }) call.fingerprint ^= codec.agreement_value(s.codec);
        try {
            allreduce::allreduce(g, tensor_view<S>(values), op, schedule, call);
        } catch (...) {
            if constexpr (requires { codec.undo(s.codec); }) codec.undo(s.codec);
            throw;
        }
        codec.decode_summed(std::span<const S>(values), s.codec, bucket);
        stats.message_bytes = m * sizeof(S);
        stats.sent_bytes = p > 1 ? 2 * (p - 1) * m * sizeof(S) / p : 0;
        return stats;
    }
}

}  // namespace hitch::compress
