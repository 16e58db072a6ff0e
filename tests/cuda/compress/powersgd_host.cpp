// The GPU PowerSGD's element-wise math on the host (no GPU needed), driven as its kernels drive it, against
// compress::powersgd bit for bit: the layer lookup, P Q^T and the residual M - P Q^T of finish_low_rank, decode, and
// the Gram-Schmidt steps. (The GEMMs P = M Q and Q = M^T P are cuBLAS's on the GPU: their agreement bound is checked
// by tests/cuda/compress/powersgd.cu where a GPU is present.)
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "../../compress/helpers.hpp"
#include "hitch/compress/detail/low_rank_kernels.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/cuda/compress/detail/powersgd.hpp"

namespace hc = hitch::compress;
namespace lr = hitch::cuda::compress::detail::low_rank;
using hitch::tensor_view;

namespace {

std::vector<lr::layer_entry> table_of(const hc::powersgd::state& s) {
    std::vector<lr::layer_entry> t;
    for (const auto& L : s.layers)
        t.push_back({L.offset, L.rows, L.cols, L.elements, L.p_offset, L.q_offset, L.compressed ? 1u : 0u});
    return t;
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
            {64 * 48 + 7 + 5 * 90 + 200 * 3, {{64, 48}, {7, 1}, {5, 90}, {200, 3}}},
            {256 * 128 + 33 * 31, {{256, 128}, {33, 31}}}};
}

hc::powersgd::state make(const hc::powersgd& codec, const bucket_case& c) {
    return c.shapes.empty() ? codec.make_state(c.n) : codec.make_state(c.n, c.shapes);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

}  // namespace

TEST_CASE("gpu powersgd: find_layer locates every element's layer", "[cuda][host][powersgd]") {
    const hc::powersgd codec({.rank = 2});
    for (const auto& c : cases()) {
        if (c.n > 100000) continue;
        const auto s = make(codec, c);
        const auto t = table_of(s);
        for (std::size_t i = 0; i < c.n; ++i) {
            const auto& L = t[lr::find_layer(t.data(), static_cast<std::uint32_t>(t.size()), i)];
            REQUIRE(L.offset <= i);
            REQUIRE(i < L.offset + L.elements);
        }
    }
}

TEST_CASE("gpu powersgd: P Q^T and the residual element by element are finish_low_rank's bits",
          "[cuda][host][powersgd]") {
    for (std::size_t rank : {std::size_t{1}, std::size_t{2}, std::size_t{4}}) {
        for (bool ef : {true, false}) {
            const hc::powersgd codec({.rank = rank, .error_feedback = ef});
            for (const auto& c : cases()) {
                auto s = make(codec, c);
                const auto t = table_of(s);
                std::vector<float> p(s.p_total), q(s.q_total), out(c.n);
                for (int step = 0; step < 2; ++step) {
                    auto g = hitch_test::gradients(c.n, 11 + c.n + static_cast<std::size_t>(step));
                    if (c.n > 3) g[2] = -0.0f;
                    codec.compute_p(tensor_view<const float>(g), s, p);
                    // M as the kernel computes it: g + E, or g + 0.
                    for (std::size_t i = 0; i < c.n; ++i) {
                        const float m = hitch::cuda::hd::add(g[i], ef ? s.residual[i] : 0.0f);
                        REQUIRE(std::memcmp(&m, &s.m[i], 4) == 0);
                    }
                    codec.compute_q(p, s, q);
                    // Another rank's contribution, so that Q_sum differs from Q_local.
                    std::vector<float> q_sum = q;
                    for (auto& x : q_sum) x = x * 1.5f;
                    const auto m = s.m;
                    const auto p_hat = s.p_hat;
                    const auto q_local = s.q_local;
                    codec.finish_low_rank(p, q_sum, s, tensor_view<float>(out));
                    std::vector<float> want_out(c.n), want_e(ef ? c.n : 0);
                    for (std::size_t i = 0; i < c.n; ++i) {
                        const auto& L = t[lr::find_layer(t.data(), static_cast<std::uint32_t>(t.size()), i)];
                        const std::size_t local = i - L.offset;
                        if (L.compressed == 0) {
                            want_out[i] = p[L.p_offset + local];
                            if (ef) want_e[i] = 0.0f;
                            continue;
                        }
                        const std::size_t row = local / L.cols, col = local % L.cols;
                        want_out[i] = lr::low_rank_entry(p_hat.data() + L.p_offset, q_sum.data() + L.q_offset, L.rows,
                                                         L.cols, rank, row, col);
                        if (ef)
                            want_e[i] =
                                lr::low_rank_residual(m[i], p_hat.data() + L.p_offset, q_local.data() + L.q_offset,
                                                      L.rows, L.cols, rank, row, col);
                    }
                    INFO("n " << c.n << " rank " << rank << " ef " << ef << " step " << step);
                    CHECK(same_bits(want_out, out));
                    CHECK(same_bits(want_e, s.residual));
                }
            }
        }
    }
}

