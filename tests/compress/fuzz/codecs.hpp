#pragma once
// The decoders fuzzed, by index (HITCH_FUZZ_CODEC_INDEX selects one per harness binary).
#include <tuple>

#include "hitch/compress/bf16.hpp"
#include "hitch/compress/dgc.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/randomk.hpp"
#include "hitch/compress/terngrad.hpp"
#include "hitch/compress/threshold.hpp"
#include "hitch/compress/topk.hpp"

namespace hitch_fuzz {

namespace hc = hitch::compress;

using codecs = std::tuple<hc::none, hc::fp16, hc::bf16, hc::onebit, hc::threshold, hc::topk, hc::dgc, hc::randomk,
                          hc::qsgd, hc::terngrad, hc::powersgd, hc::error_feedback<hc::onebit>>;

inline constexpr std::size_t codec_count = std::tuple_size_v<codecs>;

/// The first input byte selects what the harness does; the next two give the destination's size.
enum mode_bits : unsigned {
    deep = 1,        // fix magic, version, codec id, count, payload length and checksum, so the payload is reached
    keep_type = 2,   // in deep mode, keep the input's element-type byte (else float)
    state_blob = 4,  // load_state instead of decode
    // bits 3-4: destination 0 float decode, 1 float decode_add, 2 double decode, 3 half decode_add
};

inline constexpr std::size_t max_elements = 4096;

}  // namespace hitch_fuzz
