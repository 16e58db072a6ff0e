// The GPU sparse codecs against the CPU codecs (threshold, topk exact and sampled, dgc, randomk): every device message
// byte for byte the host's for the same bucket and state, decoded by the host, and the host's decoded by the GPU bit
// for bit (decode and decode_add); exact k with ties; error feedback's residuals; DGC's state, undo and blobs;
// random-k's additive form; buckets of half and double; NaN and infinities refused before any state changes; damaged
// messages refused with corrupt_message_error and the bucket untouched. Skips (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "../../compress/helpers.hpp"
#include "hitch/compress/dgc.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/randomk.hpp"
#include "hitch/compress/threshold.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/cuda/compress/dgc.cuh"
#include "hitch/cuda/compress/error_feedback.cuh"
#include "hitch/cuda/compress/randomk.cuh"
#include "hitch/cuda/compress/threshold.cuh"
#include "hitch/cuda/compress/topk.cuh"
#include "hitch/device/buffer.hpp"

namespace hc = hitch::compress;
namespace cc = hitch::cuda::compress;
namespace wire = hitch::compress::wire;
using hitch::memory_space;
using hitch::tensor_view;
using gpu = hitch::cuda::device;

namespace {

const std::vector<std::size_t> sizes = {0, 1, 31, 32, 33, 1000, (std::size_t{1} << 20) + 3};

template <class T>
hitch::device_buffer<T, gpu> upload(gpu& dev, const std::vector<T>& v) {
    hitch::device_buffer<T, gpu> b(dev, v.size());
    if (!v.empty()) dev.copy_from_host(b.data(), v.data(), v.size() * sizeof(T));
    return b;
}
template <class T>
std::vector<T> download(gpu& dev, const hitch::device_buffer<T, gpu>& b) {
    std::vector<T> v(b.size());
    if (!v.empty()) dev.copy_to_host(v.data(), b.data(), v.size() * sizeof(T));
    return v;
}
template <class T>
tensor_view<const T> in_view(const hitch::device_buffer<T, gpu>& b) {
    return {b.data(), b.size(), memory_space::cuda};
}
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), sizeof(T) * a.size()) == 0);
}

std::vector<float> with_ties(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    const float levels[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, -2.5f, 1e-40f, 3e-3f};
    std::vector<float> v(n);
    for (auto& x : v) x = levels[rng() % 8];
    return v;
}

/// The GPU decodes `message` (host bytes) into a bucket and into an accumulator; both must equal the host codec's.
template <class Host, class Device>
void same_decoding(gpu& dev, const Host& host, const Device& device, const std::vector<std::byte>& message,
                   std::size_t n) {
    std::vector<float> want(n, 7.0f), acc = hitch_test::gradients(n, 77), want_acc = acc;
    host.decode(message, tensor_view<float>(want));
    host.decode_add(message, tensor_view<float>(want_acc));
    cc::device_message m(dev);
    m.assign(message);
    auto out = upload(dev, std::vector<float>(n, 7.0f));
    auto dacc = upload(dev, acc);
    device.decode(dev, m.view(), out.view());
    device.decode_add(dev, m.view(), dacc.view());
    CHECK(same_bits(download(dev, out), want));
    CHECK(same_bits(download(dev, dacc), want_acc));
}

/// Decoding a damaged message on the GPU throws corrupt_message_error and leaves the bucket as it was; the host
/// refuses the same bytes.
template <class Host, class Device>
void refused_alike(gpu& dev, const Host& host, const Device& device, std::vector<std::byte> message, std::size_t n,
                   const std::function<void(std::vector<std::byte>&)>& damage) {
    damage(message);
    wire::store_le<std::uint64_t>(message.data() + 16, message.size() - wire::header_bytes);
    wire::seal(message);
    std::vector<float> host_out(n, 1.0f);
    CHECK(hitch_test::throws_corrupt([&] { host.decode(message, tensor_view<float>(host_out)); }));
    cc::device_message m(dev);
    m.assign(message);
    const std::vector<float> before = hitch_test::gradients(n, 123);
    auto out = upload(dev, before);
    CHECK(hitch_test::throws_corrupt([&] { device.decode(dev, m.view(), out.view()); }));
    CHECK(hitch_test::throws_corrupt([&] { device.decode_add(dev, m.view(), out.view()); }));
    CHECK(same_bits(download(dev, out), before));
}

