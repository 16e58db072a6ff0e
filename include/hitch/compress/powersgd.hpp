#pragma once
// compress::powersgd: PowerSGD (Vogels, Karimireddy and Jaggi 2019, "PowerSGD: Practical low-rank gradient
// compression for distributed optimization"). Each layer's gradient, seen as a matrix M (rows x cols), is
// approximated by a rank-r product P Q^T from one step of power iteration, warm-started from the previous Q:
//
//   M <- G + E                         (error feedback: E is what earlier steps did not send)
//   P <- M Q;      P <- sum over ranks (all-reduce);   P <- orthogonalise(P)   (Gram-Schmidt)
//   Q <- M^T P;    Q <- sum over ranks (all-reduce)
//   result = P Q^T;   E <- M - P Q_local^T;   the next step starts from this Q (warm start)
//
// Both all-reduces are additive and small: r (rows + cols) floats per layer instead of rows x cols. A layer is
// sent uncompressed (with P) when compression would not pay: vectors (a dimension <= r) and layers with
// rows x cols < min_compression_rate r (rows + cols). A bucket's layers are given to make_state as shapes; a bare
// size is treated as one nearly square matrix (the last row zero-padded).
//
// One rank alone (encode / decode) produces P and Q the same way and sends both in one message:
// bytes on the wire 32 + 8 + 24 L + 4 (sum over compressed layers of r (rows + cols) + sum over the others of
// their elements), L layers. Payload: u32 r | u32 L | L x (u64 rows, u64 cols, u64 compressed) | per layer:
// P as r columns of rows floats and Q as r columns of cols floats, or the layer's elements.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/low_rank_kernels.hpp"
#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/simd.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/options.hpp"

namespace hitch::compress {

/// The shape of one layer's gradient as a matrix (row-major in the bucket).
struct matrix_shape {
    std::size_t rows = 0;
    std::size_t cols = 0;
};

struct powersgd_options {
    /// r: the rank of the approximation (the paper: 1 to 4 for image classification).
    std::size_t rank = 2;
    /// Compress a layer only if rows x cols >= min_compression_rate x r (rows + cols).
    double min_compression_rate = 2.0;
    /// Start each power iteration from the previous step's Q (the paper's warm start) instead of a fresh random Q.
    bool warm_start = true;
    /// Keep what was not sent and add it to the next gradient (the paper's algorithm always does).
    bool error_feedback = true;
    std::uint64_t seed = 0x90e45d;

    void validate() const {
        option_validator("hitch::compress::powersgd_options")
            .closed("rank", rank, std::size_t{1}, std::size_t{1024})
            .closed("min_compression_rate", min_compression_rate, 1.0, 1e9);
    }
};

/// Rank-r PowerSGD with warm start and error feedback; layers too small to gain are sent uncompressed.
class powersgd {
public:
    static constexpr std::uint8_t codec_id = codec_ids::powersgd;
    static constexpr std::string_view name = "powersgd";
    static constexpr std::string_view who = "hitch::compress::powersgd";
    static constexpr bool additive = true;  // in two rounds: P, then Q
    static constexpr bool needs_error_feedback = false;
    static constexpr bool ring_compressible = false;
    static constexpr bool own_error_feedback = true;

    using options_type = powersgd_options;

    struct layer {
        std::size_t offset = 0;  // first element in the bucket
        std::size_t rows = 0;
        std::size_t cols = 0;
        std::size_t elements = 0;  // rows x cols, less the padding of a bare bucket's last row
        bool compressed = false;
        std::size_t p_offset = 0;  // into the P round's buffer (r x rows, or the raw elements)
        std::size_t q_offset = 0;  // into the Q round's buffer (r x cols)
    };

    struct state {
        std::size_t count = 0;
        std::uint64_t step = 0;
        std::vector<layer> layers;
        std::size_t p_total = 0;
        std::size_t q_total = 0;
        std::vector<float> q;         // Q of every compressed layer, as r columns (warm start)
        std::vector<float> residual;  // error feedback (empty when off)
        // workspace
        std::vector<float> m;        // M = G + E
        std::vector<float> p_hat;    // orthogonalised P, as r columns per layer
        std::vector<float> q_local;  // this rank's M^T P
        std::vector<float> p_buffer, q_buffer;
    };

