// cuda::nccl over the real NCCL with one rank per MPI process (bootstrapped over comm::mpi), under mpiexec -n 2.
// With a GPU per rank each takes its own (local rank). With fewer GPUs than ranks on the node, each process sets
// NCCL_HOSTID to a name of its own before NCCL starts: NCCL's duplicate-GPU check only compares ranks of one host
// (same host hash and PCI bus id), so the ranks are then taken for two hosts that share nothing, and NCCL connects
// them over its network transport (sockets on loopback) — slow, but the same NCCL protocol and the same cuda::nccl
// code as on separate GPUs, which is what this test is for. Skips (77) without a GPU.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gpu_checks.hpp"
#include "hitch/comm/mpi.hpp"

using hitch::cuda::nccl;

TEST_CASE("cuda::nccl over comm::mpi: suite, device messages, deadlines, native all-reduce, schedules, splits",
          "[cuda][nccl][mpi]") {
    hitch::comm::mpi world;
    nccl comm = hitch::cuda::nccl_over(world);
    REQUIRE(comm.size() == world.size());
    REQUIRE_NOTHROW([&] {
        hitch::cuda::detail::check(cudaSetDevice(hitch::local_rank(world) % hitch::cuda::device_count()),
                                   "cudaSetDevice");
        hitch_test::ordered_delivery(comm, 8);
        hitch_test::message_sizes(comm, {0, 1, 7, 4096, 1 << 20});
        hitch_test::any_source_with_probe(comm);
        hitch_test::size_mismatch_reported(comm);
        hitch_test::device_messages(comm);
        hitch_test::device_mismatch(comm);
        hitch_test::device_timeout(comm);
        hitch_test::native_device<float>(comm, (std::size_t{1} << 20) + 3);
        hitch_test::native_device<double>(comm, 7);
        hitch_test::native_device<hitch::half>(comm, 1000);
        hitch_test::native_device<hitch::bfloat16>(comm, 1000);
        hitch_test::schedules_host(comm);
        hitch_test::schedules_device(comm);
        nccl sub = comm.split(0, comm.size() - comm.rank());
        hitch_test::device_messages(sub);
        hitch_test::split_groups(comm);
        comm.barrier();
    }());
}

int main(int argc, char** argv) {
    hitch::comm::mpi_environment env(argc, argv);
    int rank = 0;
    int size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int gpus = hitch::cuda::device_count();
    int fewest = gpus;
    MPI_Allreduce(&gpus, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (fewest == 0) {
        if (rank == 0) std::puts("no CUDA device present: skipped");
        return 77;
    }
    if (fewest < size) {
        const std::string host = "hitch-test-rank-" + std::to_string(rank);
        setenv("NCCL_HOSTID", host.c_str(), 1);
        if (rank == 0)
            std::printf(
                "%d GPU(s) for %d ranks: each rank sets NCCL_HOSTID=hitch-test-rank-<rank>, so NCCL takes "
                "them for separate hosts (its duplicate-GPU check is per host)\n",
                fewest, size);
    }
    const int failed = Catch::Session().run(argc, argv);
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any_failed != 0 ? 1 : 0;
}
