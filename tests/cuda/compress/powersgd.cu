// The GPU PowerSGD against compress::powersgd: round 1's P within cuBLAS's rounding bound of the host's (the
// uncompressed layers exactly), the two-round protocol over two ranks within the stated bound step after step, the
// one-rank message in the host's layout, the host's messages decoded to the host's bits, the host's state blobs, and
// refusals (NaN and infinities before any state changes; damaged messages with the bucket untouched). Skips (exit 77)
// without a GPU.
//
// The bound (docs/compression.md, "On the GPU"): each GEMM's entries are dot products of length K that the host and
// cuBLAS add in different orders, so |P_gpu - P_cpu| <= 2 gamma_K |M| |Q| entry-wise, gamma_K = K u / (1 - K u),
// u = 2^-24; summed, ||P_gpu - P_cpu||_F <= 2 gamma_cols ||M||_F ||Q||_F. Orthogonalisation turns P's relative error
// into up to kappa(P) times that in P^, and Q = M^T P^ adds 2 gamma_rows ||M||_F, so to first order
//   ||out_gpu - out_cpu||_F <= 4 kappa(P) (eps_P + 2 gamma_rows) ||M||_F,   eps_P = 2 gamma_cols ||M||_F ||Q||_F /
//   ||P||_F
// per compressed layer, and the same for the residual M - P^ Q^T.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "../../compress/helpers.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/cuda/compress/powersgd.cuh"
#include "hitch/device/buffer.hpp"

namespace hc = hitch::compress;
namespace cc = hitch::cuda::compress;
namespace wire = hitch::compress::wire;
using hitch::memory_space;
using hitch::tensor_view;
using gpu = hitch::cuda::device;
using device_codec = hc::device_codec<hc::powersgd, gpu>;

namespace {

constexpr double u = 0x1p-24;

std::vector<float> download(gpu& dev, const float* p, std::size_t n) {
    std::vector<float> v(n);
    if (n != 0) dev.copy_to_host(v.data(), p, n * sizeof(float));
    return v;
}
hitch::device_buffer<float, gpu> upload(gpu& dev, const std::vector<float>& v) {
    hitch::device_buffer<float, gpu> b(dev, v.size());
    if (!v.empty()) dev.copy_from_host(b.data(), v.data(), v.size() * sizeof(float));
    return b;
}
tensor_view<const float> in_view(const hitch::device_buffer<float, gpu>& b) {
    return {b.data(), b.size(), memory_space::cuda};
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

double frob(const float* p, std::size_t n) {
    double s = 0.0;
    for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(p[i]) * p[i];
    return std::sqrt(s);
}
double frob_diff(const float* a, const float* b, std::size_t n) {
    double s = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(a[i]) - b[i];
        s += d * d;
    }
    return std::sqrt(s);
}
double gamma(std::size_t k) { return static_cast<double>(k) * u / (1.0 - static_cast<double>(k) * u); }

/// The condition number of the r columns (length rows) of P: the square root of the ratio of the extreme
/// eigenvalues of P^T P (Jacobi rotations on the r x r Gram matrix).
double condition(const float* p, std::size_t rows, std::size_t r) {
    std::vector<double> g(r * r, 0.0);
    for (std::size_t a = 0; a < r; ++a)
        for (std::size_t b = 0; b < r; ++b)
            for (std::size_t i = 0; i < rows; ++i)
                g[a * r + b] += static_cast<double>(p[a * rows + i]) * p[b * rows + i];
    for (int sweep = 0; sweep < 50; ++sweep)
        for (std::size_t a = 0; a < r; ++a)
            for (std::size_t b = a + 1; b < r; ++b) {
                const double off = g[a * r + b];
                if (std::fabs(off) < 1e-300) continue;
                const double theta = (g[b * r + b] - g[a * r + a]) / (2.0 * off);
                const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
                const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
                for (std::size_t k = 0; k < r; ++k) {
                    const double x = g[k * r + a], y = g[k * r + b];
                    g[k * r + a] = c * x - s * y;
                    g[k * r + b] = s * x + c * y;
                }
                for (std::size_t k = 0; k < r; ++k) {
                    const double x = g[a * r + k], y = g[b * r + k];
                    g[a * r + k] = c * x - s * y;
                    g[b * r + k] = s * x + c * y;
                }
            }
    double lo = std::numeric_limits<double>::infinity(), hi = 0.0;
    for (std::size_t a = 0; a < r; ++a) {
        lo = std::min(lo, g[a * r + a]);
        hi = std::max(hi, g[a * r + a]);
    }
    return lo > 0.0 ? std::sqrt(hi / lo) : std::numeric_limits<double>::infinity();
}

struct bucket_case {
    std::size_t n;
    std::vector<hc::matrix_shape> shapes;  // empty: a bare bucket
};
std::vector<bucket_case> cases() {
    return {{1, {}},
            {31, {}},
            {33, {}},
            {1000, {}},
            {(std::size_t{1} << 20) + 3, {}},
            {64 * 48 + 7 + 5 * 90 + 200 * 3, {{64, 48}, {7, 1}, {5, 90}, {200, 3}}}};
}
hc::powersgd::state host_state(const hc::powersgd& codec, const bucket_case& c) {
    return c.shapes.empty() ? codec.make_state(c.n) : codec.make_state(c.n, c.shapes);
}
device_codec::state gpu_state(gpu& dev, const device_codec& codec, const bucket_case& c) {
    return c.shapes.empty() ? codec.make_state(dev, c.n) : codec.make_state(dev, c.n, c.shapes);
}

/// Checks a GPU result against the host's, layer by layer: exact bits for uncompressed layers, the bound above for
/// compressed ones (M: the host's M of the step, P: the host's round-1 sum, Q: the Q round 1 started from).
void within_bound(const hc::powersgd::state& hs, std::size_t r, const std::vector<float>& m,
                  const std::vector<float>& p, const std::vector<float>& q, const std::vector<float>& got,
                  const std::vector<float>& want, const char* what) {
    for (const auto& L : hs.layers) {
        const float* g = got.data() + L.offset;
        const float* w = want.data() + L.offset;
        INFO(what << ": layer at " << L.offset << " of " << L.rows << " x " << L.cols << ", compressed "
                  << L.compressed);
        if (!L.compressed) {
            CHECK(std::memcmp(g, w, 4 * L.elements) == 0);
            continue;
        }
        const double norm_m = frob(m.data() + L.offset, L.elements);
        const double norm_p = frob(p.data() + L.p_offset, r * L.rows);
        const double norm_q = frob(q.data() + L.q_offset, r * L.cols);
        const double kappa = condition(p.data() + L.p_offset, L.rows, r);
        REQUIRE(std::isfinite(kappa));
        const double eps_p = norm_p > 0 ? 2.0 * gamma(L.cols) * norm_m * norm_q / norm_p : 0.0;
        const double bound = 4.0 * kappa * (eps_p + 2.0 * gamma(L.rows)) * norm_m + 1e-30;
        const double diff = frob_diff(g, w, L.elements);
        INFO("difference " << diff << " bound " << bound << " kappa " << kappa);
        CHECK(diff <= bound);
    }
}

}  // namespace

