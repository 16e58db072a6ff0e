#pragma once
// compress::powersgd on the GPU: hitch::compress::device_codec<compress::powersgd, cuda::device>. PowerSGD (Vogels,
// Karimireddy and Jaggi 2019) on a bucket in CUDA memory, with the host codec's layout, protocol, message format and
// state blob:
//
//   M <- G + E                                  element-wise (exactly the host's M)
//   P <- M Q            (cuBLAS SGEMM per layer)   -> summed over ranks by the caller (round 1)
//   P <- orthogonalise(P)  (Gram-Schmidt, one thread block per layer, the host's steps; sums in double)
//   Q <- M^T P          (cuBLAS SGEMM per layer)   -> summed over ranks by the caller (round 2)
//   out = P Q^T;  E <- M - P Q_local^T;  Q kept for the next step (warm start)
//
// Layers too small to gain ride along uncompressed in round 1, exactly. The products P Q^T (the result, the
// residual, and decode) are computed element by element in the host's order of additions (detail/powersgd.hpp), so
// given the same P, Q and M they are the host's bits, and decoding a message gives the host's bits. The two GEMMs
// are cuBLAS's (in CUBLAS_PEDANTIC_MATH: full float arithmetic, no TF32) and add in another order than the host's
// dot products, so P and Q agree with the host's within a rounding bound rather than bit for bit (docs/compression.md,
// "On the GPU", states it; tests/cuda/compress/powersgd.cu checks it).
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/powersgd.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/cuda/compress/codec.cuh"
#include "hitch/cuda/compress/detail/powersgd.hpp"
#include "hitch/cuda/compress/detail/wire.cuh"
#include "hitch/cuda/detail/launch.cuh"
#include "hitch/cuda/device.hpp"
#include "hitch/device/buffer.hpp"

