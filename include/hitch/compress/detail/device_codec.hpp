#pragma once
// hitch::compress::device_codec<Codec, D>: a codec's entry points for buckets in the memory of device D. The host
// codecs (compress/*.hpp) take host buckets; a device that runs them itself specialises this trait in its own tree,
// chosen by the device type and never by macros in host headers: include/hitch/cuda/compress/<codec>.cuh
// specialises it for hitch::cuda::device (docs/compression.md, "On the GPU"). Every specialisation writes and reads
// the host codec's wire format, byte for byte.
//
//   device_codec<Codec, D> dc(codec);                 built from the host codec (its options)
//   typename device_codec<Codec, D>::state            the per-bucket state on D (compress::device_state_t)
//   dc.make_state(dev, n), dc.encode(dev, in, state, message), dc.decode(dev, message, out),
//   dc.decode_add(dev, message, acc), dc.save_state(dev, state, blob), dc.load_state(dev, blob, state)
//   and, where the host codec has them, encode_ef, encode_summable / decode_summed, undo.

#include <type_traits>

namespace hitch::compress {

/// The primary template names no implementation: a codec runs on a device once a header specialises this for it.
template <class Codec, class D>
class device_codec {
    static_assert(!std::is_same_v<Codec, Codec>,
                  "hitch::compress::device_codec<Codec, D>: no implementation of this codec for this device is "
                  "visible here. For hitch::cuda::device, include the codec's header from the CUDA tree in a file "
                  "compiled by nvcc, e.g. \"hitch/cuda/compress/fp16.cuh\" for compress::fp16 (onebit.cuh, qsgd.cuh, "
                  "terngrad.cuh, none.cuh, bf16.cuh, error_feedback.cuh ...), or specialise "
                  "device_codec<Codec, D> for your own device");
};

/// The per-bucket state of Codec on device D.
template <class Codec, class D>
using device_state_t = typename device_codec<Codec, D>::state;

}  // namespace hitch::compress
