// Must NOT compile: Hogwild updates one parameter array shared by every rank, and the ranks of comm::mpi are
// processes. data_parallel refuses the pair where it is built; the policy itself is a valid one.
#include <vector>

#include "hitch/allreduce/native.hpp"
#include "hitch/comm/mpi.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/hogwild.hpp"
#include "hitch/train/data_parallel.hpp"

int main(int argc, char** argv) {
    hitch::comm::mpi_environment env(argc, argv);
    hitch::comm::mpi comm;
    hitch::cpu dev;
    std::vector<float> w(4), g(4);
    hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::hogwild> dp(
        comm, dev, {{"w", hitch::view(w), hitch::view(g)}});
    dp.step();
    return 0;
}