/// The refusals a sparse (topk / dgc) payload must give: a count beyond the bucket, a count that lies, a varint cut
/// short, a byte too many, an index past the end, a value that is not finite, a continuation bit flipped.
template <class Host, class Device>
void sparse_refusals(gpu& dev, const Host& host, const Device& device, const std::vector<std::byte>& message,
                     std::size_t n) {
    const std::uint64_t k = wire::load_le<std::uint64_t>(message.data() + 32);
    const std::size_t varints = 32 + 8 + 4 * k;
    refused_alike(dev, host, device, message, n, [&](auto& m) { wire::store_le<std::uint64_t>(m.data() + 32, n + 1); });
    if (k == 0) return;
    refused_alike(dev, host, device, message, n, [&](auto& m) { wire::store_le<std::uint64_t>(m.data() + 32, k - 1); });
    refused_alike(dev, host, device, message, n, [&](auto& m) { m.pop_back(); });
    refused_alike(dev, host, device, message, n, [&](auto& m) { m.push_back(std::byte{0}); });
    refused_alike(dev, host, device, message, n, [&](auto& m) {
        // The last gap jumps past the end of the bucket.
        m.pop_back();
        std::byte big[10];
        const auto len = static_cast<std::size_t>(wire::put_varint(big, n) - big);
        m.insert(m.end(), big, big + len);
    });
    refused_alike(dev, host, device, message, n,
                  [&](auto& m) { wire::store_le(m.data() + 40, std::numeric_limits<float>::quiet_NaN()); });
    refused_alike(dev, host, device, message, n, [&](auto& m) { m[varints] ^= std::byte{0x80}; });
}

}  // namespace

TEST_CASE("gpu topk: messages are the host's bytes, exact and sampled, ties to the lowest indices",
          "[cuda][sparse][topk]") {
    gpu dev;
    for (std::size_t n : sizes) {
        for (int data = 0; data < 2; ++data) {
            for (double density : {0.001, 0.01, 0.3, 1.0}) {
                for (auto method : {hc::topk_method::exact, hc::topk_method::sampled}) {
                    const hc::topk host({.density = density, .method = method});
                    const hc::device_codec<hc::topk, gpu> device(host);
                    auto hs = host.make_state(n);
                    auto ds = device.make_state(dev, n);
                    cc::device_message dm(dev);
                    for (std::uint64_t step = 0; step < 2; ++step) {
                        const auto v = data == 0 ? hitch_test::gradients(n, 10 + n + step) : with_ties(n, 3 + step);
                        const auto dv = upload(dev, v);
                        std::vector<std::byte> hm;
                        host.encode(tensor_view<const float>(v), hs, hm);
                        const std::size_t size = device.encode(dev, in_view(dv), ds, dm);
                        INFO("n " << n << " data " << data << " density " << density << " sampled "
                                  << (method == hc::topk_method::sampled) << " step " << step);
                        REQUIRE(size == hm.size());
                        const auto got = dm.to_host();
                        REQUIRE(got == hm);
                        CHECK(wire::load_le<std::uint64_t>(got.data() + 32) == host.k(n));
                        CHECK(ds.step == hs.step);
                        if (n <= 1000 || density == 0.001) same_decoding(dev, host, device, hm, n);
                    }
                    // The state blob is the host's.
                    std::vector<std::byte> hb, db;
                    host.save_state(hs, hb);
                    device.save_state(dev, ds, db);
                    CHECK(hb == db);
                }
            }
        }
    }
}

