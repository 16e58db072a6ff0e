// Must NOT compile: model_optimizer on cuda::device in a file that did not include the rule's GPU kernels
// (hitch/cuda/optim/*.cuh). The error must say which header to include.
#include <vector>

#include "hitch/cuda/device.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/model_optimizer.hpp"

int main() {
    hitch::cuda::device dev;
    hitch::optim::model_optimizer<hitch::optim::adam, hitch::cuda::device> opt({}, std::vector<hitch::layer>{}, dev);
    opt.step(0.1f);
}
