// Hard sync with the sparsifying codecs.

#include "instantiate.hpp"

namespace hitch_examples {
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::error_feedback<hitch::compress::threshold>, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::error_feedback<hitch::compress::topk>, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::dgc, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::error_feedback<hitch::compress::randomk>, hitch::sync::hard)
}  // namespace hitch_examples