namespace hitch::cuda::compress::detail::low_rank {

using cuda::detail::check;
using cuda::detail::check_launch;
using cuda::detail::grid_index;
using cuda::detail::grid_stride;

inline void check_cublas(cublasStatus_t status, std::string_view call) {
    if (status != CUBLAS_STATUS_SUCCESS)
        throw cuda_error(hitch::detail::concat("hitch::cuda::compress::powersgd: ", call, " failed: ",
                                               cublasGetStatusName(status), ": ", cublasGetStatusString(status)));
}

/// A cuBLAS handle on a device's stream, in full float arithmetic.
class cublas {
public:
    explicit cublas(cuda::device& dev) {
        check(cudaSetDevice(dev.ordinal()), "cudaSetDevice");
        check_cublas(cublasCreate(&handle_), "cublasCreate");
        check_cublas(cublasSetStream(handle_, dev.stream()), "cublasSetStream");
        // No TF32 or other reduced-precision shortcut, whatever NVIDIA_TF32_OVERRIDE says: the agreement bound with
        // the host assumes float products and sums.
        check_cublas(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    }
    cublas(const cublas&) = delete;
    cublas& operator=(const cublas&) = delete;
    ~cublas() {
        if (handle_ != nullptr) cublasDestroy(handle_);
    }
    [[nodiscard]] cublasHandle_t get() const noexcept { return handle_; }

private:
    cublasHandle_t handle_ = nullptr;
};

inline constexpr unsigned ortho_threads = 256;

/// M = G + E (or G + 0, as the host adds zero without error feedback); notes NaN and infinities.
static __global__ void m_kernel(const float* g, const float* residual, std::uint64_t n, float* m, std::uint32_t* bad) {
    for (std::uint64_t i = grid_index(); i < n; i += grid_stride()) {
        const float x = hd::add(g[i], residual != nullptr ? residual[i] : 0.0f);
        m[i] = x;
        if (hd::non_finite(x)) *bad = 1;
    }
}

/// Round 1's uncompressed layers: their elements of M, as they are.
static __global__ void uncompressed_kernel(const layer_entry* layers, std::uint32_t count, const float* m,
                                           std::uint64_t n, float* p) {
    for (std::uint64_t i = grid_index(); i < n; i += grid_stride()) {
        const layer_entry& L = layers[find_layer(layers, count, i)];
        if (L.compressed == 0) p[L.p_offset + (i - L.offset)] = m[i];
    }
}

/// compress::detail::orthogonalise for each compressed layer (one thread block each): modified Gram-Schmidt, every
/// column twice, dependent columns zeroed, with the host's element-wise steps; the double sums are block
/// reductions (the host adds in index order).
static __global__ void __launch_bounds__(ortho_threads)
    orthogonalise_kernel(float* p, const layer_entry* layers, const std::uint32_t* compressed, std::uint64_t r) {
    using reduce_t = cub::BlockReduce<double, ortho_threads>;
    __shared__ typename reduce_t::TempStorage storage;
    __shared__ double result;
    const layer_entry L = layers[compressed[blockIdx.x]];
    float* base = p + L.p_offset;
    const std::uint64_t rows = L.rows;
    const auto sum_over_rows = [&](const float* a, const float* b) {
        double local = 0.0;
        for (std::uint64_t i = threadIdx.x; i < rows; i += ortho_threads)
            local = hd::add(local, exact_product(a[i], b[i]));
        const double total = reduce_t(storage).Sum(local);
        if (threadIdx.x == 0) result = total;
        __syncthreads();
        const double v = result;
        __syncthreads();
        return v;
    };
    for (std::uint64_t c = 0; c < r; ++c) {
        float* col = base + c * rows;
        const double before = hd::sqrt(sum_over_rows(col, col));
        for (int pass = 0; pass < 2; ++pass)
            for (std::uint64_t d = 0; d < c; ++d) {
                const float* prev = base + d * rows;
                const auto f = static_cast<float>(sum_over_rows(prev, col));
                for (std::uint64_t i = threadIdx.x; i < rows; i += ortho_threads)
                    col[i] = project_out(col[i], f, prev[i]);
                __syncthreads();
            }
        const double norm = hd::sqrt(sum_over_rows(col, col));
        const bool keep = keep_column(norm, before);
        const float inv = keep ? inverse_norm(norm) : 0.0f;
        for (std::uint64_t i = threadIdx.x; i < rows; i += ortho_threads) col[i] = keep ? hd::mul(col[i], inv) : 0.0f;
        __syncthreads();
    }
}

/// out = P Q_sum^T (compressed layers) or the summed elements (the others); E = M - P Q_local^T or 0.
static __global__ void finish_kernel(const layer_entry* layers, std::uint32_t count, std::uint64_t n, std::uint64_t r,
                                     const float* p_hat, const float* p_sum, const float* q_sum, const float* q_local,
                                     const float* m, float* out, float* residual) {
    for (std::uint64_t i = grid_index(); i < n; i += grid_stride()) {
        const layer_entry& L = layers[find_layer(layers, count, i)];
        const std::uint64_t local = i - L.offset;
        if (L.compressed == 0) {
            if (out != nullptr) out[i] = p_sum[L.p_offset + local];
            if (residual != nullptr) residual[i] = 0.0f;
            continue;
        }
        const std::uint64_t row = local / L.cols, col = local % L.cols;
        const float* p = p_hat + L.p_offset;
        if (out != nullptr) out[i] = low_rank_entry(p, q_sum + L.q_offset, L.rows, L.cols, r, row, col);
        if (residual != nullptr)
            residual[i] = low_rank_residual(m[i], p, q_local + L.q_offset, L.rows, L.cols, r, row, col);
    }
}

/// A message's layers decoded element by element (compress::powersgd's decode): `data` holds, per layer, P and Q
/// (p_offset into it) or the elements.
template <bool Add>
__global__ void decode_kernel(const layer_entry* layers, std::uint32_t count, std::uint64_t n, std::uint64_t r,
                              const float* data, float* out) {
    for (std::uint64_t i = grid_index(); i < n; i += grid_stride()) {
        const layer_entry& L = layers[find_layer(layers, count, i)];
        const std::uint64_t local = i - L.offset;
        float v;
        if (L.compressed == 0) {
            v = data[L.p_offset + local];
        } else {
            const float* p = data + L.p_offset;
            v = low_rank_entry(p, p + r * L.rows, L.rows, L.cols, r, local / L.cols, local % L.cols);
        }
        out[i] = Add ? hd::add(out[i], v) : v;
    }
}

/// The lowest float index of `count` whose value is not finite.
static __global__ void first_non_finite_kernel(const float* v, std::uint64_t count, unsigned long long* first) {
    for (std::uint64_t i = grid_index(); i < count; i += grid_stride())
        if (hd::non_finite(v[i])) atomicMin(first, static_cast<unsigned long long>(i));
}

/// The kernels' layer table of a host layout.
[[nodiscard]] inline std::vector<layer_entry> layer_table(const hitch::compress::powersgd::state& s) {
    std::vector<layer_entry> t;
    t.reserve(s.layers.size());
    for (const auto& L : s.layers)
        t.push_back({L.offset, L.rows, L.cols, L.elements, L.p_offset, L.q_offset, L.compressed ? 1u : 0u});
    return t;
}

[[nodiscard]] inline int as_int(std::uint64_t v, std::string_view what) {
    if (v > static_cast<std::uint64_t>(INT_MAX))
        throw config_error(hitch::detail::concat("hitch::compress::powersgd: ", what, " ", v,
                                                 " exceeds what cuBLAS takes (", INT_MAX, ")"));
    return static_cast<int>(v);
}

}  // namespace hitch::cuda::compress::detail::low_rank

namespace hitch::compress {

/// compress::powersgd for buckets in CUDA memory: the low-rank protocol (compute_p, compute_q, finish_low_rank) on
/// device buffers, and one-rank encode / decode.
template <>
class device_codec<powersgd, cuda::device> {
public:
    using codec_type = powersgd;
    static constexpr std::string_view who = powersgd::who;

