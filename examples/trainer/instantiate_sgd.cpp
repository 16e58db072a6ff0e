#include "instantiate.hpp"

namespace hitch_examples {
HITCH_EXAMPLE_TRAIN_WITH_OPTIMIZER(hitch::optim::sgd)
}  // namespace hitch_examples
