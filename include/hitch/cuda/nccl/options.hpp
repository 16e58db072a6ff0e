#pragma once
// hitch::cuda::nccl_options: the run-time options of a cuda::nccl communicator. Host only.

#include <cstddef>
#include <limits>

#include "hitch/core/deadline.hpp"
#include "hitch/core/options.hpp"

namespace hitch::cuda {

struct nccl_options {
    /// Deadline of every blocking call, in seconds (default: HITCH_TIMEOUT_S, else 300). Creating the
    /// communicator (every rank must arrive, and NCCL's own setup) has the same deadline.
    double timeout_s = timeout_from_environment().count();
    /// The GPU this rank uses (CUDA ordinal); -1 picks the rank's place on its node (hitch::local_rank of the
    /// bootstrap communicator) modulo the number of GPUs. NCCL refuses two ranks of one communicator on one GPU.
    int device = -1;
    /// Host-memory messages of at least this many bytes travel over NCCL, staged through device memory, instead
    /// of inline on the control channel (the bootstrap communicator). The default keeps every host message on the
    /// control channel; 0 sends every non-empty host message over NCCL.
    std::size_t stage_host_bytes = std::numeric_limits<std::size_t>::max();

    void validate() const {
        option_validator("hitch::cuda::nccl_options")
            .open_closed("timeout_s", timeout_s, 0.0, 1e9)
            .at_least("device", device, -1);
    }
};

}  // namespace hitch::cuda