    struct state {
        std::size_t count = 0;
        powersgd::state layout;                       // the host codec's layout and step (its vectors stay empty)
        bool bare = true;                             // made from a size (one nearly square matrix), not from shapes
        std::vector<matrix_shape> shapes;             // else the layers' shapes
        device_buffer<float, cuda::device> q;         // Q of every compressed layer (warm start)
        device_buffer<float, cuda::device> residual;  // error feedback (empty when off)
        device_buffer<float, cuda::device> m;         // M = G + E, with a bare bucket's last row padded with zeros
        device_buffer<float, cuda::device> p_hat, q_local, p_buffer, q_buffer;
        device_buffer<cuda::compress::detail::low_rank::layer_entry, cuda::device> table;
        device_buffer<std::uint32_t, cuda::device> compressed;  // indices of the compressed layers
        device_buffer<std::uint32_t, cuda::device> flag;
        std::uint32_t compressed_count = 0;
        std::unique_ptr<cuda::compress::detail::low_rank::cublas> blas;
    };

    device_codec() = default;
    explicit device_codec(const powersgd& codec) : codec_(codec) {}
    [[nodiscard]] const powersgd& codec() const noexcept { return codec_; }
    [[nodiscard]] const powersgd::options_type& options() const noexcept { return codec_.options(); }

    /// A bucket of n elements seen as one nearly square matrix (as the host codec).
    [[nodiscard]] state make_state(cuda::device& dev, std::size_t n) const {
        return build(dev, codec_.make_state(n), true, {});
    }
    /// A bucket of layers of the given shapes.
    [[nodiscard]] state make_state(cuda::device& dev, std::size_t n, std::span<const matrix_shape> shapes) const {
        return build(dev, codec_.make_state(n, shapes), false, std::vector<matrix_shape>(shapes.begin(), shapes.end()));
    }

