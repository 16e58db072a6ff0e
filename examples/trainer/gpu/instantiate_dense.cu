// The GPU's training loop: hard sync uncompressed and with the 16-bit codecs, and local SGD.
#include "gpu/train_gpu.cuh"

namespace hitch_examples {
HITCH_EXAMPLE_TRAIN_GPU_WITH(hitch::compress::none, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_GPU_WITH(hitch::compress::fp16, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_GPU_WITH(hitch::compress::bf16, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_GPU_WITH(hitch::compress::none, hitch::sync::local_sgd)
}  // namespace hitch_examples
