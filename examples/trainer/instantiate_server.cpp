// The parameter-server policies.

#include "instantiate.hpp"

namespace hitch_examples {
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::none, hitch::sync::soft)
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::none, hitch::sync::async)
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::none, hitch::sync::ssp)
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::none, hitch::sync::backup_workers)
}  // namespace hitch_examples
