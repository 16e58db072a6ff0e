#include "instantiate.hpp"

namespace hitch_examples {
// Hogwild shares one parameter array between threads: comm::local only (registry.cpp refuses it on MPI ranks).
HITCH_EXAMPLE_TRAIN_EVERY_OPTIMIZER_ON(hitch::sync::hogwild, HITCH_EXAMPLE_TRAIN_WITH_LOCAL)
}  // namespace hitch_examples