    powersgd() = default;
    explicit powersgd(options_type o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    /// A bucket of `count` elements seen as one nearly square matrix.
    [[nodiscard]] state make_state(std::size_t count) const {
        if (count == 0) return build({}, 0, 0);
        const auto rows = static_cast<std::size_t>(std::ceil(std::sqrt(static_cast<double>(count))));
        const matrix_shape one{rows, detail::ceil_div(count, rows)};
        return build(std::span<const matrix_shape>(&one, 1), count, count);
    }
    /// A bucket made of layers of the given shapes, in order (their sizes must add up to `count`).
    [[nodiscard]] state make_state(std::size_t count, std::span<const matrix_shape> shapes) const {
        std::size_t total = 0;
        for (const auto& s : shapes) {
            if (s.rows == 0 || s.cols == 0)
                throw config_error(hitch::detail::concat(who, ": a layer of shape ", s.rows, " x ", s.cols));
            total += s.rows * s.cols;
        }
        if (total != count)
            throw config_error(
                hitch::detail::concat(who, ": the layer shapes cover ", total, " elements, the bucket has ", count));
        return build(shapes, count, count);
    }

    [[nodiscard]] std::size_t p_count(const state& s) const noexcept { return s.p_total; }
    [[nodiscard]] std::size_t q_count(const state& s) const noexcept { return s.q_total; }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const { return message_bytes(make_state(n)); }
    /// The exact size of the one-rank message for a state's layout.
    [[nodiscard]] std::size_t message_bytes(const state& s) const noexcept {
        return wire::header_bytes + 8 + 24 * s.layers.size() + 4 * (s.p_total + s.q_total);
    }

    // ---- the two-round protocol -------------------------------------------------------------------------------

    /// M = G (+ E); writes P = M Q for compressed layers and M itself for the others into p (p_count values).
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    void compute_p(tensor_view<T> g, state& s, std::span<float> p) const {
        detail::require_host(g, who);
        check(s, g.size());
        s.m.resize(s.count);
        bool finite = true;
        const bool ef = options_.error_feedback;
        for (std::size_t i = 0; i < s.count; ++i) {
            s.m[i] = static_cast<float>(g[i]) + (ef ? s.residual[i] : 0.0f);
            finite = finite && std::fabs(s.m[i]) <= 3.40282347e38f;
        }
        if (!finite) detail::throw_non_finite(who, ef ? "the bucket plus its residual" : "the bucket");
        if (!options_.warm_start) fill_random_q(s, s.step + 1);
        const std::size_t r = options_.rank;
        for (std::size_t li = 0; li < s.layers.size(); ++li) {
            const layer& L = s.layers[li];
            const float* m = s.m.data() + L.offset;
            float* out = p.data() + L.p_offset;
            if (!L.compressed) {
                std::copy(m, m + L.elements, out);
                continue;
            }
            const float* qt = s.q.data() + L.q_offset;
            detail::run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA {
                for (std::size_t i = 0; i < L.rows; ++i) {
                    const std::size_t len = row_length(L, i);
                    for (std::size_t c = 0; c < r; ++c)
                        out[c * L.rows + i] =
                            len == 0 ? 0.0f : detail::dot_kernel(m + i * L.cols, qt + c * L.cols, len);
                }
            });
        }
    }

    /// From the summed P: P <- detail::orthogonalise(P) per compressed layer; writes this rank's Q = M^T P into q.
    void compute_q(std::span<const float> p_sum, state& s, std::span<float> q) const {
        const std::size_t r = options_.rank;
        s.p_hat.resize(s.p_total);
        s.q_local.resize(s.q_total);
        for (const layer& L : s.layers) {
            if (!L.compressed) continue;
            float* ph = s.p_hat.data() + L.p_offset;
            std::copy(p_sum.data() + L.p_offset, p_sum.data() + L.p_offset + r * L.rows, ph);
            detail::orthogonalise(ph, L.rows, r);
            float* qt = s.q_local.data() + L.q_offset;
            std::fill(qt, qt + r * L.cols, 0.0f);
            const float* m = s.m.data() + L.offset;
            detail::run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA {
                for (std::size_t i = 0; i < L.rows; ++i) {
                    const std::size_t len = row_length(L, i);
                    for (std::size_t c = 0; c < r; ++c)
                        detail::axpy_kernel(ph[c * L.rows + i], m + i * L.cols, qt + c * L.cols, len);
                }
            });
            std::copy(qt, qt + r * L.cols, q.data() + L.q_offset);
        }
    }

