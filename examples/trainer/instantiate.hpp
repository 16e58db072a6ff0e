#pragma once
// Explicit instantiations of the training loop: for one optimizer, every compressor with hard sync (dgc only with
// sgd: instantiate_sgd.cpp) and local SGD with no compressor (instantiate_<optimizer>.cpp); for one of the other
// sync policies, every optimizer with no compressor (instantiate_sync_<policy>.cpp); over comm::local and
// comm::mpi (Hogwild over comm::local only). One file each so the build runs them in parallel.

#include "hitch/allreduce/native.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/mpi.hpp"
#include "train_impl.hpp"

#define HITCH_EXAMPLE_TRAIN_WITH(O, X, P)                                                                   \
    template train_result train_with<O, X, P, hitch::comm::local>(hitch::comm::local&, const train_config&, \
                                                                  const task&);                             \
    template train_result train_with<O, X, P, hitch::comm::mpi>(hitch::comm::mpi&, const train_config&, const task&);

#define HITCH_EXAMPLE_TRAIN_WITH_OPTIMIZER(O)                                                                   \
    HITCH_EXAMPLE_TRAIN_WITH(O, hitch::compress::none, hitch::sync::local_sgd)                                  \
    HITCH_EXAMPLE_TRAIN_WITH(O, hitch::compress::none, hitch::sync::hard)                                       \
    HITCH_EXAMPLE_TRAIN_WITH(O, hitch::compress::fp16, hitch::sync::hard)                                       \
    HITCH_EXAMPLE_TRAIN_WITH(O, hitch::compress::bf16, hitch::sync::hard)                                       \
    HITCH_EXAMPLE_TRAIN_WITH(O, hitch::compress::error_feedback<hitch::compress::onebit>, hitch::sync::hard)    \
    HITCH_EXAMPLE_TRAIN_WITH(O, hitch::compress::error_feedback<hitch::compress::threshold>, hitch::sync::hard) \
    HITCH_EXAMPLE_TRAIN_WITH(O, hitch::compress::error_feedback<hitch::compress::topk>, hitch::sync::hard)      \
    HITCH_EXAMPLE_TRAIN_WITH(O, hitch::compress::error_feedback<hitch::compress::randomk>, hitch::sync::hard)   \
    HITCH_EXAMPLE_TRAIN_WITH(O, hitch::compress::qsgd, hitch::sync::hard)                                       \
    HITCH_EXAMPLE_TRAIN_WITH(O, hitch::compress::terngrad, hitch::sync::hard)                                   \
    HITCH_EXAMPLE_TRAIN_WITH(O, hitch::compress::powersgd, hitch::sync::hard)

#define HITCH_EXAMPLE_TRAIN_EVERY_OPTIMIZER_ON(P, EACH)                        \
    EACH(hitch::optim::sgd, hitch::compress::none, P)                          \
    EACH(hitch::optim::momentum, hitch::compress::none, P)                     \
    EACH(hitch::optim::adam, hitch::compress::none, P)                         \
    EACH(hitch::optim::adamw, hitch::compress::none, P)                        \
    EACH(hitch::optim::lars<hitch::optim::momentum>, hitch::compress::none, P) \
    EACH(hitch::optim::lamb, hitch::compress::none, P)

#define HITCH_EXAMPLE_TRAIN_EVERY_OPTIMIZER(P) HITCH_EXAMPLE_TRAIN_EVERY_OPTIMIZER_ON(P, HITCH_EXAMPLE_TRAIN_WITH)

#define HITCH_EXAMPLE_TRAIN_WITH_LOCAL(O, X, P)                                                             \
    template train_result train_with<O, X, P, hitch::comm::local>(hitch::comm::local&, const train_config&, \
                                                                  const task&);
