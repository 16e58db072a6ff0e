// Elastic averaging, and Hogwild (one parameter array shared by threads: comm::local only; registry.cpp refuses
// it on MPI ranks).

#include "instantiate.hpp"

namespace hitch_examples {
HITCH_EXAMPLE_TRAIN_WITH(hitch::compress::none, hitch::sync::easgd)
HITCH_EXAMPLE_TRAIN_WITH_LOCAL(hitch::compress::none, hitch::sync::hogwild)
}  // namespace hitch_examples
