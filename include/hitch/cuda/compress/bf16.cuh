#pragma once
// compress::bf16 on the GPU: hitch::compress::device_codec<bf16, cuda::device> (cast16.cuh holds the kernels). Its
// messages are the host codec's, byte for byte, so a host rank decodes them and the GPU decodes the host's. nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/bf16.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include "hitch/compress/bf16.hpp"
#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/cuda/compress/cast.hpp"
#include "hitch/cuda/compress/cast16.cuh"
#include "hitch/cuda/device.hpp"

namespace hitch::compress {

/// bf16 for device buckets: encode, encode_ef, decode, decode_add, encode_summable / decode_summed, save_state /
/// load_state (see cuda/compress/cast16.cuh).
template <>
class device_codec<bf16, cuda::device>
    : public cuda::compress::detail::cast16_device<bf16, cuda::compress::detail::bf16_format, detail::bf16_format> {
public:
    using cast16_device::cast16_device;
};

}  // namespace hitch::compress