    /// out = P Q_sum^T for compressed layers and the summed elements for the others; keeps E = M - P Q_local^T and
    /// Q_sum for the next step.
    template <class T>
    void finish_low_rank(std::span<const float> p_sum, std::span<const float> q_sum, state& s,
                         tensor_view<T> out) const {
        finish(p_sum, q_sum, s, &out);
    }

    // ---- one rank: encode / decode ------------------------------------------------------------------------------

    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode(tensor_view<T> g, state& s, std::vector<std::byte>& bytes) const {
        s.p_buffer.resize(s.p_total);
        s.q_buffer.resize(s.q_total);
        compute_p(g, s, s.p_buffer);
        compute_q(s.p_buffer, s, s.q_buffer);
        const std::size_t payload = message_bytes(s) - wire::header_bytes;
        wire::writer w(bytes, codec_id, dtype_of<std::remove_const_t<T>>(), s.count, payload);
        std::byte* p = w.payload();
        wire::store_le<std::uint32_t>(p, static_cast<std::uint32_t>(options_.rank));
        wire::store_le<std::uint32_t>(p + 4, static_cast<std::uint32_t>(s.layers.size()));
        p += 8;
        for (const layer& L : s.layers) {
            wire::store_le<std::uint64_t>(p, L.rows);
            wire::store_le<std::uint64_t>(p + 8, L.cols);
            wire::store_le<std::uint64_t>(p + 16, L.compressed ? 1 : 0);
            p += 24;
        }
        const auto put = [&](const float* v, std::size_t count) {
            for (std::size_t i = 0; i < count; ++i) wire::store_le(p + 4 * i, v[i]);
            p += 4 * count;
        };
        const std::size_t r = options_.rank;
        for (const layer& L : s.layers) {
            if (L.compressed) {
                put(s.p_hat.data() + L.p_offset, r * L.rows);
                put(s.q_buffer.data() + L.q_offset, r * L.cols);
            } else {
                put(s.p_buffer.data() + L.p_offset, L.elements);
            }
        }
        finish<float>(s.p_buffer, s.q_buffer, s, nullptr);
        return w.finish(payload);
    }

    template <class T>
        requires floating_element<T>
    void decode(std::span<const std::byte> bytes, tensor_view<T> out) const {
        decode_any<false>(bytes, out);
    }
    template <class T>
        requires floating_element<T>
    void decode_add(std::span<const std::byte> bytes, tensor_view<T> acc) const {
        decode_any<true>(bytes, acc);
    }

    /// Blob payload: u64 step | u64 r | u64 L | L x (u64 rows, u64 cols) | Q floats | u64 residual length | residual.
    void save_state(const state& s, std::vector<std::byte>& blob) const {
        std::vector<std::byte> body;
        wire::put_scalar<std::uint64_t>(body, s.step);
        wire::put_scalar<std::uint64_t>(body, options_.rank);
        wire::put_scalar<std::uint64_t>(body, s.layers.size());
        for (const layer& L : s.layers) {
            wire::put_scalar<std::uint64_t>(body, L.rows);
            wire::put_scalar<std::uint64_t>(body, L.cols);
        }
        wire::put_floats(body, s.q);
        wire::put_scalar<std::uint64_t>(body, s.residual.size());
        wire::put_floats(body, s.residual);
        wire::seal_state(blob, codec_id, s.count, body);
    }
    /// Loads into a state made for the same layout (make_state with the same shapes); anything else is refused.
    void load_state(std::span<const std::byte> blob, state& s) const {
        const wire::message_view m = wire::open_state(blob, codec_id, s.count, who);
        wire::reader r(m.payload, who);
        const auto step = r.get<std::uint64_t>("step");
        if (r.get<std::uint64_t>("rank") != options_.rank) r.fail("the saved state has another rank");
        if (r.count("layer count", s.count + 1) != s.layers.size()) r.fail("the saved state has another layer count");
        for (const layer& L : s.layers)
            if (r.get<std::uint64_t>("rows") != L.rows || r.get<std::uint64_t>("cols") != L.cols)
                r.fail("the saved state has another layer shape");
        std::vector<float> q, residual;
        wire::get_floats(r, q, s.q.size(), "Q");
        const std::uint64_t rn = r.count("residual length", s.count);
        if (rn != s.residual.size()) r.fail("the saved residual does not match the error_feedback option");
        wire::get_floats(r, residual, rn, "residual");
        r.expect_end();
        for (float x : q)
            if (!std::isfinite(x)) r.fail("the saved Q holds NaN or an infinity");
        for (float x : residual)
            if (!std::isfinite(x)) r.fail("the saved residual holds NaN or an infinity");
        s.step = step;
        s.q = std::move(q);
        s.residual = std::move(residual);
    }

private:
    [[nodiscard]] static std::size_t row_length(const layer& L, std::size_t i) noexcept {
        const std::size_t start = i * L.cols;
        return start >= L.elements ? 0 : std::min(L.cols, L.elements - start);
    }