TEST_CASE("gpu powersgd: decoding a message element by element gives decode's and decode_add's bits",
          "[cuda][host][powersgd]") {
    for (std::size_t rank : {std::size_t{1}, std::size_t{3}}) {
        const hc::powersgd codec({.rank = rank});
        for (const auto& c : cases()) {
            auto s = make(codec, c);
            const auto g = hitch_test::gradients(c.n, 70 + c.n);
            std::vector<std::byte> m;
            codec.encode(tensor_view<const float>(g), s, m);
            // The message's layer table and data, parsed as the GPU decoder lays them out.
            const std::byte* p = m.data() + 32;
            const auto r = hc::wire::load_le<std::uint32_t>(p);
            const auto count = hc::wire::load_le<std::uint32_t>(p + 4);
            std::vector<lr::layer_entry> layers;
            std::uint64_t offset = 0, floats = 0;
            for (std::uint32_t l = 0; l < count; ++l) {
                const auto rows = hc::wire::load_le<std::uint64_t>(p + 8 + 24 * l);
                const auto cols = hc::wire::load_le<std::uint64_t>(p + 16 + 24 * l);
                const auto flag = hc::wire::load_le<std::uint64_t>(p + 24 + 24 * l);
                const std::uint64_t elements = std::min<std::uint64_t>(rows * cols, c.n - offset);
                layers.push_back({offset, rows, cols, elements, floats, 0, static_cast<std::uint32_t>(flag)});
                floats += flag == 1 ? r * (rows + cols) : elements;
                offset += elements;
            }
            std::vector<float> data(floats);
            std::memcpy(data.data(), p + 8 + 24 * count, 4 * floats);
            std::vector<float> got(c.n), acc = hitch_test::gradients(c.n, 5), host(c.n), host_acc = acc;
            for (std::size_t i = 0; i < c.n; ++i) {
                const auto& L = layers[lr::find_layer(layers.data(), count, i)];
                const std::uint64_t local = i - L.offset;
                const float v = L.compressed == 0 ? data[L.p_offset + local]
                                                  : lr::low_rank_entry(data.data() + L.p_offset,
                                                                       data.data() + L.p_offset + r * L.rows, L.rows,
                                                                       L.cols, r, local / L.cols, local % L.cols);
                got[i] = v;
                acc[i] = hitch::cuda::hd::add(acc[i], v);
            }
            codec.decode(m, tensor_view<float>(host));
            codec.decode_add(m, tensor_view<float>(host_acc));
            INFO("n " << c.n << " rank " << rank);
            CHECK(same_bits(got, host));
            CHECK(same_bits(acc, host_acc));
        }
    }
}

TEST_CASE("gpu powersgd: the Gram-Schmidt steps in the host's order are orthogonalise's bits",
          "[cuda][host][powersgd]") {
    std::mt19937_64 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::size_t rows : {std::size_t{1}, std::size_t{5}, std::size_t{33}, std::size_t{1000}}) {
        for (std::size_t r : {std::size_t{1}, std::size_t{2}, std::size_t{4}}) {
            std::vector<float> p(rows * r);
            for (auto& x : p) x = normal(rng);
            if (r >= 2 && rows >= 2)  // a dependent column: zeroed by both
                for (std::size_t i = 0; i < rows; ++i) p[rows + i] = 2.0f * p[i];
            std::vector<float> host = p, gpu = p;
            hc::detail::orthogonalise(host.data(), rows, r);
            const auto sum = [&](const float* a, const float* b) {
                double s = 0.0;
                for (std::size_t i = 0; i < rows; ++i) s = hitch::cuda::hd::add(s, lr::exact_product(a[i], b[i]));
                return s;
            };
            for (std::size_t c = 0; c < r; ++c) {
                float* col = gpu.data() + c * rows;
                const double before = hitch::cuda::hd::sqrt(sum(col, col));
                for (int pass = 0; pass < 2; ++pass)
                    for (std::size_t d = 0; d < c; ++d) {
                        const float* prev = gpu.data() + d * rows;
                        const auto f = static_cast<float>(sum(prev, col));
                        for (std::size_t i = 0; i < rows; ++i) col[i] = lr::project_out(col[i], f, prev[i]);
                    }
                const double norm = hitch::cuda::hd::sqrt(sum(col, col));
                const bool keep = lr::keep_column(norm, before);
                const float inv = keep ? lr::inverse_norm(norm) : 0.0f;
                for (std::size_t i = 0; i < rows; ++i) col[i] = keep ? hitch::cuda::hd::mul(col[i], inv) : 0.0f;
            }
            INFO("rows " << rows << " r " << r);
            CHECK(same_bits(gpu, host));
        }
    }
}
