#pragma once
// Explicit instantiations of the training loop, one (compressor, sync policy) at a time over comm::local and
// comm::mpi (Hogwild over comm::local only); the optimizer is chosen at run time (any_optimizer). The
// combinations are spread over a few files of about equal cost so a parallel build runs them side by side.

#include "hitch/allreduce/native.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/mpi.hpp"
#include "train_impl.hpp"

#define HITCH_EXAMPLE_TRAIN_WITH_LOCAL(X, P) \
    template train_result train_with<X, P, hitch::comm::local>(hitch::comm::local&, const train_config&, const task&);

#define HITCH_EXAMPLE_TRAIN_WITH(X, P)   \
    HITCH_EXAMPLE_TRAIN_WITH_LOCAL(X, P) \
    template train_result train_with<X, P, hitch::comm::mpi>(hitch::comm::mpi&, const train_config&, const task&);
