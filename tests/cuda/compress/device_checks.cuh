#pragma once
// Checks of a GPU codec (hitch::compress::device_codec<Codec, cuda::device>) against its host codec, shared by the
// GPU tests of this directory: the device's message is the host's byte for byte, decode and decode_add on the device
// give the host's bits, a host message decodes on the GPU, damaged messages give the host's corrupt_message_error
// text and leave the output untouched, state blobs are the host's, error-feedback residuals equal over several steps,
// and NaN or infinities are refused as the host refuses them, leaving the state as it was.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/cuda/compress/detail/wire.cuh"
#include "hitch/cuda/device.hpp"
#include "hitch/device/buffer.hpp"

namespace device_checks {

namespace hc = hitch::compress;
using gpu = hitch::cuda::device;
template <class T>
using buffer = hitch::device_buffer<T, gpu>;
using hitch::cuda::compress::device_message;

inline const std::vector<std::size_t> edge_sizes = {0, 1, 31, 32, 33, (std::size_t{1} << 20) + 3};

inline std::vector<float> gradients(std::size_t n, std::uint32_t seed, float scale = 1e-2f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    for (std::size_t i = 0; i < n; i += 997) v[i] *= 40.0f;
    for (std::size_t i = 5; i < n; i += 1999) v[i] = 0.0f;
    for (std::size_t i = 7; i < n; i += 4999) v[i] = 3e-41f;  // a float denormal
    return v;
}

template <class T>
std::vector<T> as(const std::vector<float>& v) {
    std::vector<T> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = T(v[i]);
    return out;
}

template <class T>
buffer<T> upload(gpu& dev, const std::vector<T>& v) {
    buffer<T> b(dev, v.size());
    if (!v.empty()) dev.copy_from_host(b.data(), v.data(), v.size() * sizeof(T));
    return b;
}

template <class T>
std::vector<T> download(gpu& dev, const buffer<T>& b) {
    std::vector<T> v(b.size());
    if (!v.empty()) dev.copy_to_host(v.data(), b.data(), v.size() * sizeof(T));
    return v;
}

/// Whether x is a NaN of its floating type (by the bits).
template <class T>
bool is_nan(const T& x) {
    if constexpr (std::is_same_v<T, float>) {
        std::uint32_t b;
        std::memcpy(&b, &x, 4);
        return (b & 0x7fffffffu) > 0x7f800000u;
    } else if constexpr (std::is_same_v<T, double>) {
        std::uint64_t b;
        std::memcpy(&b, &x, 8);
        return (b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    } else if constexpr (std::is_same_v<T, hitch::half>) {
        return (x.bits() & 0x7fffu) > 0x7c00u;
    } else if constexpr (std::is_same_v<T, hitch::bfloat16>) {
        return (x.bits() & 0x7fffu) > 0x7f80u;
    } else {
        return false;
    }
}

/// Bitwise equality of two arrays, except that any NaN equals any NaN: arithmetic on a NaN gives the canonical NaN
/// on the GPU and keeps an operand's payload (or gives the "indefinite" NaN) on x86, so a decode_add of a message
/// that holds a NaN (none carries them; so can a damaged message) is NaN on both sides with other payloads.
template <class T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0 && !(is_nan(a[i]) && is_nan(b[i]))) return false;
    return true;
}

/// The text of the hitch::error f throws ("" when it throws nothing).
template <class F>
std::string error_text(F&& f) {
    try {
        f();
    } catch (const hitch::error& e) {
        return e.what();
    }
    return {};
}

/// Gives a host state and a device state the same random counters (qsgd, terngrad; through error_feedback too).
template <class H, class D>
void set_counters(H& h, D& d, std::uint64_t step, std::uint64_t stream) {
    if constexpr (requires {
                      h.inner;
                      d.inner;
                  }) {
        set_counters(h.inner, d.inner, step, stream);
    } else if constexpr (requires {
                             h.step;
                             d.step;
                         }) {
        h.step = d.step = step;
        h.stream = d.stream = stream;
    }
}
template <class H, class D>
bool same_counters(const H& h, const D& d) {
    if constexpr (requires {
                      h.inner;
                      d.inner;
                  })
        return same_counters(h.inner, d.inner);
    else if constexpr (requires {
                           h.step;
                           d.step;
                       })
        return h.step == d.step && h.stream == d.stream;
    else
        return true;
}

