// Uses hitch's core over threads and its MPI component as a singleton MPI process; exits 0 only if both work.
#include <cstdio>
#include <vector>

#include "hitch/comm/agree.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/mpi.hpp"

int main(int argc, char** argv) {
    const auto sums = hitch::comm::run_local(3, [](hitch::comm::local& comm) {
        const auto all = hitch::comm::allgather_value(comm, comm.rank() + 1);
        int sum = 0;
        for (int v : all) sum += v;
        return sum;
    });
    for (int s : sums)
        if (s != 6) return 1;

    hitch::comm::mpi_environment env(argc, argv);
    hitch::comm::mpi comm;
    const auto all = hitch::comm::allgather_value(comm, 41 + comm.rank());
    if (all.size() != static_cast<std::size_t>(comm.size()) || all[0] != 41) return 2;
    std::printf("hitch consumer ok: local sum %d, mpi size %d\n", sums[0], comm.size());
    return 0;
}