TEST_CASE("gpu powersgd: round 1's P within the GEMM bound, uncompressed layers exact", "[cuda][sparse][powersgd]") {
    gpu dev;
    for (std::size_t r : {std::size_t{1}, std::size_t{2}, std::size_t{4}}) {
        const hc::powersgd host({.rank = r});
        const device_codec device(host);
        for (const auto& c : cases()) {
            auto hs = host_state(host, c);
            auto ds = gpu_state(dev, device, c);
            const auto g = hitch_test::gradients(c.n, 3 + c.n);
            const auto dg = upload(dev, g);
            std::vector<float> hp(host.p_count(hs));
            const std::vector<float> q0 = hs.q;
            host.compute_p(tensor_view<const float>(g), hs, hp);
            hitch::device_buffer<float, gpu> dp(dev, device.p_count(ds));
            device.compute_p(dev, in_view(dg), ds, dp.view());
            const auto gp = download(dev, dp.data(), dp.size());
            for (const auto& L : hs.layers) {
                INFO("n " << c.n << " r " << r << " layer at " << L.offset);
                if (!L.compressed) {
                    CHECK(std::memcmp(gp.data() + L.p_offset, hp.data() + L.p_offset, 4 * L.elements) == 0);
                    continue;
                }
                const double bound = 2.0 * gamma(L.cols) * frob(hs.m.data() + L.offset, L.elements) *
                                         frob(q0.data() + L.q_offset, r * L.cols) +
                                     1e-30;
                CHECK(frob_diff(gp.data() + L.p_offset, hp.data() + L.p_offset, r * L.rows) <= bound);
            }
        }
    }
}