    [[nodiscard]] std::size_t p_count(const state& s) const noexcept { return s.layout.p_total; }
    [[nodiscard]] std::size_t q_count(const state& s) const noexcept { return s.layout.q_total; }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const { return codec_.max_message_bytes(n); }
    [[nodiscard]] std::size_t message_bytes(const state& s) const noexcept { return codec_.message_bytes(s.layout); }

    // ---- the two-round protocol (every buffer in CUDA memory) ---------------------------------------------------

    /// M = G (+ E); writes P = M Q for compressed layers and M itself for the others into p (p_count values).
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    void compute_p(cuda::device& dev, tensor_view<T> g, state& s, tensor_view<float> p) const {
        namespace cd = cuda::compress::detail;
        namespace lr = cuda::compress::detail::low_rank;
        cd::require_device(g, who);
        cd::require_device(p, who);
        cd::check_state_size(who, s.count, g.size());
        if (p.size() < s.layout.p_total)
            throw config_error(
                hitch::detail::concat(who, ": room for ", p.size(), " P values, ", s.layout.p_total, " needed"));
        const cd::device_floats gf(dev, g);
        const bool ef = codec_.options().error_feedback;
        cd::activate(dev);
        const cudaStream_t stream = dev.stream();
        const std::size_t n = s.count;
        if (n != 0) {
            lr::check(cudaMemsetAsync(s.flag.data(), 0, sizeof(std::uint32_t), stream), "cudaMemsetAsync");
            lr::m_kernel<<<cuda::detail::grid_blocks(n), cuda::detail::block_threads, 0, stream>>>(
                gf.data(), ef ? s.residual.data() : nullptr, n, s.m.data(), s.flag.data());
            lr::check_launch("hitch::cuda::compress powersgd m_kernel");
            if (cd::read_back(dev, s.flag.data()) != 0)
                hitch::compress::detail::throw_non_finite(who, ef ? "the bucket plus its residual" : "the bucket");
        }
        if (!codec_.options().warm_start) fill_random_q(dev, s, s.layout.step + 1);
        if (n != 0) {
            lr::uncompressed_kernel<<<cuda::detail::grid_blocks(n), cuda::detail::block_threads, 0, stream>>>(
                s.table.data(), static_cast<std::uint32_t>(s.layout.layers.size()), s.m.data(), n, p.data());
            lr::check_launch("hitch::cuda::compress powersgd uncompressed_kernel");
        }
        const int r = lr::as_int(codec_.options().rank, "rank");
        const float one = 1.0f, zero = 0.0f;
        for (const auto& L : s.layout.layers) {
            if (!L.compressed) continue;
            // M is row-major rows x cols, i.e. column-major cols x rows: P (rows x r) = (M^T)^T Q.
            const int rows = lr::as_int(L.rows, "rows"), cols = lr::as_int(L.cols, "cols");
            lr::check_cublas(
                cublasSgemm(s.blas->get(), CUBLAS_OP_T, CUBLAS_OP_N, rows, r, cols, &one, s.m.data() + L.offset, cols,
                            s.q.data() + L.q_offset, cols, &zero, p.data() + L.p_offset, rows),
                "cublasSgemm (P = M Q)");
        }
    }

