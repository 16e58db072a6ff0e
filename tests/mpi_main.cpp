// Catch2 main for tests run under mpiexec: MPI is initialised around the session; the exit code is nonzero on
// every rank if any rank failed, so mpiexec reports the failure.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <mpi.h>

#include "hitch/comm/mpi.hpp"

int main(int argc, char** argv) {
    hitch::comm::mpi_environment env(argc, argv);
    const int failed = Catch::Session().run(argc, argv);
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any_failed != 0 ? 1 : 0;
}
