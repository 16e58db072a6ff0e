#pragma once
// hitch's collectives on GPU buffers with the direct path compiled in (nvcc): collectives.hpp, and the direct engine
// (direct.cuh), which hands device pointers to communicators that carry device memory and reduces on the GPU.
// Including it in one translation unit built by nvcc installs the engine for the whole program.
#if !defined(__CUDACC__)
#error "hitch/cuda/allreduce/collectives.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include "hitch/cuda/allreduce/collectives.hpp"
#include "hitch/cuda/allreduce/direct.cuh"
#include "hitch/cuda/allreduce/reduce.cuh"
