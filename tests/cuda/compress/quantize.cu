// compress::onebit, qsgd and terngrad on the GPU against the host codecs (device_checks.cuh): messages byte for
// byte with the same random counters, decodes, damaged messages, state blobs, error-feedback residuals, for every
// bucket type and sizes 0 to 2^20 + 3, with NaN and infinities. Skips (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <cstddef>
#include <limits>
#include <vector>

#include "device_checks.cuh"
#include "hitch/cuda/compress/error_feedback.cuh"
#include "hitch/cuda/compress/onebit.cuh"
#include "hitch/cuda/compress/qsgd.cuh"
#include "hitch/cuda/compress/terngrad.cuh"

using namespace device_checks;
namespace hc = hitch::compress;

namespace {

template <class Codec>
void check_all_types(gpu& dev, const Codec& codec, const std::vector<float>& values) {
    const auto message = check_roundtrip<Codec, float>(dev, codec, values);
    check_roundtrip<Codec, hitch::half>(dev, codec, values);
    check_roundtrip<Codec, hitch::bfloat16>(dev, codec, values);
    check_roundtrip<Codec, double>(dev, codec, values);
    if (!message.empty()) check_corrupt<Codec, float>(dev, codec, message, values.size());
}

hc::onebit onebit_with(std::size_t group) {
    hc::onebit_options o;
    o.group_size = group;
    return hc::onebit(o);
}

hc::qsgd qsgd_with(std::uint32_t levels, std::size_t group, hc::qsgd_coding coding) {
    hc::qsgd_options o;
    o.levels = levels;
    o.group_size = group;
    o.coding = coding;
    return hc::qsgd(o);
}

hc::terngrad terngrad_with(double clip) {
    hc::terngrad_options o;
    o.clip_sigmas = clip;
    return hc::terngrad(o);
}

}  // namespace

TEST_CASE("onebit on the GPU writes and reads the host's messages", "[cuda][compress]") {
    gpu dev;
    for (std::size_t n : edge_sizes) {
        const auto g = gradients(n, static_cast<unsigned>(n) + 2);
        for (std::size_t group : {std::size_t{0}, std::size_t{8}, std::size_t{24}, std::size_t{512}, std::size_t{520}})
            check_all_types(dev, onebit_with(group), g);
    }
}

TEST_CASE("qsgd on the GPU writes and reads the host's messages, fixed and Elias", "[cuda][compress]") {
    gpu dev;
    for (std::size_t n : edge_sizes) {
        const auto g = gradients(n, static_cast<unsigned>(n) + 3);
        for (std::size_t group : {std::size_t{0}, std::size_t{8}, std::size_t{512}, std::size_t{4096 + 24}})
            for (std::uint32_t levels : {1u, 7u, 255u}) {
                check_all_types(dev, qsgd_with(levels, group, hc::qsgd_coding::fixed), g);
                if (group == 512 || n < 100000)
                    check_all_types(dev, qsgd_with(levels, group, hc::qsgd_coding::elias_gamma), g);
            }
    }
    check_all_types(dev, qsgd_with(32767, 512, hc::qsgd_coding::fixed), gradients(5000, 4));
}

TEST_CASE("terngrad on the GPU writes and reads the host's messages, one and two passes", "[cuda][compress]") {
    gpu dev;
    for (std::size_t n : edge_sizes) {
        auto g = gradients(n, static_cast<unsigned>(n) + 4);
        for (std::size_t i = 70000; i < n; i += 70000) g[i] = 0.5f * static_cast<float>(i / 70000);
        check_all_types(dev, terngrad_with(0.0), g);
        check_all_types(dev, terngrad_with(2.5), g);
    }
}

TEST_CASE("the quantisers refuse NaN and infinities as the host codecs do", "[cuda][compress]") {
    gpu dev;
    for (float x : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        auto g = gradients(70000, 5);
        g[66000] = x;
        check_all_types(dev, onebit_with(0), g);
        check_all_types(dev, onebit_with(512), g);
        check_all_types(dev, qsgd_with(7, 512, hc::qsgd_coding::fixed), g);
        check_all_types(dev, qsgd_with(7, 0, hc::qsgd_coding::elias_gamma), g);
        check_all_types(dev, terngrad_with(0.0), g);
        check_all_types(dev, terngrad_with(1.0), g);
    }
}

TEST_CASE("error feedback and encode_ef of the quantisers are the host's", "[cuda][compress]") {
    gpu dev;
    for (std::size_t n : {std::size_t{0}, std::size_t{33}, std::size_t{100000}}) {
        check_error_feedback<hc::onebit, float>(dev, onebit_with(0), n);
        check_error_feedback<hc::onebit, hitch::half>(dev, onebit_with(512), n);
        check_error_feedback<hc::qsgd, float>(dev, qsgd_with(7, 512, hc::qsgd_coding::fixed), n);
        check_error_feedback<hc::qsgd, float>(dev, qsgd_with(1, 0, hc::qsgd_coding::elias_gamma), n);
        check_error_feedback<hc::terngrad, float>(dev, terngrad_with(0.0), n);
        check_error_feedback<hc::terngrad, double>(dev, terngrad_with(2.5), n);
        check_encode_ef<hc::onebit, float>(dev, onebit_with(24), n);
        check_encode_ef<hc::qsgd, hitch::bfloat16>(dev, qsgd_with(127, 4096 + 24, hc::qsgd_coding::fixed), n);
        check_encode_ef<hc::terngrad, float>(dev, terngrad_with(0.0), n);
    }
    check_refuses_host_memory(dev, hc::qsgd{});
}

TEST_CASE("the use docs/compression.md shows compiles and agrees with the host codec", "[cuda][compress]") {
    gpu dev;
    const std::size_t n = 5000;
    const std::vector<float> values = gradients(n, 17);
    const buffer<float> bucket = upload(dev, values);
    buffer<float> sum(dev, n);
    // docs/compression.md, "On the GPU":
    hitch::compress::device_codec<hitch::compress::qsgd, hitch::cuda::device> codec(hitch::compress::qsgd{});
    auto state = codec.make_state(dev, n);
    hitch::cuda::compress::device_message message(dev);
    codec.encode(dev, bucket.view().as_const(), state, message);
    codec.decode_add(dev, message.view(), sum.view());
    std::vector<std::byte> host = message.to_host();
    // The host codec reads the same message into the same sum.
    std::vector<float> expected(n, 0.0f);
    hc::qsgd{}.decode_add(host, hitch::tensor_view<float>(expected.data(), n));
    CHECK(same(download(dev, sum), expected));
}
