#pragma once
// Every learning-rate and batch-size schedule (see docs/schedules.md).

#include "hitch/optim/lr/batch_size.hpp"
#include "hitch/optim/lr/constant.hpp"
#include "hitch/optim/lr/cosine.hpp"
#include "hitch/optim/lr/cyclical.hpp"
#include "hitch/optim/lr/exponential.hpp"
#include "hitch/optim/lr/linear_scaling.hpp"
#include "hitch/optim/lr/multi_step.hpp"
#include "hitch/optim/lr/one_cycle.hpp"
#include "hitch/optim/lr/polynomial.hpp"
#include "hitch/optim/lr/schedule.hpp"
#include "hitch/optim/lr/step_decay.hpp"
#include "hitch/optim/lr/warmup.hpp"
