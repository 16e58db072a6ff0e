// A bucket encoded on one thread or spread over the pool gives the same message, residual and decoded values, bit
// for bit: chunks start on the codecs' block boundaries and sums are combined per block in order.
#include <catch2/catch.hpp>

#include <vector>

#include "codecs.hpp"
#include "helpers.hpp"

using hitch::tensor_view;

namespace {

template <class Codec, class Options>
void same_on_any_threads(Options options, std::size_t n) {
    const auto g = hitch_test::gradients(n, 91);
    const auto r = hitch_test::gradients(n, 92);
    std::vector<std::vector<std::byte>> messages;
    std::vector<std::vector<float>> residuals, decoded;
    for (std::size_t threads : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{0}}) {
        options.parallel.threads = threads;
        options.parallel.min_elements = 1 << 16;  // so that a test-sized bucket is split
        const Codec codec(options);
        auto s = codec.make_state(n);
        std::vector<std::byte> m;
        std::vector<float> r_out(n), d(n, 0.5f);
        codec.encode_ef(tensor_view<const float>(g), r, r_out, s, m);
        codec.decode_add(m, tensor_view<float>(d));
        messages.push_back(m);
        residuals.push_back(r_out);
        decoded.push_back(d);
        auto s2 = codec.make_state(n);
        std::vector<std::byte> plain;
        codec.encode(tensor_view<const float>(g), s2, plain);
        if (threads == 1)
            messages.push_back(plain);
        else
            CHECK(plain == messages[1]);
    }
    INFO(Codec::name);
    for (std::size_t k = 2; k < messages.size(); ++k) CHECK(messages[k] == messages[0]);
    for (std::size_t k = 1; k < residuals.size(); ++k) CHECK(residuals[k] == residuals[0]);
    for (std::size_t k = 1; k < decoded.size(); ++k) CHECK(decoded[k] == decoded[0]);
}

}  // namespace

TEST_CASE("codecs give the same bits on any number of threads", "[compress][parallel]") {
    namespace hc = hitch::compress;
    const std::size_t n = 300007;
    same_on_any_threads<hc::fp16>(hc::fp16_options{}, n);
    same_on_any_threads<hc::bf16>(hc::bf16_options{}, n);
    same_on_any_threads<hc::onebit>(hc::onebit_options{}, n);
    same_on_any_threads<hc::onebit>(hc::onebit_options{.group_size = 4096}, n);
    same_on_any_threads<hc::qsgd>(hc::qsgd_options{}, n);
    same_on_any_threads<hc::qsgd>(hc::qsgd_options{.levels = 3, .coding = hc::qsgd_coding::elias_gamma}, n);
    same_on_any_threads<hc::terngrad>(hc::terngrad_options{}, n);
    same_on_any_threads<hc::terngrad>(hc::terngrad_options{.clip_sigmas = 2.5}, n);
    same_on_any_threads<hc::threshold>(hc::threshold_options{.tau = 1e-3f}, n);
}
