// Catch2 main for CUDA tests: exits with CTest's skip code 77 when no CUDA device is present.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "hitch/cuda/device.hpp"

int main(int argc, char** argv) {
    if (!hitch::cuda::available()) {
        std::puts("no CUDA device present: skipped");
        return 77;
    }
    return Catch::Session().run(argc, argv);
}
