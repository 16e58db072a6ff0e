#pragma once
// hitch: distributed deep-learning training algorithms, header-only C++20.
//
// The umbrella header: everything host-only. It never includes <mpi.h> or CUDA headers; include
// hitch/comm/mpi.hpp and hitch/allreduce/native.hpp (link hitch::mpi) or hitch/cuda/... (link hitch::cuda) for those
// backends.

#include "hitch/core/binary.hpp"
#include "hitch/core/clock.hpp"
#include "hitch/core/cost.hpp"
#include "hitch/core/crc32c.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/fixed_string.hpp"
#include "hitch/core/isa.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/options.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/core/reduce_op.hpp"
#include "hitch/core/tensor.hpp"

#include "hitch/concepts/allreduce_schedule.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/concepts/device.hpp"
#include "hitch/concepts/optimizer.hpp"
#include "hitch/concepts/step_context.hpp"
#include "hitch/concepts/sync_policy.hpp"

#include "hitch/device/buffer.hpp"
#include "hitch/device/cpu.hpp"

#include "hitch/comm/agree.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/simulated.hpp"

#include "hitch/allreduce/allreduce.hpp"

#include "hitch/compress/bf16.hpp"
#include "hitch/compress/dgc.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/randomk.hpp"
#include "hitch/compress/terngrad.hpp"
#include "hitch/compress/threshold.hpp"
#include "hitch/compress/topk.hpp"

#include "hitch/exchange/aggregate.hpp"

#include "hitch/optim/adam.hpp"
#include "hitch/optim/adamw.hpp"
#include "hitch/optim/lamb.hpp"
#include "hitch/optim/lars.hpp"
#include "hitch/optim/lr.hpp"
#include "hitch/optim/model_optimizer.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/optim/sharded.hpp"
#include "hitch/optim/split_step.hpp"

#include "hitch/amp/loss_scaler.hpp"
#include "hitch/amp/mixed_precision.hpp"
#include "hitch/amp/nonfinite.hpp"

#include "hitch/sync/async.hpp"
#include "hitch/sync/backup_workers.hpp"
#include "hitch/sync/easgd.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/sync/hogwild.hpp"
#include "hitch/sync/local_sgd.hpp"
#include "hitch/sync/soft.hpp"
#include "hitch/sync/ssp.hpp"

#include "hitch/train/checkpoint.hpp"
#include "hitch/train/data_parallel.hpp"
#include "hitch/train/metrics.hpp"
#include "hitch/train/timeline.hpp"