    /// From the summed P: P <- orthogonalise(P) per compressed layer; writes this rank's Q = M^T P into q.
    void compute_q(cuda::device& dev, tensor_view<const float> p_sum, state& s, tensor_view<float> q) const {
        namespace cd = cuda::compress::detail;
        namespace lr = cuda::compress::detail::low_rank;
        cd::require_device(p_sum, who);
        cd::require_device(q, who);
        if (p_sum.size() < s.layout.p_total || q.size() < s.layout.q_total)
            throw config_error(hitch::detail::concat(who, ": P and Q buffers of ", p_sum.size(), " and ", q.size(),
                                                     " values, ", s.layout.p_total, " and ", s.layout.q_total,
                                                     " needed"));
        cd::activate(dev);
        const cudaStream_t stream = dev.stream();
        if (s.compressed_count == 0) return;
        lr::check(cudaMemcpyAsync(s.p_hat.data(), p_sum.data(), s.layout.p_total * sizeof(float),
                                  cudaMemcpyDeviceToDevice, stream),
                  "cudaMemcpyAsync D2D");
        const std::uint64_t r = codec_.options().rank;
        lr::orthogonalise_kernel<<<s.compressed_count, lr::ortho_threads, 0, stream>>>(s.p_hat.data(), s.table.data(),
                                                                                       s.compressed.data(), r);
        lr::check_launch("hitch::cuda::compress powersgd orthogonalise_kernel");
        const float one = 1.0f, zero = 0.0f;
        for (const auto& L : s.layout.layers) {
            if (!L.compressed) continue;
            // Q (cols x r) = M^T P: M^T is the column-major cols x rows matrix M's memory already is.
            const int rows = lr::as_int(L.rows, "rows"), cols = lr::as_int(L.cols, "cols");
            lr::check_cublas(cublasSgemm(s.blas->get(), CUBLAS_OP_N, CUBLAS_OP_N, cols, static_cast<int>(r), rows, &one,
                                         s.m.data() + L.offset, cols, s.p_hat.data() + L.p_offset, rows, &zero,
                                         s.q_local.data() + L.q_offset, cols),
                             "cublasSgemm (Q = M^T P)");
        }
        lr::check(cudaMemcpyAsync(q.data(), s.q_local.data(), s.layout.q_total * sizeof(float),
                                  cudaMemcpyDeviceToDevice, stream),
                  "cudaMemcpyAsync D2D");
    }

    /// out = P Q_sum^T for compressed layers and the summed elements for the others; keeps E = M - P Q_local^T and
    /// Q_sum for the next step.
    template <class T>
        requires floating_element<T>
    void finish_low_rank(cuda::device& dev, tensor_view<const float> p_sum, tensor_view<const float> q_sum, state& s,
                         tensor_view<T> out) const {
        namespace cd = cuda::compress::detail;
        cd::require_device(p_sum, who);
        cd::require_device(q_sum, who);
        cd::require_device(out, who);
        cd::check_state_size(who, s.count, out.size());
        cd::decode_through_floats<false>(dev, out,
                                         [&](auto, float* o) { finish(dev, p_sum.data(), q_sum.data(), s, o); });
    }

    // ---- one rank: encode / decode ----------------------------------------------------------------------------

    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode(cuda::device& dev, tensor_view<T> g, state& s, cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        namespace lr = cuda::compress::detail::low_rank;
        const tensor_view<float> p(s.p_buffer.data(), s.layout.p_total, memory_space::cuda);
        const tensor_view<float> q(s.q_buffer.data(), s.layout.q_total, memory_space::cuda);
        compute_p(dev, g, s, p);
        compute_q(dev, tensor_view<const float>(p), s, q);
        const std::size_t payload = message_bytes(s) - wire::header_bytes;
        cuda::compress::message_writer w(dev, out, powersgd::codec_id, dtype_of<std::remove_const_t<T>>(), s.count,
                                         payload);
        // The layer table from the host, then each layer's floats copied into place.
        std::vector<std::byte> head(8 + 24 * s.layout.layers.size());
        wire::store_le<std::uint32_t>(head.data(), static_cast<std::uint32_t>(codec_.options().rank));
        wire::store_le<std::uint32_t>(head.data() + 4, static_cast<std::uint32_t>(s.layout.layers.size()));
        std::size_t at = 8;
        for (const auto& L : s.layout.layers) {
            wire::store_le<std::uint64_t>(head.data() + at, L.rows);
            wire::store_le<std::uint64_t>(head.data() + at + 8, L.cols);
            wire::store_le<std::uint64_t>(head.data() + at + 16, L.compressed ? 1 : 0);
            at += 24;
        }
        dev.copy_from_host(w.payload(), head.data(), head.size());
        const std::size_t r = codec_.options().rank;
        const cudaStream_t stream = dev.stream();
        std::byte* to = w.payload() + head.size();
        const auto put = [&](const float* from, std::size_t count) {
            if (count != 0)
                lr::check(cudaMemcpyAsync(to, from, count * sizeof(float), cudaMemcpyDeviceToDevice, stream),
                          "cudaMemcpyAsync D2D");
            to += count * sizeof(float);
        };
        for (const auto& L : s.layout.layers) {
            if (L.compressed) {
                put(s.p_hat.data() + L.p_offset, r * L.rows);
                put(s.q_buffer.data() + L.q_offset, r * L.cols);
            } else {
                put(s.p_buffer.data() + L.p_offset, L.elements);
            }
        }
        const std::size_t size = w.finish();
        finish(dev, s.p_buffer.data(), s.q_buffer.data(), s, nullptr);
        return size;
    }

