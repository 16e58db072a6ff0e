// Hard sync with the quantizing and low-rank codecs.

#include "instantiate.hpp"

namespace hitch_examples {
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::error_feedback<hitch::compress::onebit>, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::qsgd, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::terngrad, hitch::sync::hard)
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::powersgd, hitch::sync::hard)
}  // namespace hitch_examples
