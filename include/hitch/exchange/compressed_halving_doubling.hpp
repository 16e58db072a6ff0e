#pragma once
// Rabenseifner's shape for the compressed exchange (onebit, qsgd, terngrad and their error_feedback): the same
// re-encoding with a hop residual as the compression-aware ring (exchange/compressed_ring.hpp), in 2 lg p rounds
// instead of 2 (p - 1), for networks where latency dominates.
//
// With p' the largest power of two <= p, the first p - p' even ranks fold first: each encodes its whole bucket with
// its residual and sends it to the odd rank after it, which decodes it and adds its own bucket (the standard fold
// of allreduce/detail/fold.hpp). Recursive halving among the p' ranks: in the round of distance d a rank keeps half
// of its current range, encodes the half it gives away (with its residual) and sends it to the partner d away,
// and decodes and adds the partner's encoding of the half it keeps. After lg p' rounds rank r holds block r of p'
// fully reduced; it encodes it once more, and recursive doubling passes the p' final messages around unchanged.
// The folded ranks get the p' messages back from their partners. Every rank decodes the same p' messages, so the
// result is the same bits everywhere. Every rank encodes each element exactly once per call (the halves it gives
// away, then its final block; a folded rank its whole bucket), so one residual the size of the bucket holds all
// of its hop residuals, and sum over ranks of (input + old residual) = result + sum of new residuals.
//
// Cost with b bits per element on the wire, p a power of two (the fold adds 2 alpha + 2 n b / 8 beta):
//
//   T(p, n) = 2 lg p alpha + 2 (p - 1) / p n b / 8 beta + (p - 1) / p n (gamma + encode + decode)
//
// Each encode of a range carries the codec's header (and per-group scales), so small blocks pay relatively more
// than in the ring, whose chunks are n / p throughout.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "hitch/allreduce/detail/fold.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/partition.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/aggregation.hpp"
#include "hitch/exchange/detail/bucket.hpp"
#include "hitch/exchange/detail/compressed_hops.hpp"

namespace hitch::compress {

namespace detail {

/// The hop state of the encode of blocks [first, last) of p' (a range of m = last - first blocks, m a power of two
/// and first a multiple of m): seeded by its index in the tree of such ranges (1: the whole bucket, p' / m +
/// first / m in general), so no two ranges of one call share random numbers.
[[nodiscard]] constexpr std::uint64_t halving_range_index(int p2, int first, int last) noexcept {
    const int m = last - first;
    return static_cast<std::uint64_t>(p2 / m + first / m);
}

}  // namespace detail

/// Recursive halving with re-encoding, then recursive doubling of the final messages (see the file comment). For
/// ring_compressible codecs and their error_feedback; any number of ranks.
template <communicator C, compressor Codec, floating_element T>
aggregation_stats aggregate_compressed_halving_doubling(allreduce::group<C>& g, const Codec& codec,
                                                        aggregation_state<Codec>& s, tensor_view<T> bucket,
                                                        const aggregate_options& options = {}) {
    const detail::hops<Codec> h = detail::hops_of(codec, s);
    detail::require_bucket(bucket, s.count);
    detail::set_stream(h.state, g.rank());
    const std::span<float> mine = detail::float_view(bucket, s.scratch);
    const std::size_t n = s.count;
    const int p = g.size(), me = g.rank();
    const allreduce::detail::fold f = allreduce::detail::make_fold(p, me);
    const int p2 = f.p2;
    s.accumulator.resize(n);
    s.shape_values.resize(n);
    s.messages.resize(static_cast<std::size_t>(p2));
    aggregation_stats stats{aggregation_path::compressed_ring, exchange_kind::compressed_halving_doubling, 0, 0};
    detail::exchange_status status(me);
    const allreduce::call_options call = detail::compressed_call<typename detail::hops<Codec>::codec_type>(options, n);
    const auto range = [&](int first, int last) { return allreduce::partition_range(n, p2, first, last); };
    const auto per_call = static_cast<std::uint64_t>(2 * p2);

    g.run(call, detail::exchange_descriptor<T>(n, call.fingerprint, "compressed_hd"),
          [&](allreduce::transport<C>& t, const allreduce::call_descriptor&) {
              detail::hop_link<C> link(t, status);
              bool first_message = true;
              // Encodes blocks [first, last) of `values` (indexed like the bucket) into `out`.
              const auto encode = [&](const float* values, int first, int last, std::vector<std::byte>& out) {
                  if (!status.ok()) return;
                  const allreduce::block b = range(first, last);
                  status.attempt([&] {
                      auto hs = h.state_for(b.count, per_call, detail::halving_range_index(p2, first, last), me);
                      h.encode(values + b.offset, b, hs, out);
                  });
                  if (first_message) stats.message_bytes = out.size();
                  first_message = false;
              };
              const std::span<std::vector<std::byte>> all(s.messages.data(), s.messages.size());
              if (f.folded_away()) {
                  encode(mine.data(), 0, p2, s.message);
                  link.send(me + 1, detail::one(s.message));
                  link.receive(me + 1, all);
                  stats.sent_bytes = link.sent_bytes();
                  return;
              }
              float* acc = s.accumulator.data();
              if (f.absorbs()) {
                  if (link.receive(me - 1, detail::one(s.message)))
                      status.attempt([&] {
                          h.decode(std::span<const std::byte>(s.message), acc, n);
                          for (std::size_t i = 0; i < n; ++i) acc[i] += mine[i];
                      });
              } else {
                  std::copy(mine.begin(), mine.end(), acc);
              }
              const int nr = f.new_rank;
              std::vector<std::byte> in_message;
              int lo = 0, hi = p2;
              for (int mask = p2 / 2; mask >= 1; mask /= 2) {
                  const int partner = f.real_rank(nr ^ mask);
                  const int mid = lo + mask;
                  const bool upper = (nr & mask) != 0;
                  const int give_first = upper ? lo : mid, give_last = upper ? mid : hi;
                  const allreduce::block keep = upper ? range(mid, hi) : range(lo, mid);
                  encode(acc, give_first, give_last, s.message);
                  if (link.exchange(partner, detail::one(s.message), partner, detail::one(in_message)))
                      status.attempt([&] {
                          float* tmp = s.shape_values.data();
                          h.decode(std::span<const std::byte>(in_message), tmp, keep.count);
                          for (std::size_t i = 0; i < keep.count; ++i) acc[keep.offset + i] += tmp[i];
                      });
                  if (upper)
                      lo = mid;
                  else
                      hi = mid;
              }
              encode(acc, nr, nr + 1, s.messages[static_cast<std::size_t>(nr)]);
              for (int mask = 1; mask < p2; mask *= 2) {
                  const int partner = f.real_rank(nr ^ mask);
                  const int base = nr & ~(mask - 1), other = (nr ^ mask) & ~(mask - 1);
                  link.exchange(partner, all.subspan(static_cast<std::size_t>(base), static_cast<std::size_t>(mask)),
                                partner, all.subspan(static_cast<std::size_t>(other), static_cast<std::size_t>(mask)));
              }
              if (f.absorbs()) link.send(me - 1, all);
              stats.sent_bytes = link.sent_bytes();
          });
    status.throw_if_failed("compressed halving-doubling");
    detail::decode_blocks(h, s.messages, p2, s.accumulator);
    h.finish(true);
    detail::write_result(s.accumulator, bucket, options.average, p);
    return stats;
}

}  // namespace hitch::compress