TEST_CASE("gpu topk, threshold, randomk: error feedback gives the host's message and residual", "[cuda][sparse][ef]") {
    gpu dev;
    for (std::size_t n : {std::size_t{1}, std::size_t{33}, std::size_t{1000}, (std::size_t{1} << 20) + 3}) {
        const auto run = [&](const auto& host) {
            using H = std::remove_cvref_t<decltype(host)>;
            const hc::device_codec<H, gpu> device(host);
            auto hs = host.make_state(n);
            auto ds = device.make_state(dev, n);
            std::vector<float> r_in(n, 0.0f), r_out(n);
            auto d_in = upload(dev, r_in);
            auto d_out = upload(dev, r_out);
            cc::device_message dm(dev);
            for (int step = 0; step < 3; ++step) {
                const auto g = hitch_test::gradients(n, 500 + n + static_cast<std::size_t>(step));
                const auto dg = upload(dev, g);
                std::vector<std::byte> hm;
                host.encode_ef(tensor_view<const float>(g), r_in, r_out, hs, hm);
                device.encode_ef(dev, in_view(dg), in_view(d_in), d_out.view(), ds, dm);
                INFO(H::name << " n " << n << " step " << step);
                REQUIRE(dm.to_host() == hm);
                REQUIRE(same_bits(download(dev, d_out), r_out));
                std::swap(r_in, r_out);
                std::swap(d_in, d_out);
            }
        };
        run(hc::topk({.density = 0.01}));
        run(hc::threshold({.tau = 1e-3f}));
        run(hc::randomk({.density = 0.01, .scale = false}));
    }
}

TEST_CASE("gpu threshold: messages are the host's bytes; a growing selection is collected again",
          "[cuda][sparse][threshold]") {
    gpu dev;
    for (std::size_t n : sizes) {
        // tau from large to small, so the number sent grows past what the state kept room for.
        const auto v = hitch_test::gradients(n, 60 + n);
        const auto dv = upload(dev, v);
        for (float tau : {1e-1f, 5e-3f, 1e-3f, 1e-5f}) {
            const hc::threshold host({.tau = tau});
            const hc::device_codec<hc::threshold, gpu> device(host);
            auto hs = host.make_state(n);
            auto ds = device.make_state(dev, n);
            ds.room = 1;
            cc::device_message dm(dev);
            std::vector<std::byte> hm;
            host.encode(tensor_view<const float>(v), hs, hm);
            device.encode(dev, in_view(dv), ds, dm);
            INFO("n " << n << " tau " << tau);
            REQUIRE(dm.to_host() == hm);
            same_decoding(dev, host, device, hm, n);
            if (n == 1000) {
                const std::uint64_t count = wire::load_le<std::uint64_t>(hm.data() + 32);
                refused_alike(dev, host, device, hm, n,
                              [&](auto& m) { wire::store_le<std::uint64_t>(m.data() + 32, n + 1); });
                refused_alike(dev, host, device, hm, n, [&](auto& m) { wire::store_le(m.data() + 40, -1.0f); });
                if (count != 0) {
                    refused_alike(dev, host, device, hm, n, [&](auto& m) { m.pop_back(); });
                    refused_alike(dev, host, device, hm, n, [&](auto& m) { m.push_back(std::byte{1}); });
                    refused_alike(dev, host, device, hm, n, [&](auto& m) { m[44] ^= std::byte{0x80}; });
                }
            }
        }
    }
}