    [[nodiscard]] bool compressible(std::size_t rows, std::size_t cols) const noexcept {
        const std::size_t r = options_.rank;
        return std::min(rows, cols) > r &&
               static_cast<double>(rows) * static_cast<double>(cols) >=
                   options_.min_compression_rate * static_cast<double>(r) * static_cast<double>(rows + cols);
    }

    [[nodiscard]] state build(std::span<const matrix_shape> shapes, std::size_t count, std::size_t covered) const {
        state s;
        s.count = count;
        const std::size_t r = options_.rank;
        std::size_t offset = 0;
        for (const auto& shape : shapes) {
            layer L;
            L.offset = offset;
            L.rows = shape.rows;
            L.cols = shape.cols;
            L.elements = std::min(shape.rows * shape.cols, covered - offset);
            L.compressed = compressible(L.rows, L.cols);
            L.p_offset = s.p_total;
            L.q_offset = s.q_total;
            s.p_total += L.compressed ? r * L.rows : L.elements;
            s.q_total += L.compressed ? r * L.cols : 0;
            offset += L.elements;
            s.layers.push_back(L);
        }
        s.q.resize(s.q_total);
        fill_random_q(s, 0);
        if (options_.error_feedback) s.residual.assign(count, 0.0f);
        return s;
    }

    /// Standard normal Q for every compressed layer, from (seed, layer, draw).
    void fill_random_q(state& s, std::uint64_t draw) const {
        for (std::size_t li = 0; li < s.layers.size(); ++li) {
            const layer& L = s.layers[li];
            if (!L.compressed) continue;
            detail::xoshiro256ss rng(detail::draw_key(options_.seed, li, draw));
            for (std::size_t k = 0; k < options_.rank * L.cols; ++k)
                s.q[L.q_offset + k] = static_cast<float>(rng.normal());
        }
    }

