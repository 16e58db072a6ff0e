#pragma once
// Every optimizer's GPU kernels (hitch::optim::device_step for hitch::cuda::device): include this in the .cu file
// that uses model_optimizer<Rule, hitch::cuda::device> or steps a rule on GPU layers. nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/optim/all.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include "hitch/cuda/optim/adam.cuh"
#include "hitch/cuda/optim/lamb.cuh"
#include "hitch/cuda/optim/lars.cuh"
#include "hitch/cuda/optim/momentum.cuh"
#include "hitch/cuda/optim/one_of.cuh"
#include "hitch/cuda/optim/sgd.cuh"
