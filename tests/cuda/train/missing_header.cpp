// Must not compile: data_parallel on a cuda::device without <hitch/cuda/train/data_parallel.cuh> (the
// hitch_compile_fail.cuda_train_missing_header test pins the sentence that says what to include).
#include <vector>

#include "hitch/comm/local.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/train/data_parallel.hpp"

int main() {
    hitch::comm::run_local(1, [](hitch::comm::local& comm) {
        hitch::cuda::device gpu;
        hitch::data_parallel<hitch::optim::sgd> dp(comm, gpu, std::vector<hitch::layer>{});
    });
}