/// Encode on both sides (with the same counters); the messages, their decodes and the state blobs must agree.
/// Returns the host's message (empty when both refused the bucket).
template <class Codec, class T>
std::vector<std::byte> check_roundtrip(gpu& dev, const Codec& codec, const std::vector<float>& values,
                                       std::uint64_t step = 3, std::uint64_t stream = 1) {
    const hc::device_codec<Codec, gpu> dc(codec);
    const std::size_t n = values.size();
    INFO(Codec::name << " on " << hitch::name(hitch::dtype_of<T>()) << ", n = " << n);
    auto hs = codec.make_state(n);
    auto ds = dc.make_state(dev, n);
    set_counters(hs, ds, step, stream);
    const std::vector<T> in = as<T>(values);
    const buffer<T> d_in = upload(dev, in);
    std::vector<std::byte> host;
    const std::string host_text =
        error_text([&] { codec.encode(hitch::tensor_view<const T>(in.data(), n), hs, host); });
    device_message message(dev);
    std::size_t size = 0;
    const std::string device_text = error_text([&] { size = dc.encode(dev, d_in.view().as_const(), ds, message); });
    REQUIRE(device_text == host_text);
    REQUIRE(same_counters(hs, ds));
    if (!host_text.empty()) return {};
    CHECK(size == host.size());
    REQUIRE(message.to_host() == host);
    // decode and decode_add of the GPU's message on the GPU, of the host's on the host
    const std::vector<T> start = as<T>(gradients(n, 99));
    std::vector<T> h_out = start, h_acc = start;
    codec.decode(host, hitch::tensor_view<T>(h_out.data(), n));
    codec.decode_add(host, hitch::tensor_view<T>(h_acc.data(), n));
    buffer<T> d_out = upload(dev, start), d_acc = upload(dev, start);
    dc.decode(dev, message.view(), d_out.view());
    dc.decode_add(dev, message.view(), d_acc.view());
    REQUIRE(same(download(dev, d_out), h_out));
    REQUIRE(same(download(dev, d_acc), h_acc));
    // the host's message decoded on the GPU, the GPU's on the host
    device_message from_host(dev);
    from_host.assign(host);
    buffer<T> d_again = upload(dev, start);
    dc.decode(dev, from_host.view(), d_again.view());
    REQUIRE(same(download(dev, d_again), h_out));
    std::vector<T> h_again = start;
    codec.decode(message.to_host(), hitch::tensor_view<T>(h_again.data(), n));
    REQUIRE(same(h_again, h_out));
    // state blobs
    std::vector<std::byte> host_blob, device_blob;
    codec.save_state(hs, host_blob);
    dc.save_state(dev, ds, device_blob);
    REQUIRE(device_blob == host_blob);
    auto loaded = dc.make_state(dev, n);
    dc.load_state(dev, host_blob, loaded);
    std::vector<std::byte> again;
    dc.save_state(dev, loaded, again);
    REQUIRE(again == host_blob);
    return host;
}

/// Damaged messages: the GPU reports what the host reports and leaves the output as it was. Damage that keeps the
/// checksum right (resealed) reaches the payload checks.
template <class Codec, class T>
void check_corrupt(gpu& dev, const Codec& codec, const std::vector<std::byte>& message, std::size_t n) {
    const hc::device_codec<Codec, gpu> dc(codec);
    const std::vector<T> start = as<T>(gradients(n, 7));
    const auto compare = [&](const std::vector<std::byte>& bad, const char* what) {
        INFO(Codec::name << ": " << what << " (" << bad.size() << " bytes)");
        std::vector<T> h_out = start;
        const std::string host_text =
            error_text([&] { codec.decode_add(bad, hitch::tensor_view<T>(h_out.data(), n)); });
        device_message m(dev);
        m.assign(bad);
        buffer<T> d_out = upload(dev, start);
        const std::string device_text = error_text([&] { dc.decode_add(dev, m.view(), d_out.view()); });
        REQUIRE(device_text == host_text);
        REQUIRE(same(download(dev, d_out), h_out));  // untouched when refused, the host's sum otherwise
        return !host_text.empty();
    };
    for (std::size_t at :
         {std::size_t{0}, std::size_t{4}, std::size_t{5}, std::size_t{6}, std::size_t{7}, std::size_t{8},
          std::size_t{16}, std::size_t{24}, std::size_t{28}, message.size() / 2, message.size() - 1}) {
        if (at >= message.size()) continue;
        auto bad = message;
        bad[at] ^= std::byte{0x10};
        CHECK(compare(bad, "flipped byte"));
    }
    for (std::size_t size : {std::size_t{0}, std::size_t{31}, message.size() - 1}) {
        if (size >= message.size()) continue;
        auto bad = message;
        bad.resize(size);
        CHECK(compare(bad, "truncated"));
    }
    std::mt19937 rng(static_cast<std::uint32_t>(n));
    for (int trial = 0; trial < 24 && message.size() > hc::wire::header_bytes; ++trial) {
        auto bad = message;
        const std::size_t at = hc::wire::header_bytes + rng() % (bad.size() - hc::wire::header_bytes);
        bad[at] ^= static_cast<std::byte>(1u << (rng() % 8));
        hc::wire::seal(bad);
        (void)compare(bad, "resealed payload damage");
    }
}

