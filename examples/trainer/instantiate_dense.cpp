// Hard sync with the dense exchanges, and local SGD.

#include "instantiate.hpp"

namespace hitch_examples {
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::none, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::fp16, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::bf16, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::none, hitch::sync::local_sgd)
}  // namespace hitch_examples
