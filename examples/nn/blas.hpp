#pragma once
// The one BLAS routine the toolkit needs, for float and double, on row-major matrices.

#include <cblas.h>

#include <climits>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace hitch_examples::nn {

namespace detail {

inline int blas_int(std::size_t n) {
    if (n > static_cast<std::size_t>(INT_MAX))
        throw std::length_error("nn::gemm: dimension " + std::to_string(n) + " exceeds the BLAS integer range");
    return static_cast<int>(n);
}

inline CBLAS_TRANSPOSE blas_op(bool transpose) { return transpose ? CblasTrans : CblasNoTrans; }

}  // namespace detail

/// C (m x n) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C, row-major, with leading dimensions lda/ldb/ldc.
inline void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                 const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                 std::size_t ldc) {
    using detail::blas_int;
    cblas_sgemm(CblasRowMajor, detail::blas_op(trans_a), detail::blas_op(trans_b), blas_int(m), blas_int(n),
                blas_int(k), alpha, a, blas_int(lda), b, blas_int(ldb), beta, c, blas_int(ldc));
}

inline void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, double alpha,
                 const double* a, std::size_t lda, const double* b, std::size_t ldb, double beta, double* c,
                 std::size_t ldc) {
    using detail::blas_int;
    cblas_dgemm(CblasRowMajor, detail::blas_op(trans_a), detail::blas_op(trans_b), blas_int(m), blas_int(n),
                blas_int(k), alpha, a, blas_int(lda), b, blas_int(ldb), beta, c, blas_int(ldc));
}

/// Threads OpenBLAS may use in this process. Ranks that share the cores should each use 1 (the OPENBLAS_NUM_THREADS
/// environment variable does the same before start-up). Returns false where the BLAS offers no such control.
inline bool set_blas_threads(int threads) {
    if (threads < 1) throw std::invalid_argument("nn::set_blas_threads: threads = " + std::to_string(threads) +
                                                 " must be at least 1");
#ifdef HITCH_EXAMPLES_OPENBLAS
    openblas_set_num_threads(threads);
    return true;
#else
    return false;
#endif
}

}  // namespace hitch_examples::nn