    template <class T>
        requires floating_element<T>
    void decode(cuda::device& dev, tensor_view<const std::byte> message, tensor_view<T> out) const {
        decode_any<false>(dev, message, out);
    }
    template <class T>
        requires floating_element<T>
    void decode_add(cuda::device& dev, tensor_view<const std::byte> message, tensor_view<T> acc) const {
        decode_any<true>(dev, message, acc);
    }

    /// The host codec's blob: u64 step | u64 r | u64 L | L x (u64 rows, u64 cols) | Q | u64 residual length | E.
    void save_state(cuda::device& dev, const state& s, std::vector<std::byte>& blob) const {
        powersgd::state host = host_layout(s);
        host.step = s.layout.step;
        if (!host.q.empty()) dev.copy_to_host(host.q.data(), s.q.data(), host.q.size() * sizeof(float));
        if (!host.residual.empty())
            dev.copy_to_host(host.residual.data(), s.residual.data(), host.residual.size() * sizeof(float));
        codec_.save_state(host, blob);
    }
    /// Loads into a state made for the same layout; every check runs on the host before the device state changes.
    void load_state(cuda::device& dev, std::span<const std::byte> blob, state& s) const {
        powersgd::state host = host_layout(s);
        codec_.load_state(blob, host);
        if (!host.q.empty()) dev.copy_from_host(s.q.data(), host.q.data(), host.q.size() * sizeof(float));
        if (!host.residual.empty())
            dev.copy_from_host(s.residual.data(), host.residual.data(), host.residual.size() * sizeof(float));
        s.layout.step = host.step;
    }

private:
    [[nodiscard]] state build(cuda::device& dev, powersgd::state host, bool bare,
                              std::vector<matrix_shape> shapes) const {
        namespace lr = cuda::compress::detail::low_rank;
        state s;
        s.count = host.count;
        s.bare = bare;
        s.shapes = std::move(shapes);
        const std::size_t padded =
            host.layers.empty() ? 0 : host.layers.back().offset + host.layers.back().rows * host.layers.back().cols;
        s.q = device_buffer<float, cuda::device>(dev, host.q_total);
        if (!host.q.empty()) dev.copy_from_host(s.q.data(), host.q.data(), host.q.size() * sizeof(float));
        if (codec_.options().error_feedback) s.residual = device_buffer<float, cuda::device>(dev, host.count);
        s.m = device_buffer<float, cuda::device>(dev, std::max(padded, host.count));
        s.p_hat = device_buffer<float, cuda::device>(dev, host.p_total);
        s.p_buffer = device_buffer<float, cuda::device>(dev, host.p_total);
        s.q_local = device_buffer<float, cuda::device>(dev, host.q_total);
        s.q_buffer = device_buffer<float, cuda::device>(dev, host.q_total);
        const std::vector<lr::layer_entry> table = lr::layer_table(host);
        s.table = device_buffer<lr::layer_entry, cuda::device>(dev, table.size());
        if (!table.empty()) dev.copy_from_host(s.table.data(), table.data(), table.size() * sizeof(lr::layer_entry));
        std::vector<std::uint32_t> compressed;
        for (std::size_t li = 0; li < host.layers.size(); ++li)
            if (host.layers[li].compressed) compressed.push_back(static_cast<std::uint32_t>(li));
        s.compressed_count = static_cast<std::uint32_t>(compressed.size());
        s.compressed = device_buffer<std::uint32_t, cuda::device>(dev, compressed.size());
        if (!compressed.empty())
            dev.copy_from_host(s.compressed.data(), compressed.data(), compressed.size() * sizeof(std::uint32_t));
        s.flag = device_buffer<std::uint32_t, cuda::device>(dev, 1);
        s.blas = std::make_unique<lr::cublas>(dev);
        host.q.clear();
        host.q.shrink_to_fit();
        host.residual.clear();
        host.residual.shrink_to_fit();
        s.layout = std::move(host);
        return s;
    }