/// error_feedback<Codec> on both sides over several steps: messages and residuals equal; a NaN step refused with
/// the host's text and the residual left as it was; state blobs equal.
template <class Codec, class T>
void check_error_feedback(gpu& dev, const Codec& codec, std::size_t n) {
    using ef = hc::error_feedback<Codec>;
    const ef host_codec(codec);
    const hc::device_codec<ef, gpu> dc(host_codec);
    INFO(ef::name << " on " << hitch::name(hitch::dtype_of<T>()) << ", n = " << n);
    auto hs = host_codec.make_state(n);
    auto ds = dc.make_state(dev, n);
    set_counters(hs, ds, 2, 5);
    for (std::uint32_t step = 0; step < 4; ++step) {
        auto values = gradients(n, 1000 + step);
        const bool poisoned = step == 2 && n > 0;
        if (poisoned) values[n / 2] = std::numeric_limits<float>::quiet_NaN();
        const std::vector<T> g = as<T>(values);
        const buffer<T> d_g = upload(dev, g);
        const std::vector<float> before = hs.residual;
        std::vector<std::byte> host;
        const std::string host_text =
            error_text([&] { host_codec.encode(hitch::tensor_view<const T>(g.data(), n), hs, host); });
        device_message message(dev);
        const std::string device_text = error_text([&] { dc.encode(dev, d_g.view().as_const(), ds, message); });
        INFO("step " << step);
        REQUIRE(device_text == host_text);
        REQUIRE(poisoned == !host_text.empty());
        const auto mirrored = dc.to_host(dev, ds);
        REQUIRE(same(mirrored.residual, hs.residual));
        REQUIRE(same_counters(hs, ds));
        if (poisoned) {
            REQUIRE(same(mirrored.residual, before));
            continue;
        }
        REQUIRE(message.to_host() == host);
    }
    std::vector<std::byte> host_blob, device_blob;
    host_codec.save_state(hs, host_blob);
    dc.save_state(dev, ds, device_blob);
    REQUIRE(device_blob == host_blob);
    auto loaded = dc.make_state(dev, n);
    dc.load_state(dev, host_blob, loaded);
    REQUIRE(same(dc.to_host(dev, loaded).residual, hs.residual));
    // undo swaps the previous residual back, as on the host
    host_codec.undo(hs);
    dc.undo(ds);
    REQUIRE(same(dc.to_host(dev, ds).residual, hs.residual));
}

/// encode_ef with explicit residual buffers (the compressed ring's hops): message and r_out equal.
template <class Codec, class T>
void check_encode_ef(gpu& dev, const Codec& codec, std::size_t n) {
    const hc::device_codec<Codec, gpu> dc(codec);
    INFO(Codec::name << " encode_ef on " << hitch::name(hitch::dtype_of<T>()) << ", n = " << n);
    auto hs = codec.make_state(n);
    auto ds = dc.make_state(dev, n);
    set_counters(hs, ds, 1, 9);
    const std::vector<T> g = as<T>(gradients(n, 55));
    const std::vector<float> r_in = gradients(n, 56, 2e-3f);
    std::vector<float> h_out(n);
    std::vector<std::byte> host;
    codec.encode_ef(hitch::tensor_view<const T>(g.data(), n), std::span<const float>(r_in), std::span<float>(h_out), hs,
                    host);
    const buffer<T> d_g = upload(dev, g);
    const buffer<float> d_r = upload(dev, r_in);
    buffer<float> d_out(dev, n);
    device_message message(dev);
    dc.encode_ef(dev, d_g.view().as_const(), d_r.view().as_const(), d_out.view(), ds, message);
    REQUIRE(message.to_host() == host);
    REQUIRE(same(download(dev, d_out), h_out));
    REQUIRE(same_counters(hs, ds));
}

/// The additive form: the summable values and their decode equal the host's.
template <class Codec, class T>
void check_summable(gpu& dev, const Codec& codec, std::size_t n) {
    using S = typename Codec::template summable_t<T>;
    const hc::device_codec<Codec, gpu> dc(codec);
    INFO(Codec::name << " summable on " << hitch::name(hitch::dtype_of<T>()) << ", n = " << n);
    auto hs = codec.make_state(n);
    auto ds = dc.make_state(dev, n);
    const std::vector<T> g = as<T>(gradients(n, 66));
    std::vector<S> h_sum(codec.summable_count(hs, n));
    codec.encode_summable(hitch::tensor_view<const T>(g.data(), n), hs, std::span<S>(h_sum));
    const buffer<T> d_g = upload(dev, g);
    buffer<S> d_sum(dev, dc.summable_count(ds, n));
    dc.encode_summable(dev, d_g.view().as_const(), ds, d_sum.view());
    REQUIRE(same(download(dev, d_sum), h_sum));
    std::vector<T> h_out(n);
    codec.decode_summed(std::span<const S>(h_sum), hs, hitch::tensor_view<T>(h_out.data(), n));
    buffer<T> d_out(dev, n);
    dc.decode_summed(dev, d_sum.view().as_const(), ds, d_out.view());
    REQUIRE(same(download(dev, d_out), h_out));
    if constexpr (requires { hs.residual; }) REQUIRE(same(dc.to_host(dev, ds).residual, hs.residual));
}

/// A bucket in host memory is refused with config_error.
template <class Codec>
void check_refuses_host_memory(gpu& dev, const Codec& codec) {
    const hc::device_codec<Codec, gpu> dc(codec);
    std::vector<float> host(8);
    auto ds = dc.make_state(dev, host.size());
    device_message message(dev);
    CHECK_THROWS_AS(dc.encode(dev, hitch::tensor_view<const float>(host.data(), host.size()), ds, message),
                    hitch::config_error);
}

}  // namespace device_checks
