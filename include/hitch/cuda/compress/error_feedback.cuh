#pragma once
// compress::error_feedback<Codec> on the GPU: hitch::compress::device_codec<error_feedback<Codec>, cuda::device>, for
// any Codec with a device_codec (include that codec's .cuh too). The residual lives in device memory, double-buffered
// as on the host (the new one is written beside the old and swapped in only when the encode succeeds, so a refused
// bucket leaves the state as it was); codecs with a fused encode_ef compute it in their own pass, others are decoded
// back. save_state / load_state write and read the host's blob (they go through the host codec's own code). nvcc
// only.
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/error_feedback.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/cuda/compress/cast.hpp"
#include "hitch/cuda/compress/codec.cuh"
#include "hitch/cuda/compress/detail/wire.cuh"
#include "hitch/cuda/device.hpp"
#include "hitch/device/buffer.hpp"

namespace hitch::cuda::compress::detail {

/// next = float(g) + residual, raising *bad for a non-finite sum (error_feedback's add_residual).
template <class T>
__global__ void ef_add_residual_kernel(const storage_t<T>* g, const float* residual, float* next, std::size_t n,
                                       std::uint32_t* bad) {
    bool refused = false;
    for (std::size_t i = cuda::detail::grid_index(); i < n; i += cuda::detail::grid_stride()) {
        next[i] = hd::add(element<T>::to_float(g[i]), residual[i]);
        refused = refused || !finite(next[i]);
    }
    if (refused) atomicOr(bad, 1u);
}

static __global__ void ef_subtract_kernel(float* next, const float* decoded, std::size_t n) {
    for (std::size_t i = cuda::detail::grid_index(); i < n; i += cuda::detail::grid_stride())
        next[i] = hd::sub(next[i], decoded[i]);
}

/// Codec::summable_t<T> on the device where the device codec has one.
template <class Device, class T>
struct device_summable_of {};
template <class Device, class T>
    requires requires { typename Device::template summable_t<T>; }
struct device_summable_of<Device, T> {
    using type = typename Device::template summable_t<T>;
};

}  // namespace hitch::cuda::compress::detail

namespace hitch::compress {

/// error_feedback<Codec> for device buckets: encode (fused with the codec's encode_ef where it has one), decode,
/// decode_add, encode_summable / decode_summed (additive codecs), undo, save_state / load_state.
template <class Codec>
class device_codec<error_feedback<Codec>, cuda::device> {
    using inner_codec = device_codec<Codec, cuda::device>;
    using buffer = device_buffer<float, cuda::device>;

public:
    using codec_type = error_feedback<Codec>;
    static constexpr std::string_view who = error_feedback<Codec>::who;

    struct state {
        device_state_t<Codec, cuda::device> inner;
        buffer residual;  // r_{t-1}: what earlier steps did not send
        buffer next;      // where the encode writes r_t before it is swapped in
        std::size_t count = 0;
    };
    template <class T>
    using summable_t = typename cuda::compress::detail::device_summable_of<inner_codec, T>::type;

    device_codec() = default;
    explicit device_codec(const error_feedback<Codec>& codec) : codec_(codec), inner_(codec.inner()) {}
    [[nodiscard]] const error_feedback<Codec>& codec() const noexcept { return codec_; }
    [[nodiscard]] const inner_codec& inner() const noexcept { return inner_; }

    /// Zero residuals of n floats in device memory.
    [[nodiscard]] state make_state(cuda::device& dev, std::size_t n) const {
        return state{inner_.make_state(dev, n), buffer(dev, n), buffer(dev, n), n};
    }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const { return inner_.max_message_bytes(n); }

    /// Encodes g + r and keeps the new residual (swapped in only when the encode succeeds).
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode(cuda::device& dev, tensor_view<T> g, state& s, cuda::compress::device_message& out) const {
        check(s, g.size());
        std::size_t size = 0;
        if constexpr (requires {
                          inner_.encode_ef(dev, g, s.residual.view().as_const(), s.next.view(), s.inner, out);
                      }) {
            size = inner_.encode_ef(dev, g, s.residual.view().as_const(), s.next.view(), s.inner, out);
        } else {
            add_residual(dev, g, s);
            size = inner_.encode(dev, s.next.view().as_const(), s.inner, out);
            cuda::compress::detail::device_scratch<float> decoded(dev, s.count);
            inner_.decode(dev, out.view(), tensor_view<float>(decoded.data(), s.count, memory_space::cuda));
            subtract(dev, s.next.data(), decoded.data(), s.count);
        }
        std::swap(s.residual, s.next);
        return size;
    }

    template <class T>
        requires floating_element<T>
    void decode(cuda::device& dev, tensor_view<const std::byte> bytes, tensor_view<T> out) const {
        inner_.decode(dev, bytes, out);
    }
    template <class T>
        requires floating_element<T>
    void decode_add(cuda::device& dev, tensor_view<const std::byte> bytes, tensor_view<T> acc) const {
        inner_.decode_add(dev, bytes, acc);
    }

