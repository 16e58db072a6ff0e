#pragma once
// The one BLAS routine the toolkit needs, for float and double, on row-major matrices.

#include <cblas.h>

#include <climits>
#include <cstddef>
#include <optional>
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
inline void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
                 std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
    using detail::blas_int;
    cblas_sgemm(CblasRowMajor, detail::blas_op(trans_a), detail::blas_op(trans_b), blas_int(m), blas_int(n),
                blas_int(k), alpha, a, blas_int(lda), b, blas_int(ldb), beta, c, blas_int(ldc));
}

inline void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, double alpha, const double* a,
                 std::size_t lda, const double* b, std::size_t ldb, double beta, double* c, std::size_t ldc) {
    using detail::blas_int;
    cblas_dgemm(CblasRowMajor, detail::blas_op(trans_a), detail::blas_op(trans_b), blas_int(m), blas_int(n),
                blas_int(k), alpha, a, blas_int(lda), b, blas_int(ldb), beta, c, blas_int(ldc));
}

/// Threads OpenBLAS may use in this process. Ranks that share the cores should each use 1 (the OPENBLAS_NUM_THREADS
/// environment variable does the same before start-up). Returns false where the BLAS offers no such control.
inline bool set_blas_threads(int threads) {
    if (threads < 1)
        throw std::invalid_argument("nn::set_blas_threads: threads = " + std::to_string(threads) +
                                    " must be at least 1");
#ifdef HITCH_EXAMPLES_OPENBLAS
    openblas_set_num_threads(threads);
    return true;
#else
    return false;
#endif
}

/// The kernel set OpenBLAS chose for this CPU ("Haswell", "SkylakeX", ...), or "" for another BLAS.
inline std::string blas_core() {
#ifdef HITCH_EXAMPLES_OPENBLAS
    return openblas_get_corename();
#else
    return {};
#endif
}

/// A faster OpenBLAS kernel set than the one chosen, where OpenBLAS did not recognise an AVX-512 CPU (0.3.21 treats
/// AMD Zen 4 as Haswell): "SkylakeX", to be set as OPENBLAS_CORETYPE before the program starts (OpenBLAS reads it
/// when it is loaded). On such a CPU its SGEMM is about 1.7x faster. Empty when there is nothing to gain.
inline std::optional<std::string> faster_blas_core() {
#if defined(HITCH_EXAMPLES_OPENBLAS) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    const std::string core = blas_core();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                        __builtin_cpu_supports("avx512cd");
    if (avx512 && (core == "Haswell" || core == "Zen")) return "SkylakeX";
#endif
    return std::nullopt;
}

}  // namespace hitch_examples::nn
