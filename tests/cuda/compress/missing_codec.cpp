// Must NOT compile: a GPU codec used in a file that did not include its header from the CUDA tree
// (hitch/cuda/compress/fp16.cuh). The error must say which header to include.
#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/cuda/device.hpp"

int main() {
    hitch::cuda::device dev;
    hitch::compress::device_codec<hitch::compress::fp16, hitch::cuda::device> codec;
    (void)codec;
}
