// Catch2 main of the GPU tests of cuda::nccl on threads: runs the [one-gpu] cases (HITCH_NCCL_MULTI 0) or the
// [multi-gpu] ones (1), and exits with CTest's skip code 77, saying why, when the GPUs they need are not there.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "hitch/cuda/nccl.hpp"

int main(int argc, char** argv) {
    const int gpus = hitch::cuda::device_count();
    if (gpus == 0) {
        std::puts("no CUDA device present: skipped");
        return 77;
    }
    if (HITCH_NCCL_MULTI != 0 && gpus < 2) {
        std::printf(
            "%d GPU present: these checks need 2 ranks, and NCCL refuses two ranks of one communicator on one GPU "
            "(\"Duplicate GPU detected\", ncclInvalidUsage): skipped\n",
            gpus);
        return 77;
    }
    Catch::Session session;
    if (const int bad = session.applyCommandLine(argc, argv); bad != 0) return bad;
    if (session.configData().testsOrTags.empty())
        session.configData().testsOrTags.emplace_back(HITCH_NCCL_MULTI != 0 ? "[multi-gpu]" : "[one-gpu]");
    return session.run();
}