TEST_CASE("gpu powersgd: two ranks' protocol agrees with the host's within the bound, step after step",
          "[cuda][sparse][powersgd]") {
    gpu dev;
    for (std::size_t r : {std::size_t{1}, std::size_t{2}, std::size_t{4}}) {
        for (bool warm : {true, false}) {
            const hc::powersgd host({.rank = r, .warm_start = warm});
            const device_codec device(host);
            for (const auto& c : cases()) {
                hc::powersgd::state hs[2] = {host_state(host, c), host_state(host, c)};
                device_codec::state ds[2] = {gpu_state(dev, device, c), gpu_state(dev, device, c)};
                const std::size_t np = host.p_count(hs[0]), nq = host.q_count(hs[0]);
                for (int step = 0; step < 3; ++step) {
                    std::vector<float> g[2];
                    hitch::device_buffer<float, gpu> dg[2];
                    for (int k = 0; k < 2; ++k) {
                        g[k] = hitch_test::gradients(c.n, 100 * static_cast<std::size_t>(step) + 10 * k + c.n);
                        dg[k] = upload(dev, g[k]);
                    }
                    // The host's protocol, the sums in rank order.
                    std::vector<float> hp[2], hq[2], p_sum(np, 0.0f), q_sum(nq, 0.0f), hout[2];
                    for (int k = 0; k < 2; ++k) {
                        hp[k].resize(np);
                        host.compute_p(tensor_view<const float>(g[k]), hs[k], hp[k]);
                    }
                    const std::vector<float> q_start = hs[0].q;  // the Q round 1 used (fresh without warm start)
                    for (std::size_t i = 0; i < np; ++i) p_sum[i] = hp[0][i] + hp[1][i];
                    for (int k = 0; k < 2; ++k) {
                        hq[k].resize(nq);
                        host.compute_q(p_sum, hs[k], hq[k]);
                    }
                    for (std::size_t i = 0; i < nq; ++i) q_sum[i] = hq[0][i] + hq[1][i];
                    const std::vector<float> m0 = hs[0].m;
                    for (int k = 0; k < 2; ++k) {
                        hout[k].resize(c.n);
                        host.finish_low_rank(p_sum, q_sum, hs[k], tensor_view<float>(hout[k]));
                    }
                    // The GPU's, the sums likewise (on the host, then copied up).
                    hitch::device_buffer<float, gpu> dp[2] = {{dev, np}, {dev, np}}, dq[2] = {{dev, nq}, {dev, nq}};
                    for (int k = 0; k < 2; ++k) device.compute_p(dev, in_view(dg[k]), ds[k], dp[k].view());
                    std::vector<float> gp[2] = {download(dev, dp[0].data(), np), download(dev, dp[1].data(), np)};
                    std::vector<float> gp_sum(np);
                    for (std::size_t i = 0; i < np; ++i) gp_sum[i] = gp[0][i] + gp[1][i];
                    const auto dp_sum = upload(dev, gp_sum);
                    for (int k = 0; k < 2; ++k) device.compute_q(dev, in_view(dp_sum), ds[k], dq[k].view());
                    std::vector<float> gq[2] = {download(dev, dq[0].data(), nq), download(dev, dq[1].data(), nq)};
                    std::vector<float> gq_sum(nq);
                    for (std::size_t i = 0; i < nq; ++i) gq_sum[i] = gq[0][i] + gq[1][i];
                    const auto dq_sum = upload(dev, gq_sum);
                    INFO("n " << c.n << " r " << r << " warm " << warm << " step " << step);
                    for (int k = 0; k < 2; ++k) {
                        hitch::device_buffer<float, gpu> dout(dev, c.n);
                        device.finish_low_rank(dev, in_view(dp_sum), in_view(dq_sum), ds[k], dout.view());
                        const auto out = download(dev, dout.data(), c.n);
                        within_bound(hs[0], r, m0, p_sum, q_start, out, hout[k], "out");
                        within_bound(hs[k], r, hs[k].m, p_sum, q_start, download(dev, ds[k].residual.data(), c.n),
                                     hs[k].residual, "residual");
                        CHECK(ds[k].layout.step == hs[k].step);
                    }
                    // The next step starts from the host's Q and residual again, so that each step is compared with
                    // the bound of one step.
                    for (int k = 0; k < 2; ++k) {
                        if (!hs[k].q.empty())
                            dev.copy_from_host(ds[k].q.data(), hs[k].q.data(), hs[k].q.size() * sizeof(float));
                        if (!hs[k].residual.empty())
                            dev.copy_from_host(ds[k].residual.data(), hs[k].residual.data(),
                                               hs[k].residual.size() * sizeof(float));
                    }
                }
            }
        }
    }
}

