#pragma once
// Everything in hitch::allreduce that needs no MPI: the group and its collectives, every schedule except native,
// the cost model and the fusion buffer. For comm::mpi add hitch/allreduce/native.hpp (links hitch::mpi).

#include "hitch/allreduce/automatic.hpp"
#include "hitch/allreduce/binary_tree.hpp"
#include "hitch/allreduce/collectives.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/double_binary_tree.hpp"
#include "hitch/allreduce/fusion.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/hierarchical.hpp"
#include "hitch/allreduce/parameter_server.hpp"
#include "hitch/allreduce/partition.hpp"
#include "hitch/allreduce/rabenseifner.hpp"
#include "hitch/allreduce/recursive_doubling.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/ring.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/concepts/allreduce_schedule.hpp"
