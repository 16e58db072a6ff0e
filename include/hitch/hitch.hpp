#pragma once
// hitch: distributed deep-learning training algorithms, header-only C++20.
//
// The umbrella header: everything host-only. It never includes <mpi.h> or CUDA headers; include
// hitch/comm/mpi.hpp (link hitch::mpi) or hitch/cuda/... (link hitch::cuda) for those backends.

#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/options.hpp"
#include "hitch/core/tensor.hpp"

#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/device.hpp"

#include "hitch/device/buffer.hpp"
#include "hitch/device/cpu.hpp"

#include "hitch/comm/agree.hpp"
#include "hitch/comm/local.hpp"
