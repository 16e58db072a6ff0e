#pragma once
// PowerSGD's per-element math for the host and the GPU (compress/powersgd.hpp and compress/detail/low_rank_kernels.hpp
// are the reference): the layer table the kernels look layers up in, the rank-r product P Q^T and the error
// feedback residual M - P Q^T element by element in the host's order of additions, and the steps of the Gram-Schmidt
// orthogonalisation. The host tests compare them with the CPU codec bit for bit.

#include <cstddef>
#include <cstdint>

#include "hitch/cuda/detail/hd.hpp"

namespace hitch::cuda::compress::detail::low_rank {

/// One layer of a bucket, as the kernels see it (compress::powersgd::layer).
struct layer_entry {
    std::uint64_t offset = 0;  // first element in the bucket
    std::uint64_t rows = 0;
    std::uint64_t cols = 0;
    std::uint64_t elements = 0;  // rows x cols, less a bare bucket's padding
    std::uint64_t p_offset = 0;  // into the P round's buffer
    std::uint64_t q_offset = 0;  // into the Q round's buffer
    std::uint32_t compressed = 0;
};

/// The layer holding element i (layers in order, covering [0, n)): a binary search over their offsets.
[[nodiscard]] HITCH_HD_INLINE std::uint32_t find_layer(const layer_entry* layers, std::uint32_t count,
                                                       std::uint64_t i) noexcept {
    std::uint32_t lo = 0, hi = count;  // the layer is in [lo, hi)
    while (hi - lo > 1) {
        const std::uint32_t mid = lo + (hi - lo) / 2;
        if (layers[mid].offset <= i)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/// (P Q^T)[i][j] for r columns of P (length rows) and of Q (length cols): the products added in column order,
/// from zero, each rounded on its own (the host's axpy_kernel into a zeroed row).
[[nodiscard]] HITCH_HD_INLINE float low_rank_entry(const float* p, const float* q, std::uint64_t rows,
                                                   std::uint64_t cols, std::uint64_t r, std::uint64_t i,
                                                   std::uint64_t j) noexcept {
    float acc = 0.0f;
    for (std::uint64_t c = 0; c < r; ++c) acc = hd::add(acc, hd::mul(p[c * rows + i], q[c * cols + j]));
    return acc;
}

/// m - (P Q^T)[i][j] as the host's error feedback computes it: from m, adding (-p) q column by column.
[[nodiscard]] HITCH_HD_INLINE float low_rank_residual(float m, const float* p, const float* q, std::uint64_t rows,
                                                      std::uint64_t cols, std::uint64_t r, std::uint64_t i,
                                                      std::uint64_t j) noexcept {
    float e = m;
    for (std::uint64_t c = 0; c < r; ++c) e = hd::add(e, hd::mul(-p[c * rows + i], q[c * cols + j]));
    return e;
}

// ---- Gram-Schmidt (compress::detail::orthogonalise), element by element -------------------------------------------

/// A product of two floats in double (exact).
[[nodiscard]] HITCH_HD_INLINE double exact_product(float a, float b) noexcept {
    return hd::mul(static_cast<double>(a), static_cast<double>(b));
}
/// col - f prev, the projection step.
[[nodiscard]] HITCH_HD_INLINE float project_out(float col, float f, float prev) noexcept {
    return hd::sub(col, hd::mul(f, prev));
}
/// Whether a column of norm `norm` after projection, `before` before it, is kept (and scaled by inverse_norm) or is
/// dependent and zeroed.
[[nodiscard]] HITCH_HD_INLINE bool keep_column(double norm, double before) noexcept {
    return norm > 1e-30 && norm > hd::mul(1e-4, before);
}
[[nodiscard]] HITCH_HD_INLINE float inverse_norm(double norm) noexcept {
    return static_cast<float>(hd::div(1.0, norm));
}

}  // namespace hitch::cuda::compress::detail::low_rank