TEST_CASE("gpu dgc: messages, momentum, velocity, undo and blobs are the host's", "[cuda][sparse][dgc]") {
    gpu dev;
    for (std::size_t n : {std::size_t{1}, std::size_t{33}, std::size_t{20000}, (std::size_t{1} << 20) + 3}) {
        for (bool nesterov : {false, true}) {
            for (double clip : {0.0, 0.05}) {
                const hc::dgc host({.momentum = 0.9,
                                    .nesterov = nesterov,
                                    .final_density = 0.001,
                                    .warmup_steps = 2,
                                    .clip_norm = clip,
                                    .ranks = 4});
                const hc::device_codec<hc::dgc, gpu> device(host);
                auto hs = host.make_state(n);
                auto ds = device.make_state(dev, n);
                cc::device_message dm(dev);
                for (int step = 0; step < 10; ++step) {
                    const auto g = hitch_test::gradients(n, 700 + n + static_cast<std::size_t>(step), 2e-3f);
                    const auto dg = upload(dev, g);
                    std::vector<std::byte> hm;
                    host.encode(tensor_view<const float>(g), hs, hm);
                    device.encode(dev, in_view(dg), ds, dm);
                    INFO("n " << n << " nesterov " << nesterov << " clip " << clip << " step " << step);
                    REQUIRE(dm.to_host() == hm);
                    REQUIRE(same_bits(download(dev, ds.u), hs.u));
                    REQUIRE(same_bits(download(dev, ds.v), hs.v));
                    if (step == 4) {  // take an encode back on both
                        host.undo(hs);
                        device.undo(ds);
                        REQUIRE(same_bits(download(dev, ds.v), hs.v));
                        REQUIRE(ds.step == hs.step);
                    }
                }
                if (n == 20000)
                    same_decoding(
                        dev, host, device,
                        [&] {
                            std::vector<std::byte> m;
                            auto s = host.make_state(n);
                            const auto g1 = hitch_test::gradients(n, 1);
                            host.encode(tensor_view<const float>(g1), s, m);
                            return m;
                        }(),
                        n);
                // Blobs: the same bytes; a host blob loaded on the GPU continues as the host does.
                std::vector<std::byte> hb, db;
                host.save_state(hs, hb);
                device.save_state(dev, ds, db);
                CHECK(hb == db);
                auto restored = device.make_state(dev, n);
                device.load_state(dev, hb, restored);
                const auto g = hitch_test::gradients(n, 9);
                const auto dg = upload(dev, g);
                std::vector<std::byte> hm;
                host.encode(tensor_view<const float>(g), hs, hm);
                device.encode(dev, in_view(dg), restored, dm);
                CHECK(dm.to_host() == hm);
            }
        }
    }
}

TEST_CASE("gpu randomk: the host's coordinates from the same key, sequential and batched draws",
          "[cuda][sparse][randomk]") {
    gpu dev;
    for (std::size_t n : sizes) {
        for (double density : {0.0001, 0.01, 0.3, 0.5, 0.7, 1.0}) {
            for (bool scale : {true, false}) {
                const hc::randomk host({.density = density, .scale = scale});
                const hc::device_codec<hc::randomk, gpu> device(host);
                auto hs = host.make_state(n);
                auto ds = device.make_state(dev, n);
                cc::device_message dm(dev);
                for (int step = 0; step < 2; ++step) {
                    const auto v = hitch_test::gradients(n, 40 + n + static_cast<std::size_t>(step));
                    const auto dv = upload(dev, v);
                    std::vector<std::byte> hm;
                    host.encode(tensor_view<const float>(v), hs, hm);
                    device.encode(dev, in_view(dv), ds, dm);
                    INFO("n " << n << " density " << density << " scale " << scale << " step " << step);
                    REQUIRE(dm.to_host() == hm);
                    if (n <= 1000 || density == 0.01) same_decoding(dev, host, device, hm, n);
                    // The additive form: the same values, scattered back alike.
                    std::vector<float> hv(host.summable_count(hs, n)), hout(n);
                    host.encode_summable(tensor_view<const float>(v), hs, std::span<float>(hv));
                    host.decode_summed(std::span<const float>(hv), hs, tensor_view<float>(hout));
                    hitch::device_buffer<float, gpu> dsum(dev, device.summable_count(ds, n)), dout(dev, n);
                    device.encode_summable(dev, in_view(dv), ds, dsum.view());
                    device.decode_summed(dev, in_view(dsum), ds, dout.view());
                    CHECK(same_bits(download(dev, dsum), hv));
                    CHECK(same_bits(download(dev, dout), hout));
                    CHECK(device.agreement_value(ds) == host.agreement_value(hs));
                }
                if (n == 1000 && density == 0.01) {
                    std::vector<std::byte> hm;
                    const auto g2 = hitch_test::gradients(n, 2);
                    host.encode(tensor_view<const float>(g2), hs, hm);
                    refused_alike(dev, host, device, hm, n, [&](auto& m) { m.pop_back(); });
                    refused_alike(dev, host, device, hm, n,
                                  [&](auto& m) { wire::store_le<std::uint64_t>(m.data() + 40, n + 1); });
                    refused_alike(dev, host, device, hm, n, [&](auto& m) {
                        wire::store_le(m.data() + 52, std::numeric_limits<float>::infinity());
                    });
                }
            }
        }
    }
}

