#pragma once
// The training loop on a GPU (--device cuda), declared for the GPU part's dispatch (gpu/dispatch.cpp); defined in
// gpu/train_gpu.cuh and instantiated in gpu/instantiate_*.cu.

#include "train.hpp"

namespace hitch_examples {

/// train_with's loop with the GPU's MLP (gpu/runner.cuh) and hitch::cuda::device.
template <class Compressor, class SyncPolicy, class Communicator>
train_result train_gpu_with(Communicator& comm, const train_config& config, const task& t);

}  // namespace hitch_examples
