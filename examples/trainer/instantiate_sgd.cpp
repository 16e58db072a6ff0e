#include "instantiate.hpp"

namespace hitch_examples {
HITCH_EXAMPLE_TRAIN_WITH_OPTIMIZER(hitch::optim::sgd)
// DGC keeps the momentum itself, so it runs with plain SGD only (registry.cpp: optimizer_type_name).
HITCH_EXAMPLE_TRAIN_WITH(hitch::optim::sgd, hitch::compress::dgc, hitch::sync::hard)
}  // namespace hitch_examples