    // Additive form (where the inner codec has one): the residual is what the summable encoding lost locally.
    [[nodiscard]] std::size_t summable_count(const state& s, std::size_t n) const
        requires requires(const inner_codec& c) { c.summable_count(s.inner, n); }
    {
        return inner_.summable_count(s.inner, n);
    }
    template <class T, class S>
    void encode_summable(cuda::device& dev, tensor_view<T> g, state& s, tensor_view<S> out) const {
        check(s, g.size());
        add_residual(dev, g, s);
        inner_.encode_summable(dev, s.next.view().as_const(), s.inner, out);
        cuda::compress::detail::device_scratch<float> decoded(dev, s.count);
        inner_.decode_summed(dev, tensor_view<const S>(out.data(), out.size(), memory_space::cuda), s.inner,
                             tensor_view<float>(decoded.data(), s.count, memory_space::cuda));
        subtract(dev, s.next.data(), decoded.data(), s.count);
        std::swap(s.residual, s.next);
    }
    template <class S, class T>
    void decode_summed(cuda::device& dev, tensor_view<const S> sum, const state& s, tensor_view<T> out) const {
        inner_.decode_summed(dev, sum, s.inner, out);
    }

    /// Takes back the last successful encode: the previous residual, still beside the current one, is swapped back.
    void undo(state& s) const {
        std::swap(s.residual, s.next);
        if constexpr (requires { inner_.undo(s.inner); }) inner_.undo(s.inner);
    }

    /// The host's blob, written by the host codec from a host copy of the state.
    void save_state(cuda::device& dev, const state& s, std::vector<std::byte>& blob) const {
        codec_.save_state(to_host(dev, s), blob);
    }
    /// Reads the host's blob with the host codec's checks, then moves the state to the device.
    void load_state(cuda::device& dev, std::span<const std::byte> blob, state& s) const {
        typename error_feedback<Codec>::state h = codec_.make_state(s.count);
        codec_.load_state(blob, h);
        std::vector<std::byte> inner_blob;
        codec_.inner().save_state(h.inner, inner_blob);
        device_state_t<Codec, cuda::device> inner = inner_.make_state(dev, s.count);
        inner_.load_state(dev, inner_blob, inner);
        buffer residual(dev, s.count), next(dev, s.count);
        if (s.count != 0) dev.copy_from_host(residual.data(), h.residual.data(), s.count * sizeof(float));
        s.inner = std::move(inner);
        s.residual = std::move(residual);
        s.next = std::move(next);
    }

    /// The state as the host codec's (residual copied from the device; waits for the stream).
    [[nodiscard]] typename error_feedback<Codec>::state to_host(cuda::device& dev, const state& s) const {
        typename error_feedback<Codec>::state h = codec_.make_state(s.count);
        std::vector<std::byte> inner_blob;
        inner_.save_state(dev, s.inner, inner_blob);
        codec_.inner().load_state(inner_blob, h.inner);
        if (s.count != 0) dev.copy_to_host(h.residual.data(), s.residual.data(), s.count * sizeof(float));
        return h;
    }

private:
    void check(const state& s, std::size_t n) const {
        if (s.count != n || s.residual.size() != n || s.next.size() != n)
            throw config_error(hitch::detail::concat(who, ": the state was made for a bucket of ", s.count,
                                                     " elements, the bucket has ", n));
    }

    /// next = g + residual, refusing non-finite values before anything changes.
    template <class T>
    void add_residual(cuda::device& dev, tensor_view<T> g, state& s) const {
        namespace cd = cuda::compress::detail;
        using U = std::remove_const_t<T>;
        cd::require_device(g, who);
        cd::device_flag bad(dev);
        if (s.count != 0) {
            cd::activate(dev);
            cd::ef_add_residual_kernel<U>
                <<<cuda::detail::grid_blocks(s.count), cuda::detail::block_threads, 0, dev.stream()>>>(
                    cd::storage_of(tensor_view<const U>(g)), s.residual.data(), s.next.data(), s.count, bad.data());
            cuda::detail::check_launch("hitch::cuda::compress ef_add_residual_kernel");
        }
        if (bad.read() != 0) detail::throw_non_finite(who, "the bucket plus its residual");
    }

    static void subtract(cuda::device& dev, float* next, const float* decoded, std::size_t n) {
        if (n == 0) return;
        cuda::compress::detail::activate(dev);
        cuda::compress::detail::
            ef_subtract_kernel<<<cuda::detail::grid_blocks(n), cuda::detail::block_threads, 0, dev.stream()>>>(
                next, decoded, n);
        cuda::detail::check_launch("hitch::cuda::compress ef_subtract_kernel");
    }

    error_feedback<Codec> codec_{};
    inner_codec inner_{};
};

}  // namespace hitch::compress