    /// A host state of the same layout, its vectors sized (for the blobs).
    [[nodiscard]] powersgd::state host_layout(const state& s) const {
        return s.bare ? codec_.make_state(s.count) : codec_.make_state(s.count, s.shapes);
    }

    /// Standard normal Q for every compressed layer from (seed, layer, draw), drawn on the host as the host codec
    /// draws it (its Box-Muller uses the host's log and cos) and copied up.
    void fill_random_q(cuda::device& dev, state& s, std::uint64_t draw) const {
        std::vector<float> q(s.layout.q_total);
        for (std::size_t li = 0; li < s.layout.layers.size(); ++li) {
            const auto& L = s.layout.layers[li];
            if (!L.compressed) continue;
            detail::xoshiro256ss rng(detail::draw_key(codec_.options().seed, li, draw));
            for (std::size_t k = 0; k < codec_.options().rank * L.cols; ++k)
                q[L.q_offset + k] = static_cast<float>(rng.normal());
        }
        if (!q.empty()) dev.copy_from_host(s.q.data(), q.data(), q.size() * sizeof(float));
    }

    /// The host codec's finish: out (when given), E, the warm start's Q, the step.
    void finish(cuda::device& dev, const float* p_sum, const float* q_sum, state& s, float* out) const {
        namespace lr = cuda::compress::detail::low_rank;
        cuda::compress::detail::activate(dev);
        const cudaStream_t stream = dev.stream();
        const bool ef = codec_.options().error_feedback;
        if (s.count != 0 && (out != nullptr || ef)) {
            lr::finish_kernel<<<cuda::detail::grid_blocks(s.count), cuda::detail::block_threads, 0, stream>>>(
                s.table.data(), static_cast<std::uint32_t>(s.layout.layers.size()), s.count, codec_.options().rank,
                s.p_hat.data(), p_sum, q_sum, s.q_local.data(), s.m.data(), out, ef ? s.residual.data() : nullptr);
            lr::check_launch("hitch::cuda::compress powersgd finish_kernel");
        }
        if (codec_.options().warm_start && s.layout.q_total != 0)
            lr::check(
                cudaMemcpyAsync(s.q.data(), q_sum, s.layout.q_total * sizeof(float), cudaMemcpyDeviceToDevice, stream),
                "cudaMemcpyAsync D2D");
        ++s.layout.step;
    }