    template <class T>
    void finish(std::span<const float> p_sum, std::span<const float> q_sum, state& s, tensor_view<T>* out) const {
        const std::size_t r = options_.rank;
        const bool ef = options_.error_feedback;
        std::vector<float> row;
        for (const layer& L : s.layers) {
            if (!L.compressed) {
                if (out != nullptr)
                    for (std::size_t i = 0; i < L.elements; ++i) (*out)[L.offset + i] = T(p_sum[L.p_offset + i]);
                if (ef)
                    std::fill(s.residual.begin() + static_cast<std::ptrdiff_t>(L.offset),
                              s.residual.begin() + static_cast<std::ptrdiff_t>(L.offset + L.elements), 0.0f);
                continue;
            }
            const float* ph = s.p_hat.data() + L.p_offset;
            const float* qs = q_sum.data() + L.q_offset;
            const float* ql = s.q_local.data() + L.q_offset;
            row.resize(L.cols);
            for (std::size_t i = 0; i < L.rows; ++i) {
                const std::size_t len = row_length(L, i);
                if (len == 0) continue;
                if (out != nullptr) {
                    std::fill(row.begin(), row.end(), 0.0f);
                    detail::run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA {
                        for (std::size_t c = 0; c < r; ++c)
                            detail::axpy_kernel(ph[c * L.rows + i], qs + c * L.cols, row.data(), len);
                    });
                    for (std::size_t j = 0; j < len; ++j) (*out)[L.offset + i * L.cols + j] = T(row[j]);
                }
                if (ef) {
                    float* e = s.residual.data() + L.offset + i * L.cols;
                    const float* m = s.m.data() + L.offset + i * L.cols;
                    std::copy(m, m + len, e);
                    detail::run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA {
                        for (std::size_t c = 0; c < r; ++c)
                            detail::axpy_kernel(-ph[c * L.rows + i], ql + c * L.cols, e, len);
                    });
                }
            }
            if (options_.warm_start) std::copy(qs, qs + r * L.cols, s.q.data() + L.q_offset);
        }
        ++s.step;
    }

    void check(const state& s, std::size_t n) const {
        if (s.count != n)
            throw config_error(hitch::detail::concat(who, ": the state was made for a bucket of ", s.count,
                                                     " elements, the bucket has ", n));
    }

    template <bool Add, class T>
    void decode_any(std::span<const std::byte> bytes, tensor_view<T> out) const {
        detail::require_host(out, who);
        const wire::message_view m = wire::open(bytes, {who, codec_id});
        wire::expect_count(m, out.size(), who);
        const std::size_t n = out.size();
        wire::reader r(m.payload, who);
        const auto rank = r.get<std::uint32_t>("rank");
        const auto count = r.get<std::uint32_t>("layer count");
        if (rank < 1 || rank > 1024) r.fail(hitch::detail::concat("rank ", rank, " outside [1, 1024]"));
        if (count > n + 1 || (n > 0 && count == 0) || (n == 0 && count != 0))
            r.fail(hitch::detail::concat(count, " layers for a bucket of ", n, " elements"));
        struct entry {
            std::size_t rows, cols, elements;
            bool compressed;
        };
        std::vector<entry> layers;
        std::size_t offset = 0;
        for (std::uint32_t l = 0; l < count; ++l) {
            const auto rows = r.get<std::uint64_t>("rows");
            const auto cols = r.get<std::uint64_t>("cols");
            const auto flag = r.get<std::uint64_t>("compressed flag");
            if (rows == 0 || cols == 0 || rows > n || cols > n || flag > 1 || offset >= n)
                r.fail(hitch::detail::concat("layer ", l, " of shape ", rows, " x ", cols, " (flag ", flag,
                                             ") does not fit a bucket of ", n));
            const std::size_t size = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
            const std::size_t left = n - offset;
            // Only the last layer may end in a zero-padded partial row.
            if (size > left && (l + 1 != count || size - left >= cols))
                r.fail(hitch::detail::concat("layer ", l, " of shape ", rows, " x ", cols, " overruns the bucket"));
            layers.push_back(
                {static_cast<std::size_t>(rows), static_cast<std::size_t>(cols), std::min(size, left), flag == 1});
            offset += std::min(size, left);
        }
        if (offset != n) r.fail(hitch::detail::concat("the layers cover ", offset, " of ", n, " elements"));
        // Read (and check) every float before writing anything.
        std::vector<std::span<const std::byte>> data;
        for (const entry& L : layers) {
            const std::uint64_t floats = L.compressed ? std::uint64_t{rank} * (L.rows + L.cols) : L.elements;
            data.push_back(r.take(4 * floats, "layer data"));
            for (std::size_t k = 0; k < floats; ++k)
                if (!std::isfinite(wire::load_le<float>(data.back().data() + 4 * k))) r.fail("a value is not finite");
        }
        r.expect_end();
        offset = 0;
        std::vector<float> pc, qc, row;
        for (std::size_t li = 0; li < layers.size(); ++li) {
            const entry& L = layers[li];
            const std::byte* d = data[li].data();
            auto emit = [&](std::size_t at, float v) {
                if constexpr (Add)
                    out[at] = T(static_cast<float>(out[at]) + v);
                else
                    out[at] = T(v);
            };
            if (!L.compressed) {
                for (std::size_t i = 0; i < L.elements; ++i) emit(offset + i, wire::load_le<float>(d + 4 * i));
            } else {
                pc.resize(rank * L.rows);
                qc.resize(rank * L.cols);
                for (std::size_t k = 0; k < pc.size(); ++k) pc[k] = wire::load_le<float>(d + 4 * k);
                for (std::size_t k = 0; k < qc.size(); ++k) qc[k] = wire::load_le<float>(d + 4 * (pc.size() + k));
                row.resize(L.cols);
                for (std::size_t i = 0; i < L.rows; ++i) {
                    const std::size_t start = i * L.cols;
                    if (start >= L.elements) break;
                    const std::size_t len = std::min(L.cols, L.elements - start);
                    std::fill(row.begin(), row.end(), 0.0f);
                    for (std::size_t c = 0; c < rank; ++c)
                        detail::axpy_kernel(pc[c * L.rows + i], qc.data() + c * L.cols, row.data(), len);
                    for (std::size_t j = 0; j < len; ++j) emit(offset + start + j, row[j]);
                }
            }
            offset += L.elements;
        }
    }

    options_type options_{};
};

static_assert(compressor<powersgd>, "compress::powersgd must model hitch::compressor");
static_assert(low_rank_compressor<powersgd>, "compress::powersgd must model hitch::low_rank_compressor");

}  // namespace hitch::compress
