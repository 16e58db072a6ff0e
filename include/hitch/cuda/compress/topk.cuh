#pragma once
// compress::topk on the GPU: hitch::compress::device_codec<compress::topk, cuda::device>. The k = round(density n)
// largest magnitudes of a bucket in CUDA memory, with ties at the k-th magnitude to the lowest indices, are the host
// codec's elements; the message is the host codec's, byte for byte (payload u64 k | k x f32 values | k varints of
// index gaps), so a CPU rank decodes a GPU rank's message and the other way round.
//
// Selection (detail/sparse.cuh): exact, a radix select of the k-th largest magnitude in three histogram passes and
// one collecting pass; sampled (the default, as the host's), Lin et al. 2018's threshold from a sample, one
// collecting pass and the exact selection among the candidates. Either gives the host's set. The payload is built on
// the device: varint sizes, a CUB exclusive scan for the offsets, a scatter; decoding parses the varints in parallel
// (a scan over the bytes that end one) and checks everything before it writes to the bucket.
//
// The state (the sampling step) is the host codec's; save_state / load_state write the host's blob bytes.
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/topk.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/cuda/compress/codec.cuh"
#include "hitch/cuda/compress/detail/sparse.cuh"

namespace hitch::cuda::compress::detail::sparse {

/// r_out = g + r_in (error feedback's v).
static __global__ void add_residual_kernel(const float* g, const float* r_in, float* r_out, std::uint64_t n) {
    for (std::uint64_t i = grid_index(); i < n; i += grid_stride()) r_out[i] = hd::add(g[i], r_in[i]);
}

/// r[index[j]] = 0 for the k sent elements.
static __global__ void zero_selected_kernel(float* r, const std::uint64_t* index, std::uint64_t k) {
    for (std::uint64_t j = grid_index(); j < k; j += grid_stride()) r[index[j]] = 0.0f;
}

inline void add_residual(cuda::device& dev, const float* g, const float* r_in, float* r_out, std::uint64_t n) {
    if (n == 0) return;
    add_residual_kernel<<<cuda::detail::grid_blocks(n), cuda::detail::block_threads, 0, dev.stream()>>>(g, r_in, r_out,
                                                                                                        n);
    check_launch("hitch::cuda::compress add_residual_kernel");
}
inline void zero_selected(cuda::device& dev, float* r, const std::uint64_t* index, std::uint64_t k) {
    if (k == 0) return;
    zero_selected_kernel<<<cuda::detail::grid_blocks(k), cuda::detail::block_threads, 0, dev.stream()>>>(r, index, k);
    check_launch("hitch::cuda::compress zero_selected_kernel");
}

}  // namespace hitch::cuda::compress::detail::sparse

namespace hitch::compress {

/// compress::topk for buckets in CUDA memory.
template <>
class device_codec<topk, cuda::device> {
public:
    using codec_type = topk;
    static constexpr std::string_view who = topk::who;

    struct state {
        std::size_t count = 0;
        std::uint64_t step = 0;  // advances the sampling key, as the host's
        int passes = 0;          // collecting passes of the last sampled selection (0: exact)
        cuda::compress::detail::sparse::select_workspace select;
        cuda::compress::detail::sparse::scratch<std::uint64_t> offsets;
    };

    device_codec() = default;
    explicit device_codec(const topk& codec) : codec_(codec) {}
    [[nodiscard]] const topk& codec() const noexcept { return codec_; }
    [[nodiscard]] const topk::options_type& options() const noexcept { return codec_.options(); }

    [[nodiscard]] state make_state(cuda::device& /*dev*/, std::size_t n) const {
        state s;
        s.count = n;
        return s;
    }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept { return codec_.max_message_bytes(n); }
    [[nodiscard]] std::size_t k(std::size_t n) const noexcept { return codec_.k(n); }

    /// Encodes the top-k of `in` (any floating type: selected among its values as floats, as the host codec does)
    /// into `out`; returns the message's size.
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode(cuda::device& dev, tensor_view<T> in, state& s, cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        cd::require_device(in, who);
        cd::check_state_size(who, s.count, in.size());
        const cd::device_floats v(dev, in);
        select(dev, v.data(), in.size(), s);
        const std::size_t size =
            cd::sparse::write_sparse_message(dev, s.select, s.offsets, v.data(), in.size(), k(in.size()),
                                             topk::codec_id, dtype_of<std::remove_const_t<T>>(), out);
        ++s.step;
        return size;
    }

    /// Encodes the top-k of v = g + r_in and leaves r_out = v with the sent elements set to zero (r_out must not
    /// overlap r_in; it is unspecified when the encode throws).
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode_ef(cuda::device& dev, tensor_view<T> g, tensor_view<const float> r_in, tensor_view<float> r_out,
                          state& s, cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        namespace sp = cuda::compress::detail::sparse;
        const std::size_t n = g.size();
        cd::require_device(g, who);
        cd::check_state_size(who, s.count, n);
        cd::check_residuals(who, r_in, r_out, n);
        const cd::device_floats gf(dev, g);
        cd::activate(dev);
        sp::add_residual(dev, gf.data(), r_in.data(), r_out.data(), n);
        select(dev, r_out.data(), n, s);
        const std::size_t kk = k(n);
        const std::size_t size = sp::write_sparse_message(dev, s.select, s.offsets, r_out.data(), n, kk, topk::codec_id,
                                                          dtype_of<std::remove_const_t<T>>(), out);
        sp::zero_selected(dev, r_out.data(), s.select.selected.data(), kk);
        ++s.step;
        return size;
    }

    /// out = the decoded message (zeros elsewhere).
    template <class T>
        requires floating_element<T>
    void decode(cuda::device& dev, tensor_view<const std::byte> message, tensor_view<T> out) const {
        decode_any<false>(dev, message, out);
    }
    /// acc += the decoded message.
    template <class T>
        requires floating_element<T>
    void decode_add(cuda::device& dev, tensor_view<const std::byte> message, tensor_view<T> acc) const {
        decode_any<true>(dev, message, acc);
    }

    /// Takes back the last encode's step (the aggregation calls it when another rank failed to encode).
    void undo(state& s) const noexcept {
        if (s.step > 0) --s.step;
    }

    /// The host codec's blob: u64 step.
    void save_state(cuda::device& /*dev*/, const state& s, std::vector<std::byte>& blob) const {
        topk::state host = codec_.make_state(s.count);
        host.step = s.step;
        codec_.save_state(host, blob);
    }
    void load_state(cuda::device& /*dev*/, std::span<const std::byte> blob, state& s) const {
        topk::state host = codec_.make_state(s.count);
        codec_.load_state(blob, host);
        s.step = host.step;
    }

private:
    void select(cuda::device& dev, const float* v, std::size_t n, state& s) const {
        namespace sp = cuda::compress::detail::sparse;
        const auto& o = codec_.options();
        const hitch::compress::detail::sampling how{o.sample_fraction, o.min_sample, tuning::topk_sample_attempts};
        const sp::selection_result r = sp::select_topk(dev, s.select, v, n, k(n), o.method == topk_method::sampled,
                                                       sp::draw_key(o.seed, 0, s.step), how);
        if (!r.finite) hitch::compress::detail::throw_non_finite(who);
        s.passes = r.passes;
    }

    template <bool Add, class T>
    void decode_any(cuda::device& dev, tensor_view<const std::byte> message, tensor_view<T> out) const {
        cuda::compress::detail::sparse::decode_sparse_message<Add>(dev, message, out, who, topk::codec_id);
    }

    topk codec_{};
};

}  // namespace hitch::compress
