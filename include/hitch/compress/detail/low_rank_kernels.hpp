#pragma once
// The dense kernels of PowerSGD (compress/powersgd.hpp): dot products and axpy in eight independent lanes, so they
// vectorise the same way in every build (no contraction: see compress/detail/simd.hpp), and the Gram-Schmidt
// orthogonalisation of P.

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "hitch/compress/detail/simd.hpp"

namespace hitch::compress::detail {

HITCH_COMPRESS_STRICT_FP_BEGIN

/// out[c] = dot(row, qt[c]) for c < r (qt: r vectors of length `stride`, the first len entries used).
HITCH_COMPRESS_ALWAYS_INLINE float dot_kernel(const float* a, const float* b, std::size_t len) {
    float lanes[8] = {};
    std::size_t j = 0;
    for (; j + 8 <= len; j += 8)
        for (std::size_t l = 0; l < 8; ++l) {
            const float product = a[j + l] * b[j + l];
            lanes[l] += product;
        }
    float tail = 0.0f;
    for (; j < len; ++j) {
        const float product = a[j] * b[j];
        tail += product;
    }
    float sum = 0.0f;
    for (float x : lanes) sum += x;
    return sum + tail;
}

HITCH_COMPRESS_ALWAYS_INLINE void axpy_kernel(float alpha, const float* x, float* y, std::size_t len) {
    for (std::size_t j = 0; j < len; ++j) {
        const float product = alpha * x[j];
        y[j] += product;
    }
}

HITCH_COMPRESS_STRICT_FP_END

/// Modified Gram-Schmidt on r columns of length rows (dot products in double), each column orthogonalised twice
/// ("twice is enough": one pass loses orthogonality when a column is nearly dependent on the earlier ones). A
/// column left with less than 1e-4 of its length is dependent (M has rank below r there) and becomes 0, which
/// drops it from P Q^T instead of adding a direction made of rounding noise.
inline void orthogonalise(float* p, std::size_t rows, std::size_t r) {
    const auto norm_of = [rows](const float* col) {
        double norm2 = 0.0;
        for (std::size_t i = 0; i < rows; ++i) norm2 += static_cast<double>(col[i]) * col[i];
        return std::sqrt(norm2);
    };
    for (std::size_t c = 0; c < r; ++c) {
        float* col = p + c * rows;
        const double before = norm_of(col);
        for (int pass = 0; pass < 2; ++pass)
            for (std::size_t d = 0; d < c; ++d) {
                const float* prev = p + d * rows;
                double dot = 0.0;
                for (std::size_t i = 0; i < rows; ++i) dot += static_cast<double>(prev[i]) * col[i];
                const auto f = static_cast<float>(dot);
                for (std::size_t i = 0; i < rows; ++i) col[i] -= f * prev[i];
            }
        const double norm = norm_of(col);
        if (norm > 1e-30 && norm > 1e-4 * before) {
            const auto inv = static_cast<float>(1.0 / norm);
            for (std::size_t i = 0; i < rows; ++i) col[i] *= inv;
        } else {
            std::fill(col, col + rows, 0.0f);
        }
    }
}

}  // namespace hitch::compress::detail
