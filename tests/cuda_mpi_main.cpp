// Catch2 main for CUDA tests run under mpiexec: MPI is initialised first, every rank says whether it has a GPU, and
// unless all do, every rank exits with CTest's skip code 77 (hydra then returns 77: when every rank exits with the
// same code, mpiexec exits with it). Each rank takes GPU (local rank mod count): several ranks may share one GPU. The
// exit code is nonzero on every rank if any rank failed, so mpiexec reports the failure.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <mpi.h>

#include <cstdio>

#include "hitch/comm/mpi.hpp"
#include "hitch/cuda/device.hpp"

int main(int argc, char** argv) {
    hitch::comm::mpi_environment env(argc, argv);
    const int mine = hitch::cuda::available() ? 1 : 0;
    int all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all == 0) {
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rank == 0) std::puts("no CUDA device present on every rank: skipped");
        return 77;
    }
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int local_rank = 0, count = 1;
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_free(&node);
    cudaGetDeviceCount(&count);
    cudaSetDevice(local_rank % count);
    const int failed = Catch::Session().run(argc, argv);
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any_failed != 0 ? 1 : 0;
}
