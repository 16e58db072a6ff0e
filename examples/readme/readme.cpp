#include <cstdio>
#include <hitch/hitch.hpp>

int main() {
    // Four ranks as threads; with MPI, use hitch::comm::mpi and mpiexec instead.
    hitch::comm::run_local(4, [](hitch::comm::local& comm) {
        // Every rank learns every rank's value (checked, with a deadline).
        const auto all = hitch::comm::allgather_value(comm, comm.rank() + 1);
        int sum = 0;
        for (int v : all) sum += v;
        // Ranks that disagree get hitch::mismatch_error, naming each rank's value.
        hitch::comm::agree(comm, sum, "sum");
        if (comm.rank() == 0) std::printf("rank 0 of %d: sum %d\n", comm.size(), sum);
    });
}
