#pragma once
// The reduce kernels: allreduce::combine, combine_many and divide (hitch/allreduce/reduce_op.hpp) on GPU buffers,
// with the host's bits (the per-element math is hitch/cuda/allreduce/combine.hpp, shared with the host tests). nvcc
// only. Every function is asynchronous on `stream`; the buffers must stay alive until the stream has run it.
#if !defined(__CUDACC__)
#error "hitch/cuda/allreduce/reduce.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cuda_runtime.h>

#include <cub/device/device_transform.cuh>

#include <cstddef>
#include <string_view>

#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/reduce_op.hpp"
#include "hitch/cuda/allreduce/combine.hpp"
#include "hitch/cuda/detail/launch.cuh"

namespace hitch::cuda::allreduce {

namespace detail {

using hitch::cuda::detail::check;
using hitch::cuda::detail::check_launch;

template <class T, reduce_op Op, bool Divide>
struct combine_op {
    accumulator_t<T> divisor;
    __device__ __forceinline__ storage_t<T> operator()(storage_t<T> left, storage_t<T> right) const {
        return combine_element<T>(Op, left, right, Divide, divisor);
    }
};

template <class T>
struct divide_op {
    accumulator_t<T> divisor;
    __device__ __forceinline__ storage_t<T> operator()(storage_t<T> value) const {
        return divide_element<T>(value, divisor);
    }
};

template <class T, reduce_op Op, bool Divide>
void combine_with(storage_t<T>* dst, const storage_t<T>* left, const storage_t<T>* right, std::size_t n,
                  accumulator_t<T> divisor, cudaStream_t stream) {
    check(cub::DeviceTransform::Transform(::cuda::std::make_tuple(left, right), dst, n,
                                          combine_op<T, Op, Divide>{divisor}, stream),
          "cub::DeviceTransform::Transform (hitch::cuda::allreduce::combine)");
}

template <class T, bool Divide>
void combine_op_dispatch(storage_t<T>* dst, const storage_t<T>* left, const storage_t<T>* right, std::size_t n,
                         reduce_op op, accumulator_t<T> divisor, cudaStream_t stream) {
    switch (op) {
        case reduce_op::sum:
        case reduce_op::average:
            return combine_with<T, reduce_op::sum, Divide>(dst, left, right, n, divisor, stream);
        case reduce_op::min:
            return combine_with<T, reduce_op::min, Divide>(dst, left, right, n, divisor, stream);
        case reduce_op::max:
            return combine_with<T, reduce_op::max, Divide>(dst, left, right, n, divisor, stream);
    }
}

template <class T, reduce_op Op>
__global__ void combine_many_kernel(storage_t<T>* dst, const storage_t<T>* const* sources, std::size_t k, std::size_t n,
                                    bool divide_result, accumulator_t<T> divisor) {
    const std::size_t stride = hitch::cuda::detail::grid_stride();
    for (std::size_t i = hitch::cuda::detail::grid_index(); i < n; i += stride)
        dst[i] = combine_many_element<T>(Op, k, [&](std::size_t s) { return sources[s][i]; }, divide_result, divisor);
}

template <class T>
[[nodiscard]] auto* storage(T* p) noexcept {
    if constexpr (std::is_const_v<T>)
        return reinterpret_cast<const storage_t<T>*>(p);
    else
        return reinterpret_cast<storage_t<T>*>(p);
}

}  // namespace detail

/// dst[i] = op(left[i], right[i]) on the GPU, divided by `divisor` when op is average and divisor != 1; dst may be
/// left or right, or apart from both (not partly overlapping). The same bits as allreduce::combine.
template <floating_element T>
void combine(T* dst, const T* left, const T* right, std::size_t n, reduce_op op, int divisor, cudaStream_t stream) {
    if (n == 0) return;
    const auto d = static_cast<accumulator_t<T>>(divisor);
    if (divides(op, divisor))
        detail::combine_op_dispatch<T, true>(detail::storage(dst), detail::storage(left), detail::storage(right), n, op,
                                             d, stream);
    else
        detail::combine_op_dispatch<T, false>(detail::storage(dst), detail::storage(left), detail::storage(right), n,
                                              op, d, stream);
}

/// dst[i] = the k sources combined left to right in the accumulator type and rounded once (allreduce::combine_many):
/// `sources` is an array of k device pointers that the GPU can read (device memory, or mapped pinned memory). dst may
/// be one of the sources.
template <floating_element T>
void combine_many(T* dst, const T* const* sources, std::size_t k, std::size_t n, reduce_op op, int divisor,
                  cudaStream_t stream) {
    if (n == 0 || k == 0) return;
    const bool divide_result = divides(op, divisor);
    const auto d = static_cast<accumulator_t<T>>(divisor);
    const auto* src = reinterpret_cast<const storage_t<T>* const*>(sources);
    const unsigned blocks = hitch::cuda::detail::grid_blocks(n);
    constexpr unsigned threads = hitch::cuda::detail::block_threads;
    switch (op) {
        case reduce_op::sum:
        case reduce_op::average:
            detail::combine_many_kernel<T, reduce_op::sum>
                <<<blocks, threads, 0, stream>>>(detail::storage(dst), src, k, n, divide_result, d);
            break;
        case reduce_op::min:
            detail::combine_many_kernel<T, reduce_op::min>
                <<<blocks, threads, 0, stream>>>(detail::storage(dst), src, k, n, divide_result, d);
            break;
        case reduce_op::max:
            detail::combine_many_kernel<T, reduce_op::max>
                <<<blocks, threads, 0, stream>>>(detail::storage(dst), src, k, n, divide_result, d);
            break;
    }
    detail::check_launch("hitch::cuda::allreduce::combine_many");
}

/// data[i] /= divisor, rounded once (allreduce::divide); nothing when divisor is 1.
template <floating_element T>
void divide(T* data, std::size_t n, int divisor, cudaStream_t stream) {
    if (n == 0 || divisor == 1) return;
    detail::check(cub::DeviceTransform::Transform(detail::storage(data), detail::storage(data), n,
                                                  detail::divide_op<T>{static_cast<accumulator_t<T>>(divisor)}, stream),
                  "cub::DeviceTransform::Transform (hitch::cuda::allreduce::divide)");
}

/// combine() for an element type known at run time (f16, bf16, f32, f64); config_error for any other.
inline void combine(dtype type, void* dst, const void* left, const void* right, std::size_t n, reduce_op op,
                    int divisor, cudaStream_t stream) {
    switch (type) {
        case dtype::f32:
            return combine(static_cast<float*>(dst), static_cast<const float*>(left), static_cast<const float*>(right),
                           n, op, divisor, stream);
        case dtype::f64:
            return combine(static_cast<double*>(dst), static_cast<const double*>(left),
                           static_cast<const double*>(right), n, op, divisor, stream);
        case dtype::f16:
            return combine(static_cast<half*>(dst), static_cast<const half*>(left), static_cast<const half*>(right), n,
                           op, divisor, stream);
        case dtype::bf16:
            return combine(static_cast<bfloat16*>(dst), static_cast<const bfloat16*>(left),
                           static_cast<const bfloat16*>(right), n, op, divisor, stream);
        default:
            throw config_error(hitch::detail::concat("hitch::cuda::allreduce::combine: element type ", name(type),
                                                     " is not one of float, double, half, bfloat16"));
    }
}

}  // namespace hitch::cuda::allreduce
