// compress::none, fp16 and bf16 on the GPU against the host codecs (device_checks.cuh), for float, half, bfloat16
// and double buckets of sizes 0 to 2^20 + 3, with NaN, infinities and denormals; their error_feedback and summable
// forms. Skips (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <cstddef>
#include <limits>
#include <vector>

#include "device_checks.cuh"
#include "hitch/cuda/compress/bf16.cuh"
#include "hitch/cuda/compress/error_feedback.cuh"
#include "hitch/cuda/compress/fp16.cuh"
#include "hitch/cuda/compress/none.cuh"

using namespace device_checks;

namespace {

template <class Codec>
void check_all_types(gpu& dev, const Codec& codec, const std::vector<float>& values) {
    const auto message = check_roundtrip<Codec, float>(dev, codec, values);
    check_roundtrip<Codec, hitch::half>(dev, codec, values);
    check_roundtrip<Codec, hitch::bfloat16>(dev, codec, values);
    check_roundtrip<Codec, double>(dev, codec, values);
    if (!message.empty()) check_corrupt<Codec, float>(dev, codec, message, values.size());
}

std::vector<float> with(std::vector<float> v, float x) {
    if (v.size() > 20) v[20] = x;
    return v;
}

}  // namespace

TEST_CASE("none, fp16 and bf16 on the GPU write and read the host's messages", "[cuda][compress]") {
    gpu dev;
    for (std::size_t n : edge_sizes) {
        const auto g = gradients(n, static_cast<unsigned>(n) + 1);
        check_all_types(dev, hitch::compress::none{}, g);
        check_all_types(dev, hitch::compress::fp16{}, g);
        check_all_types(dev, hitch::compress::bf16{}, g);
    }
}

TEST_CASE("the casts refuse NaN, infinities and overflow as the host codecs do", "[cuda][compress]") {
    gpu dev;
    const auto g = gradients(1000, 3);
    for (float x : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(), 65520.0f, 3.4e38f,
                    1e-45f, 6e-8f}) {
        INFO("value " << x);
        check_all_types(dev, hitch::compress::none{}, with(g, x));
        check_all_types(dev, hitch::compress::fp16{}, with(g, x));
        check_all_types(dev, hitch::compress::bf16{}, with(g, x));
    }
}

TEST_CASE("the casts' error feedback, encode_ef and summable forms are the host's", "[cuda][compress]") {
    gpu dev;
    for (std::size_t n : {std::size_t{0}, std::size_t{33}, std::size_t{100000}}) {
        check_error_feedback<hitch::compress::none, float>(dev, {}, n);
        check_error_feedback<hitch::compress::fp16, float>(dev, {}, n);
        check_error_feedback<hitch::compress::fp16, hitch::half>(dev, {}, n);
        check_error_feedback<hitch::compress::bf16, hitch::bfloat16>(dev, {}, n);
        check_encode_ef<hitch::compress::none, hitch::half>(dev, {}, n);
        check_encode_ef<hitch::compress::fp16, double>(dev, {}, n);
        check_encode_ef<hitch::compress::bf16, float>(dev, {}, n);
        check_summable<hitch::compress::none, float>(dev, {}, n);
        check_summable<hitch::compress::fp16, float>(dev, {}, n);
        check_summable<hitch::compress::bf16, hitch::half>(dev, {}, n);
        check_summable<hitch::compress::error_feedback<hitch::compress::fp16>, float>(dev, {}, n);
    }
    check_refuses_host_memory(dev, hitch::compress::fp16{});
    check_refuses_host_memory(dev, hitch::compress::none{});
}