TEST_CASE("gpu sparse codecs refuse damaged messages and leave the bucket untouched", "[cuda][sparse][corrupt]") {
    gpu dev;
    for (std::size_t n : {std::size_t{33}, std::size_t{1000}, std::size_t{70000}}) {
        const auto v = hitch_test::gradients(n, n);
        for (double density : {0.01, 0.3}) {
            const hc::topk host({.density = density});
            const hc::device_codec<hc::topk, gpu> device(host);
            auto hs = host.make_state(n);
            std::vector<std::byte> hm;
            host.encode(tensor_view<const float>(v), hs, hm);
            INFO("n " << n << " density " << density);
            sparse_refusals(dev, host, device, hm, n);
            // Damaged bytes the checksum catches, and a message for another bucket size.
            cc::device_message m(dev);
            auto bad = hm;
            bad[40] ^= std::byte{1};
            m.assign(bad);
            auto out = upload(dev, v);
            CHECK(hitch_test::throws_corrupt([&] { device.decode(dev, m.view(), out.view()); }, "checksum"));
            m.assign(hm);
            hitch::device_buffer<float, gpu> other(dev, n + 1);
            CHECK(hitch_test::throws_corrupt([&] { device.decode(dev, m.view(), other.view()); }));
            CHECK(same_bits(download(dev, out), v));
        }
        const hc::dgc hd_codec({.final_density = 0.01});
        const hc::device_codec<hc::dgc, gpu> dd(hd_codec);
        auto ds = hd_codec.make_state(n);
        std::vector<std::byte> dm;
        hd_codec.encode(tensor_view<const float>(v), ds, dm);
        sparse_refusals(dev, hd_codec, dd, dm, n);
    }
}

TEST_CASE("gpu sparse codecs refuse NaN and infinities before any state changes", "[cuda][sparse][nonfinite]") {
    gpu dev;
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
        for (std::size_t n : {std::size_t{1}, std::size_t{1000}, (std::size_t{1} << 20) + 3}) {
            for (std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
                auto v = hitch_test::gradients(n, 8);
                v[at] = bad;
                const auto dv = upload(dev, v);
                cc::device_message m(dev);
                INFO("n " << n << " at " << at);
                for (auto method : {hc::topk_method::exact, hc::topk_method::sampled})
                    for (double density : {0.001, 1.0}) {
                        const hc::device_codec<hc::topk, gpu> topk(hc::topk({.density = density, .method = method}));
                        auto s = topk.make_state(dev, n);
                        CHECK_THROWS_AS(topk.encode(dev, in_view(dv), s, m), hc::non_finite_error);
                        CHECK(s.step == 0);
                    }
                const hc::device_codec<hc::threshold, gpu> threshold(hc::threshold({.tau = 1e-3f}));
                auto ts = threshold.make_state(dev, n);
                CHECK_THROWS_AS(threshold.encode(dev, in_view(dv), ts, m), hc::non_finite_error);
                const hc::device_codec<hc::randomk, gpu> randomk(hc::randomk({.density = 0.01}));
                auto rs = randomk.make_state(dev, n);
                CHECK_THROWS_AS(randomk.encode(dev, in_view(dv), rs, m), hc::non_finite_error);
                CHECK(rs.step == 0);
                const hc::device_codec<hc::dgc, gpu> dgc(hc::dgc({.final_density = 0.01}));
                auto ds = dgc.make_state(dev, n);
                CHECK_THROWS_AS(dgc.encode(dev, in_view(dv), ds, m), hc::non_finite_error);
                CHECK(ds.step == 0);
                CHECK(same_bits(download(dev, ds.u), std::vector<float>(n, 0.0f)));
                CHECK(same_bits(download(dev, ds.v), std::vector<float>(n, 0.0f)));
            }
        }
    }
}