TEST_CASE("gpu powersgd: one-rank messages in the host's layout; the host's decoded to its bits",
          "[cuda][sparse][powersgd]") {
    gpu dev;
    for (std::size_t r : {std::size_t{1}, std::size_t{3}}) {
        const hc::powersgd host({.rank = r});
        const device_codec device(host);
        for (const auto& c : cases()) {
            auto hs = host_state(host, c);
            auto ds = gpu_state(dev, device, c);
            const auto g = hitch_test::gradients(c.n, 50 + c.n);
            const auto dg = upload(dev, g);
            std::vector<std::byte> hm;
            host.encode(tensor_view<const float>(g), hs, hm);
            cc::device_message dm(dev);
            CHECK(device.encode(dev, in_view(dg), ds, dm) == hm.size());
            const auto gm = dm.to_host();
            REQUIRE(gm.size() == hm.size());
            const std::size_t table = 32 + 8 + 24 * hs.layers.size();
            INFO("n " << c.n << " r " << r);
            CHECK(std::memcmp(gm.data(), hm.data(), 28) == 0);  // the header but its checksum
            CHECK(std::memcmp(gm.data() + 32, hm.data() + 32, table - 32) == 0);
            // The host decodes the GPU's message; the GPU decodes the host's to the host's bits.
            std::vector<float> from_gpu(c.n), from_host(c.n);
            host.decode(gm, tensor_view<float>(from_gpu));
            host.decode(hm, tensor_view<float>(from_host));
            for (const auto& L : hs.layers)
                if (!L.compressed)
                    CHECK(std::memcmp(from_gpu.data() + L.offset, from_host.data() + L.offset, 4 * L.elements) == 0);
            cc::device_message hd(dev);
            hd.assign(hm);
            hitch::device_buffer<float, gpu> out(dev, c.n);
            device.decode(dev, hd.view(), out.view());
            CHECK(same_bits(download(dev, out.data(), c.n), from_host));
            auto acc = hitch_test::gradients(c.n, 9);
            auto dacc = upload(dev, acc);
            host.decode_add(hm, tensor_view<float>(acc));
            device.decode_add(dev, hd.view(), dacc.view());
            CHECK(same_bits(download(dev, dacc.data(), c.n), acc));
        }
    }
}

TEST_CASE("gpu powersgd: refusals and state blobs as the host's", "[cuda][sparse][powersgd]") {
    gpu dev;
    const hc::powersgd host({.rank = 2});
    const device_codec device(host);
    const bucket_case c{64 * 48 + 7 + 5 * 90 + 200 * 3, {{64, 48}, {7, 1}, {5, 90}, {200, 3}}};
    auto hs = host_state(host, c);
    auto ds = gpu_state(dev, device, c);
    // A fresh state saves to the host's bytes (Q from the host's generator, no residual yet).
    std::vector<std::byte> hb, db;
    host.save_state(hs, hb);
    device.save_state(dev, ds, db);
    CHECK(hb == db);
    // NaN or an infinity: refused before the state changes.
    auto g = hitch_test::gradients(c.n, 4);
    g[100] = std::numeric_limits<float>::quiet_NaN();
    auto dg = upload(dev, g);
    cc::device_message dm(dev);
    CHECK_THROWS_AS(device.encode(dev, in_view(dg), ds, dm), hc::non_finite_error);
    CHECK(ds.layout.step == 0);
    device.save_state(dev, ds, db);
    CHECK(hb == db);
    // A state saved on the GPU after a step loads on the host and the other way round.
    g[100] = 0.5f;
    dg = upload(dev, g);
    device.encode(dev, in_view(dg), ds, dm);
    device.save_state(dev, ds, db);
    auto restored = host_state(host, c);
    host.load_state(db, restored);
    CHECK(restored.step == 1);
    CHECK(same_bits(restored.residual, download(dev, ds.residual.data(), c.n)));
    auto back = gpu_state(dev, device, c);
    device.load_state(dev, db, back);
    CHECK(same_bits(download(dev, back.q.data(), back.layout.q_total), download(dev, ds.q.data(), ds.layout.q_total)));
    db[60] ^= std::byte{1};
    CHECK_THROWS_AS(device.load_state(dev, db, back), hitch::corrupt_message_error);
    // Damaged messages: refused, the bucket untouched.
    std::vector<std::byte> hm;
    host.encode(tensor_view<const float>(g), hs, hm);
    const auto before = hitch_test::gradients(c.n, 12);
    for (int damage = 0; damage < 4; ++damage) {
        auto bad = hm;
        switch (damage) {
            case 0:
                wire::store_le<std::uint32_t>(bad.data() + 32, 0);
                break;  // rank 0
            case 1:
                wire::store_le<std::uint64_t>(bad.data() + 40, 65);
                break;  // a layer's rows
            case 2:
                wire::store_le(bad.data() + bad.size() - 4, INFINITY);
                break;  // a value
            default:
                bad.pop_back();
                break;  // truncated
        }
        wire::store_le<std::uint64_t>(bad.data() + 16, bad.size() - 32);
        wire::seal(bad);
        std::vector<float> host_out(c.n);
        CHECK(hitch_test::throws_corrupt([&] { host.decode(bad, tensor_view<float>(host_out)); }));
        cc::device_message m(dev);
        m.assign(bad);
        auto out = upload(dev, before);
        INFO("damage " << damage);
        CHECK(hitch_test::throws_corrupt([&] { device.decode_add(dev, m.view(), out.view()); }));
        CHECK(same_bits(download(dev, out.data(), c.n), before));
    }
}
