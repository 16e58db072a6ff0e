#pragma once
// Saving and loading an aggregation state (exchange/aggregation.hpp) for checkpoints: the codec's state blob
// nested with the compressed ring's residual, in the codecs' versioned and checksummed state format.

#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/compress/wire.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/error.hpp"
#include "hitch/exchange/aggregation.hpp"

namespace hitch::compress {

/// Flag of aggregation-state blobs (the codec's state and the compressed ring's residual).
inline constexpr std::uint8_t aggregation_state_flag = 2;

/// Saves an aggregation state: the codec's state blob nested with the ring's residual (versioned and checksummed
/// like every blob, for checkpoints). Payload: u64 residual length | floats | u64 codec blob length | codec blob.
template <compressor Codec>
void save_state(const Codec& codec, const aggregation_state<Codec>& s, std::vector<std::byte>& blob) {
    std::vector<std::byte> body, inner;
    wire::put_scalar<std::uint64_t>(body, s.ring_residual.size());
    wire::put_floats(body, s.ring_residual);
    codec.save_state(s.codec, inner);
    wire::put_scalar<std::uint64_t>(body, inner.size());
    body.insert(body.end(), inner.begin(), inner.end());
    wire::seal_state(blob, Codec::codec_id, s.count, body, aggregation_state_flag);
}

/// Loads what save_state wrote into a state made for the same codec and bucket; anything else is
/// corrupt_message_error, and `s` is left as it was.
template <compressor Codec>
void load_state(const Codec& codec, std::span<const std::byte> blob, aggregation_state<Codec>& s) {
    constexpr std::string_view who = "hitch::compress::load_state (aggregation)";
    const wire::message_view m = wire::open_state(blob, Codec::codec_id, s.count, who, aggregation_state_flag);
    wire::reader r(m.payload, who);
    const std::uint64_t n = r.count("ring residual length", s.count);
    if (n != s.ring_residual.size())
        r.fail(hitch::detail::concat("ring residual of ", n, " elements where the state has ", s.ring_residual.size()));
    std::vector<float> residual;
    wire::get_floats(r, residual, n, "ring residual");
    const std::uint64_t inner_size = r.count("codec state length", r.remaining());
    const auto inner_blob = r.take(inner_size, "codec state");
    r.expect_end();
    for (float x : residual)
        if (!std::isfinite(x)) r.fail("the saved ring residual holds NaN or an infinity");
    typename Codec::state inner = s.codec;
    codec.load_state(inner_blob, inner);
    s.codec = std::move(inner);
    s.ring_residual = std::move(residual);
}

}  // namespace hitch::compress
