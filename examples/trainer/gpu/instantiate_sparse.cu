// The GPU's training loop: hard sync with the sparse codecs (the ring all-gather of their messages).
#include "gpu/train_gpu.cuh"

namespace hitch_examples {
HITCH_EXAMPLE_TRAIN_GPU_WITH(hitch::compress::error_feedback<hitch::compress::threshold>, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_GPU_WITH(hitch::compress::error_feedback<hitch::compress::topk>, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_GPU_WITH(hitch::compress::dgc, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_GPU_WITH(hitch::compress::error_feedback<hitch::compress::randomk>, hitch::sync::hard)
}  // namespace hitch_examples