TEST_CASE("gpu sparse codecs take half and double buckets as the host codecs do", "[cuda][sparse][types]") {
    gpu dev;
    const std::size_t n = 5000;
    const auto f = hitch_test::gradients(n, 31);
    std::vector<hitch::half> h(n);
    std::vector<double> d(n);
    for (std::size_t i = 0; i < n; ++i) {
        h[i] = hitch::half(f[i] * 100.0f);
        d[i] = static_cast<double>(f[i]) * 1.0000001;
    }
    const auto dh = upload(dev, h);
    const auto dd = upload(dev, d);
    const auto both = [&](const auto& host) {
        using H = std::remove_cvref_t<decltype(host)>;
        const hc::device_codec<H, gpu> device(host);
        cc::device_message m(dev);
        auto hs = host.make_state(n);
        auto ds = device.make_state(dev, n);
        std::vector<std::byte> hm;
        host.encode(tensor_view<const hitch::half>(h), hs, hm);
        device.encode(dev, in_view(dh), ds, m);
        INFO(H::name << " half");
        CHECK(m.to_host() == hm);
        host.encode(tensor_view<const double>(d), hs, hm);
        device.encode(dev, in_view(dd), ds, m);
        CHECK(m.to_host() == hm);
        // Decoding into double buckets: through floats, as the host.
        std::vector<double> want(n, 3.0), acc(n, 0.25), want_acc = acc;
        host.decode(hm, tensor_view<double>(want));
        host.decode_add(hm, tensor_view<double>(want_acc));
        auto out = upload(dev, std::vector<double>(n, 3.0));
        auto dacc = upload(dev, acc);
        device.decode(dev, m.view(), out.view());
        device.decode_add(dev, m.view(), dacc.view());
        CHECK(same_bits(download(dev, out), want));
        CHECK(same_bits(download(dev, dacc), want_acc));
    };
    both(hc::topk({.density = 0.01}));
    both(hc::threshold({.tau = 0.05f}));
    both(hc::randomk({.density = 0.02}));
    both(hc::dgc({.final_density = 0.01}));
}

TEST_CASE("gpu error_feedback<topk | threshold | randomk>: the host wrapper's messages, residuals and blobs",
          "[cuda][sparse][ef]") {
    gpu dev;
    const std::size_t n = 20000;
    const auto run = [&](const auto& inner) {
        using C = std::remove_cvref_t<decltype(inner)>;
        const hc::error_feedback<C> host(inner);
        const hc::device_codec<hc::error_feedback<C>, gpu> device(host);
        auto hs = host.make_state(n);
        auto ds = device.make_state(dev, n);
        cc::device_message dm(dev);
        for (int step = 0; step < 4; ++step) {
            const auto g = hitch_test::gradients(n, 90 + static_cast<std::size_t>(step));
            const auto dg = upload(dev, g);
            std::vector<std::byte> hm;
            host.encode(tensor_view<const float>(g), hs, hm);
            device.encode(dev, in_view(dg), ds, dm);
            INFO(C::name << " step " << step);
            REQUIRE(dm.to_host() == hm);
            REQUIRE(same_bits(download(dev, ds.residual), hs.residual));
        }
        std::vector<std::byte> hb, db;
        host.save_state(hs, hb);
        device.save_state(dev, ds, db);
        CHECK(hb == db);
        if constexpr (C::additive) {  // the all-reduce form: residual from the summable values
            std::vector<float> hv(host.summable_count(hs, n)), hout(n);
            const auto g = hitch_test::gradients(n, 5);
            const auto dg = upload(dev, g);
            host.encode_summable(tensor_view<const float>(g), hs, std::span<float>(hv));
            hitch::device_buffer<float, gpu> dv(dev, hv.size());
            device.encode_summable(dev, in_view(dg), ds, dv.view());
            CHECK(same_bits(download(dev, dv), hv));
            CHECK(same_bits(download(dev, ds.residual), hs.residual));
        }
    };
    run(hc::topk({.density = 0.01}));
    run(hc::threshold({.tau = 2e-3f}));
    run(hc::randomk({.density = 0.05, .scale = false}));
}
