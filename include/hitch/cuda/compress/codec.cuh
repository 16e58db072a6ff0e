#pragma once
// What the GPU codecs share (compress/detail/codec.hpp's counterpart): the checks on buckets, states and residuals
// with the host codecs' texts, a bucket of any floating type as floats (half, bfloat16 and double buckets through a
// float buffer, as the host codecs do), and the store of decoded floats into a bucket of any type. nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/codec.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/cuda/compress/cast.hpp"
#include "hitch/cuda/compress/detail/wire.cuh"
#include "hitch/cuda/detail/launch.cuh"
#include "hitch/cuda/device.hpp"

namespace hitch::cuda::compress::detail {

/// The device pointer of a bucket's elements as their storage (half and bfloat16 as 16-bit words).
template <class T>
[[nodiscard]] auto storage_of(const tensor_view<T>& v) noexcept {
    using S = storage_t<T>;
    if constexpr (std::is_const_v<T>)
        return reinterpret_cast<const S*>(v.data());
    else
        return reinterpret_cast<S*>(v.data());
}

/// codec_base::check_state_size's text.
inline void check_state_size(std::string_view who, std::size_t state_count, std::size_t n) {
    if (state_count != n)
        throw config_error(hitch::detail::concat(who, ": the state was made for a bucket of ", state_count,
                                                 " elements, the bucket has ", n));
}

/// codec_base::encode_ef's check of the residuals (and that they are device memory).
inline void check_residuals(std::string_view who, const tensor_view<const float>& r_in, const tensor_view<float>& r_out,
                            std::size_t n) {
    require_device(r_in, who);
    require_device(r_out, who);
    if (r_in.size() != n || r_out.size() != n)
        throw config_error(hitch::detail::concat(who, ": residuals of ", r_in.size(), " and ", r_out.size(),
                                                 " elements for a bucket of ", n));
}

template <class T>
__global__ void to_floats_kernel(const storage_t<T>* in, float* out, std::size_t n) {
    for (std::size_t i = cuda::detail::grid_index(); i < n; i += cuda::detail::grid_stride())
        out[i] = element<T>::to_float(in[i]);
}

template <bool Add, class T>
__global__ void store_floats_kernel(const float* v, storage_t<T>* out, std::size_t n) {
    for (std::size_t i = cuda::detail::grid_index(); i < n; i += cuda::detail::grid_stride())
        out[i] = store_float<Add, T>(out[i], v[i]);
}

/// A bucket as floats on the device: the bucket itself when it is float, else a converted copy (codec.hpp's
/// as_floats: static_cast<float> of every element).
class device_floats {
public:
    template <class T>
    device_floats(cuda::device& dev, tensor_view<T> in) {
        using U = std::remove_const_t<T>;
        if constexpr (std::is_same_v<U, float>) {
            data_ = in.data();
        } else {
            scratch_.emplace(dev, in.size());
            if (!in.empty()) {
                activate(dev);
                to_floats_kernel<U>
                    <<<cuda::detail::grid_blocks(in.size()), cuda::detail::block_threads, 0, dev.stream()>>>(
                        storage_of(in), scratch_->data(), in.size());
                cuda::detail::check_launch("hitch::cuda::compress to_floats_kernel");
            }
            data_ = scratch_->data();
        }
    }
    [[nodiscard]] const float* data() const noexcept { return data_; }

private:
    std::optional<device_scratch<float>> scratch_;
    const float* data_ = nullptr;
};

/// out = v, or out += v in float arithmetic (codec.hpp's store_floats), for a bucket of any floating type (queued).
template <bool Add, class T>
void store_floats(cuda::device& dev, const float* v, tensor_view<T> out) {
    if (out.empty()) return;
    activate(dev);
    store_floats_kernel<Add, T>
        <<<cuda::detail::grid_blocks(out.size()), cuda::detail::block_threads, 0, dev.stream()>>>(v, storage_of(out),
                                                                                                  out.size());
    cuda::detail::check_launch("hitch::cuda::compress store_floats_kernel");
}

/// Decodes into a bucket of any floating type through the codec's float decoder (codec_base::decode_any): float
/// buckets directly, others through a float buffer decoded with Add = false and then stored.
template <bool Add, class T, class DecodeFloats>
void decode_through_floats(cuda::device& dev, tensor_view<T> out, DecodeFloats&& decode_floats) {
    if constexpr (std::is_same_v<T, float>) {
        decode_floats(std::bool_constant<Add>{}, out.data());
    } else {
        device_scratch<float> scratch(dev, out.size());
        decode_floats(std::false_type{}, scratch.data());
        store_floats<Add>(dev, scratch.data(), out);
    }
}

/// A flag the kernels raise (atomicOr) and the host reads once they are done.
class device_flag {
public:
    explicit device_flag(cuda::device& dev) : dev_(dev), word_(dev, 1) { word_.zero(); }
    [[nodiscard]] std::uint32_t* data() const noexcept { return word_.data(); }
    /// Waits for the stream and returns the flag.
    [[nodiscard]] std::uint32_t read() const { return read_back(dev_, word_.data()); }

private:
    cuda::device& dev_;
    device_scratch<std::uint32_t> word_;
};

}  // namespace hitch::cuda::compress::detail
