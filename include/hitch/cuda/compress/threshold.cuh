#pragma once
// compress::threshold on the GPU: hitch::compress::device_codec<compress::threshold, cuda::device>. Strom 2015's
// threshold quantisation of a bucket in CUDA memory: every element with |v| >= tau is sent as +-tau, the host codec's
// message byte for byte (payload u64 count | f32 tau | count varints of gap << 1 | sign).
//
// One CUB DeviceSelect pass collects the elements at or above tau in index order (and meets every NaN and infinity,
// refused with non_finite_error before anything changes); the varints' offsets come from an exclusive scan of their
// sizes, and a scatter writes them. The number sent is not known in advance: the selection keeps as many as the
// largest count seen so far and collects again, into more room, on the rare step that sends more. Decoding parses
// the varints in parallel and checks every entry before the first write.
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/threshold.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/compress/threshold.hpp"
#include "hitch/cuda/compress/codec.cuh"
#include "hitch/cuda/compress/detail/sparse.cuh"
#include "hitch/cuda/compress/topk.cuh"

namespace hitch::cuda::compress::detail::sparse {

/// r[index[j]] -= sign(r) tau for the sent elements (error feedback).
static __global__ void threshold_residual_kernel(float* r, const std::uint64_t* index, std::uint64_t count, float tau) {
    for (std::uint64_t j = grid_index(); j < count; j += grid_stride()) {
        float& x = r[index[j]];
        x = threshold_residual(x, tau);
    }
}

}  // namespace hitch::cuda::compress::detail::sparse

namespace hitch::compress {

/// compress::threshold for buckets in CUDA memory.
template <>
class device_codec<threshold, cuda::device> {
public:
    using codec_type = threshold;
    static constexpr std::string_view who = threshold::who;

    struct state {
        std::size_t count = 0;
        std::uint64_t room = 0;  // selected elements the selection keeps without collecting again
        cuda::compress::detail::sparse::select_workspace select;
        cuda::compress::detail::sparse::scratch<std::uint64_t> offsets;
    };

    device_codec() = default;
    explicit device_codec(const threshold& codec) : codec_(codec) {}
    [[nodiscard]] const threshold& codec() const noexcept { return codec_; }
    [[nodiscard]] const threshold::options_type& options() const noexcept { return codec_.options(); }

    [[nodiscard]] state make_state(cuda::device& /*dev*/, std::size_t n) const {
        state s;
        s.count = n;
        s.room = std::max<std::uint64_t>(1024, n / 64);
        return s;
    }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept { return codec_.max_message_bytes(n); }

    /// Encodes `in` (any floating type, compared as floats) into `out`; returns the message's size.
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode(cuda::device& dev, tensor_view<T> in, state& s, cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        cd::require_device(in, who);
        cd::check_state_size(who, s.count, in.size());
        const cd::device_floats v(dev, in);
        const std::uint64_t count = select(dev, v.data(), in.size(), s, "the bucket");
        return write(dev, v.data(), in.size(), count, dtype_of<std::remove_const_t<T>>(), s, out);
    }

    /// Encodes v = g + r_in; r_out = v with the sent elements reduced by +-tau.
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
        const std::uint64_t count = select(dev, r_out.data(), n, s, "the bucket plus its residual");
        const std::size_t size = write(dev, r_out.data(), n, count, dtype_of<std::remove_const_t<T>>(), s, out);
        if (count != 0) {
            sp::threshold_residual_kernel<<<cuda::detail::grid_blocks(count), cuda::detail::block_threads, 0,
                                            dev.stream()>>>(r_out.data(), s.select.selected.data(), count,
                                                            codec_.options().tau);
            sp::check_launch("hitch::cuda::compress threshold_residual_kernel");
        }
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

    /// The host codec's blob (the bucket size only).
    void save_state(cuda::device& /*dev*/, const state& s, std::vector<std::byte>& blob) const {
        codec_.save_state(codec_.make_state(s.count), blob);
    }
    void load_state(cuda::device& /*dev*/, std::span<const std::byte> blob, state& s) const {
        threshold::state host = codec_.make_state(s.count);
        codec_.load_state(blob, host);
    }

private:
    std::uint64_t select(cuda::device& dev, const float* v, std::size_t n, state& s, std::string_view what) const {
        namespace sp = cuda::compress::detail::sparse;
        const sp::selection_result r =
            sp::select_at_least(dev, s.select, v, n, sp::magnitude_bits(codec_.options().tau), s.room);
        if (!r.finite) hitch::compress::detail::throw_non_finite(who, what);
        s.room = std::max<std::uint64_t>(s.room, r.count);
        return r.count;
    }

    std::size_t write(cuda::device& dev, const float* v, std::size_t n, std::uint64_t count, dtype type, state& s,
                      cuda::compress::device_message& out) const {
        namespace sp = cuda::compress::detail::sparse;
        const sp::signed_gap_codes codes{s.select.selected.data(), v};
        const std::uint64_t varints = sp::plan_varints(dev, s.select, s.offsets, codes, count);
        const std::size_t payload = sp::threshold_layout::fixed_bytes + static_cast<std::size_t>(varints);
        cuda::compress::message_writer w(dev, out, threshold::codec_id, type, n, payload);
        auto* p = reinterpret_cast<unsigned char*>(w.payload());
        sp::write_threshold_head_kernel<<<1, 1, 0, dev.stream()>>>(p, count, codec_.options().tau);
        sp::check_launch("hitch::cuda::compress write_threshold_head_kernel");
        sp::write_varints(dev, p + sp::threshold_layout::fixed_bytes, s.offsets.data(), codes, count);
        return w.finish();
    }

    template <bool Add, class T>
    void decode_any(cuda::device& dev, tensor_view<const std::byte> message, tensor_view<T> out) const {
        namespace cd = cuda::compress::detail;
        namespace sp = cuda::compress::detail::sparse;
        cd::require_device(out, who);
        const cuda::compress::device_message_view m = cuda::compress::open(dev, message, {who, threshold::codec_id});
        cuda::compress::expect_count(m, out.size(), who);
        const std::size_t n = out.size();
        cuda::compress::payload_reader r(dev, m, who);
        const std::uint64_t count = r.count("sent count", n);
        const auto tau = r.get<float>("tau");
        if (!(tau > 0.0f) || !std::isfinite(tau))
            r.fail(hitch::detail::concat("tau ", tau, " is not positive and finite"));
        const auto rest = r.rest();
        if (count > rest.size())
            r.fail(hitch::detail::concat("truncated: ", count, " indices in ", rest.size(), " bytes"));
        // Every entry checked before anything is written.
        sp::read_workspace rw;
        const sp::corrupt_code code = sp::read_varints<true>(
            dev, rw, reinterpret_cast<const unsigned char*>(rest.data()), rest.size(), count, n, nullptr);
        if (code != sp::corrupt_none) sp::throw_corrupt(who, code, n);
        cd::decode_through_floats<Add>(dev, out, [&](auto add, float* p) {
            if constexpr (!decltype(add)::value)
                if (n != 0) sp::check(cudaMemsetAsync(p, 0, n * sizeof(float), dev.stream()), "cudaMemsetAsync");
            if (count != 0) {
                sp::scatter_signs_kernel<<<cuda::detail::grid_blocks(count), cuda::detail::block_threads, 0,
                                           dev.stream()>>>(p, rw.steps.data(), rw.negative.data(), count, tau);
                sp::check_launch("hitch::cuda::compress scatter_signs_kernel");
            }
        });
    }

    threshold codec_{};
};

}  // namespace hitch::compress
