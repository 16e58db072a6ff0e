#pragma once
// The all-gather path of the compressed exchange, for codecs whose messages cannot be summed or re-encoded in
// transit (threshold, topk, dgc, ...): every rank's message to every rank, then decode-and-add in rank order, so
// every rank gets the same bits.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <vector>

#include "hitch/allreduce/collectives.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/aggregation.hpp"
#include "hitch/exchange/detail/bucket.hpp"
#include "hitch/exchange/detail/encode_failure.hpp"

namespace hitch::compress {

/// All-gather of every rank's message, then decode-and-add in rank order (the same bits on every rank).
template <communicator C, compressor Codec, floating_element T>
aggregation_stats aggregate_allgather(allreduce::group<C>& g, const Codec& codec, aggregation_state<Codec>& s,
                                      tensor_view<T> bucket, const aggregate_options& options = {}) {
    detail::require_bucket(bucket, s.count);
    detail::set_stream(s.codec, g.rank());
    std::exception_ptr error;
    const std::uint8_t code = detail::attempt(
        [&] { codec.encode(tensor_view<const T>(bucket.data(), bucket.size()), s.codec, s.message); }, error);
    // A failed encode contributes a one-byte blob with its code (a message is never shorter than its header).
    const std::byte failure_blob[1] = {static_cast<std::byte>(code)};
    const std::span<const std::byte> mine =
        code == detail::encode_ok ? std::span<const std::byte>(s.message) : std::span<const std::byte>(failure_blob);
    allreduce::call_options call = options.call;
    call.fingerprint ^= 0x51ed27092f4a1c3bull * (s.count + 1);
    const allreduce::byte_blocks blobs = allreduce::allgather_bytes(g, mine, call);
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(g.size()), detail::encode_ok);
    for (int r = 0; r < g.size(); ++r) {
        const auto b = blobs.blob(r);
        if (b.size() == 1)
            codes[static_cast<std::size_t>(r)] = static_cast<std::uint8_t>(b[0]) == detail::encode_non_finite
                                                     ? detail::encode_non_finite
                                                     : detail::encode_failed;
    }
    detail::settle(codec, s.codec, codes, g.rank(), error);
    s.accumulator.assign(s.count, 0.0f);
    try {
        for (int r = 0; r < g.size(); ++r) codec.decode_add(blobs.blob(r), tensor_view<float>(s.accumulator));
    } catch (...) {
        if constexpr (requires { codec.undo(s.codec); }) codec.undo(s.codec);
        throw;
    }
    detail::write_result(s.accumulator, bucket, options.average, g.size());
    aggregation_stats stats{aggregation_path::allgather, exchange_kind::allgather_ring, s.message.size(), 0};
    const auto p = static_cast<std::size_t>(g.size());
    for (std::size_t k = 1; k < p; ++k)  // the ring all-gather forwards every blob but the one it would send back
        stats.sent_bytes += blobs.blob(static_cast<int>((static_cast<std::size_t>(g.rank()) + p - k + 1) % p)).size();
    return stats;
}

}  // namespace hitch::compress