    template <bool Add, class T>
    void decode_any(cuda::device& dev, tensor_view<const std::byte> message, tensor_view<T> out) const {
        namespace cd = cuda::compress::detail;
        namespace lr = cuda::compress::detail::low_rank;
        cd::require_device(out, who);
        const cuda::compress::device_message_view m = cuda::compress::open(dev, message, {who, powersgd::codec_id});
        cuda::compress::expect_count(m, out.size(), who);
        const std::size_t n = out.size();
        // The layer table is read on the host with the host codec's checks and texts.
        cuda::compress::payload_reader pr(dev, m, who);
        const auto rank = pr.get<std::uint32_t>("rank");
        const auto count = pr.get<std::uint32_t>("layer count");
        if (rank < 1 || rank > 1024) pr.fail(hitch::detail::concat("rank ", rank, " outside [1, 1024]"));
        if (count > n + 1 || (n > 0 && count == 0) || (n == 0 && count != 0))
            pr.fail(hitch::detail::concat(count, " layers for a bucket of ", n, " elements"));
        const std::vector<std::byte> table_bytes = pr.copy(pr.take(24 * std::uint64_t{count}, "rows"));
        wire::reader r(table_bytes, who);
        std::vector<lr::layer_entry> layers;
        std::size_t offset = 0;
        std::uint64_t floats = 0;
        for (std::uint32_t l = 0; l < count; ++l) {
            const auto rows = r.get<std::uint64_t>("rows");
            const auto cols = r.get<std::uint64_t>("cols");
            const auto flag = r.get<std::uint64_t>("compressed flag");
            if (rows == 0 || cols == 0 || rows > n || cols > n || flag > 1 || offset >= n)
                pr.fail(hitch::detail::concat("layer ", l, " of shape ", rows, " x ", cols, " (flag ", flag,
                                              ") does not fit a bucket of ", n));
            const std::size_t size = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
            const std::size_t left = n - offset;
            if (size > left && (l + 1 != count || size - left >= cols))
                pr.fail(hitch::detail::concat("layer ", l, " of shape ", rows, " x ", cols, " overruns the bucket"));
            const std::size_t elements = std::min(size, left);
            const std::uint64_t layer_floats = flag == 1 ? std::uint64_t{rank} * (rows + cols) : elements;
            layers.push_back({offset, rows, cols, elements, floats, 0, static_cast<std::uint32_t>(flag)});
            floats += layer_floats;
            offset += elements;
        }
        if (offset != n) pr.fail(hitch::detail::concat("the layers cover ", offset, " of ", n, " elements"));
        const auto data = pr.take(4 * floats, "layer data");
        pr.expect_end();
        const cudaStream_t stream = dev.stream();
        cd::activate(dev);
        // The floats start 8 + 24 L bytes into the payload: aligned in a message of its own, copied when the message
        // sits at an odd place in a larger buffer.
        std::optional<cd::device_scratch<float>> aligned;
        const auto* values = reinterpret_cast<const float*>(data.data());
        if (reinterpret_cast<std::uintptr_t>(data.data()) % alignof(float) != 0 && floats != 0) {
            aligned.emplace(dev, floats);
            lr::check(cudaMemcpyAsync(aligned->data(), data.data(), 4 * floats, cudaMemcpyDeviceToDevice, stream),
                      "cudaMemcpyAsync D2D");
            values = aligned->data();
        }
        if (floats != 0) {
            cd::device_scratch<unsigned long long> first(dev, 1);
            lr::check(cudaMemsetAsync(first.data(), 0xff, sizeof(unsigned long long), stream), "cudaMemsetAsync");
            lr::first_non_finite_kernel<<<cuda::detail::grid_blocks(floats), cuda::detail::block_threads, 0, stream>>>(
                values, floats, first.data());
            lr::check_launch("hitch::cuda::compress powersgd first_non_finite_kernel");
            if (cd::read_back(dev, first.data()) != ~0ull) pr.fail("a value is not finite");
        }
        if (n == 0) return;
        cd::device_scratch<lr::layer_entry> table(dev, layers.size());
        dev.copy_from_host(table.data(), layers.data(), layers.size() * sizeof(lr::layer_entry));
        cd::decode_through_floats<Add>(dev, out, [&](auto add, float* o) {
            lr::decode_kernel<decltype(add)::value>
                <<<cuda::detail::grid_blocks(n), cuda::detail::block_threads, 0, stream>>>(table.data(), count, n, rank,
                                                                                           values, o);
            lr::check_launch("hitch::cuda::compress powersgd decode_kernel");
        });
    }

    powersgd codec_{};
};

}  // namespace hitch::compress
