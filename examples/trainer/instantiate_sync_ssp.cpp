#include "instantiate.hpp"

namespace hitch_examples {
HITCH_EXAMPLE_TRAIN_EVERY_OPTIMIZER(hitch::sync::ssp)
}  // namespace hitch_examples
