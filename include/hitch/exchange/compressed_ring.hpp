#pragma once
// The compression-aware ring of the compressed exchange (onebit, qsgd, terngrad and their error_feedback).
//
// Compression-aware ring (the scheme of 1-bit Adam, Tang et al. 2021, with error feedback at the workers and the
// servers, here at every hop of a ring): the bucket is cut into p chunks. In p - 1 reduce-scatter steps each rank
// receives a chunk's compressed partial sum from its left neighbour, decodes it, adds its own contribution, and
// re-encodes it with error feedback: what the re-encoding loses stays in this rank's residual for that chunk and is
// added the next time it encodes the chunk (for codecs that need error feedback, see ring_hop_feedback; unbiased
// quantisers re-encode without a residual). Each rank then holds one fully reduced chunk, encodes it once more with
// its residual, and p - 1 all-gather steps pass those messages around unchanged; every rank decodes the same p
// messages, so the result is the same bits everywhere. Traffic stays compressed end to end: 2 (p - 1) messages of
// a chunk per rank. Each rank encodes every chunk exactly once per call, so one residual the size of the bucket
// holds all of its hop residuals, and sum over ranks of (input + old residual) = result + sum of new residuals.

#include <cstddef>
#include <numeric>
#include <span>
#include <vector>

#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/aggregation.hpp"
#include "hitch/exchange/detail/bucket.hpp"
#include "hitch/exchange/detail/compressed_hops.hpp"

namespace hitch::compress {

/// The compression-aware ring (see the file comment). For ring_compressible codecs and their error_feedback.
template <communicator C, compressor Codec, floating_element T>
aggregation_stats aggregate_ring(allreduce::group<C>& g, const Codec& codec, aggregation_state<Codec>& s,
                                 tensor_view<T> bucket, const aggregate_options& options = {}) {
    const detail::hops<Codec> h = detail::hops_of(codec, s);
    detail::require_bucket(bucket, s.count);
    detail::set_stream(h.state, g.rank());
    const std::span<float> mine = detail::float_view(bucket, s.scratch);
    const std::size_t n = s.count;
    const int p = g.size();
    s.accumulator.resize(n);
    aggregation_stats stats{aggregation_path::compressed_ring, exchange_kind::compressed_ring, 0, 0};
    detail::exchange_status status(g.rank());
    const allreduce::call_options call = detail::compressed_call<typename detail::hops<Codec>::codec_type>(options, n);
    g.run(call, detail::exchange_descriptor<T>(n, call.fingerprint, "compressed_ring"),
          [&](allreduce::transport<C>& t, const allreduce::call_descriptor&) {
              detail::hop_link<C> link(t, status);
              std::vector<int> ring(static_cast<std::size_t>(p));
              std::iota(ring.begin(), ring.end(), 0);
              stats.message_bytes = detail::ring_among(link, h, ring, g.rank(), mine, s.accumulator, s.messages);
              stats.sent_bytes = link.sent_bytes();
          });
    status.throw_if_failed("compressed ring");
    detail::decode_blocks(h, s.messages, p, s.accumulator);
    h.finish(true);
    detail::write_result(s.accumulator, bucket, options.average, p);
    return stats;
}

}  // namespace hitch::compress
