// The GPU's training loop: hard sync with the quantising codecs (the compression-aware ring) and PowerSGD.
#include "gpu/train_gpu.cuh"

namespace hitch_examples {
HITCH_EXAMPLE_TRAIN_GPU_WITH(hitch::compress::error_feedback<hitch::compress::onebit>, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_GPU_WITH(hitch::compress::qsgd, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_GPU_WITH(hitch::compress::terngrad, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_GPU_WITH(hitch::compress::powersgd, hitch::sync::hard)
}  // namespace hitch_examples
