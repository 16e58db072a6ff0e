#pragma once
// compress::terngrad on the GPU: hitch::compress::device_codec<terngrad, cuda::device>. The message and the residual
// are the host codec's, bit for bit.
//
//   one pass  (no clipping, no residual) the host quantises each 4096-element block against the running maximum of
//             its 65536-element segment and thins the codes once the bucket's maximum is known. The GPU computes the
//             same thing in another order: the blocks' maxima (a CUB block reduction each), the running maxima (one
//             thread per segment), the bucket's maximum (a CUB device reduction), then one thread per 16 elements
//             quantises, thins with the host's draws and packs, reading the floats a second time.
//   two pass  (clipping or error feedback) the bucket's reductions in the host's order (quantize.cuh), the scale and
//             the clipping bound from them (quantize.hpp's terngrad_setup), then the same per-thread quantiser.
//
// The random counters stay on the host side of the state; the payload is checksummed by detail/wire.cuh's tiles.
// nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/terngrad.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_reduce.cuh>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/compress/terngrad.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/cuda/compress/cast.hpp"
#include "hitch/cuda/compress/codec.cuh"
#include "hitch/cuda/compress/detail/wire.cuh"
#include "hitch/cuda/compress/onebit.cuh"
#include "hitch/cuda/compress/quantize.cuh"
#include "hitch/cuda/compress/quantize.hpp"
#include "hitch/cuda/compress/random.hpp"
#include "hitch/cuda/device.hpp"

namespace hitch::cuda::compress::detail {

/// Elements per running-maximum step and per segment of terngrad's one-pass encode (terngrad.hpp's step_block and
/// segment), and elements per thread of its quantiser (4 bytes of 2-bit codes).
inline constexpr std::size_t terngrad_step = moment_block;
inline constexpr std::size_t terngrad_segment = rng_block;
inline constexpr unsigned terngrad_per_thread = 16;
/// The tag mixed into the seed of the thinning draws (terngrad.hpp's thinning_stream).
inline constexpr std::uint64_t terngrad_thinning_stream = 0x7417a1e5ull;

struct max_u32 {
    __host__ __device__ std::uint32_t operator()(std::uint32_t a, std::uint32_t b) const noexcept {
        return a < b ? b : a;
    }
};

/// tops[b] = the largest |g| of step block b, as float bits with the sign cleared (moments.hpp's max_abs_bits: bits
/// at or above infinity's mean a NaN or an infinity); one block per step block.
static __global__ void __launch_bounds__(256) terngrad_tops_kernel(const float* g, std::size_t n, std::uint32_t* tops) {
    using reduce = cub::BlockReduce<std::uint32_t, 256>;
    __shared__ typename reduce::TempStorage temp;
    const std::size_t blocks = (n + terngrad_step - 1) / terngrad_step;
    for (std::size_t b = blockIdx.x; b < blocks; b += gridDim.x) {
        const std::size_t start = b * terngrad_step, end = n - start < terngrad_step ? n : start + terngrad_step;
        std::uint32_t top = 0;
        for (std::size_t i = start + threadIdx.x; i < end; i += blockDim.x) {
            const std::uint32_t a = hd::bits(g[i]) & 0x7fffffffu;
            top = a > top ? a : top;
        }
        top = reduce(temp).Reduce(top, max_u32{});
        if (threadIdx.x == 0) tops[b] = top;
        __syncthreads();
    }
}

/// running[b] = the running maximum of step block b within its segment (one thread per segment); *bad for a NaN or
/// an infinity.
static __global__ void terngrad_running_kernel(const std::uint32_t* tops, std::size_t blocks, float* running,
                                               std::uint32_t* bad) {
    constexpr std::size_t per_segment = terngrad_segment / terngrad_step;
    const std::size_t segments = (blocks + per_segment - 1) / per_segment;
    for (std::size_t k = cuda::detail::grid_index(); k < segments; k += cuda::detail::grid_stride()) {
        float r = 0.0f;
        const std::size_t end = (k + 1) * per_segment < blocks ? (k + 1) * per_segment : blocks;
        for (std::size_t b = k * per_segment; b < end; ++b) {
            if (tops[b] >= 0x7f800000u) atomicOr(bad, 1u);
            const float max_abs = hd::from_bits(tops[b]);
            r = max_abs > r ? max_abs : r;
            running[b] = r;
        }
    }
}

/// The payload's front: the scale (from its bits) and four zero bytes.
static __global__ void terngrad_front_kernel(const std::uint32_t* scale_bits, unsigned char* payload) {
    const std::uint32_t w = threadIdx.x == 0 ? *scale_bits : 0u;
    if (threadIdx.x < 2)
        for (int k = 0; k < 4; ++k) payload[4 * threadIdx.x + k] = static_cast<unsigned char>(w >> (8 * k));
}

/// Stores the 2-bit codes of `count` elements packed in `word` at `out` (4 bytes; fewer for the bucket's end).
__device__ __forceinline__ void store_codes2(unsigned char* out, std::uint32_t word, unsigned count) {
    if (count == terngrad_per_thread && reinterpret_cast<std::uintptr_t>(out) % 4 == 0) {
        *reinterpret_cast<std::uint32_t*>(out) = word;
    } else {
        for (unsigned k = 0; k < (2 * count + 7) / 8; ++k) out[k] = static_cast<unsigned char>(word >> (8 * k));
    }
}

/// One-pass quantisation, thinning and packing: 16 elements per thread.
static __global__ void terngrad_one_pass_kernel(const float* g, std::size_t n, const float* running,
                                                const std::uint32_t* scale_bits, std::uint64_t key,
                                                std::uint64_t thin_key, unsigned char* codes) {
    const counter_rng base(key), thin_base(thin_key);
    const float scale = hd::from_bits(*scale_bits);
    const std::size_t runs = (n + terngrad_per_thread - 1) / terngrad_per_thread;
    for (std::size_t t = cuda::detail::grid_index(); t < runs; t += cuda::detail::grid_stride()) {
        const std::size_t first = terngrad_per_thread * t;
        const unsigned count = n - first < terngrad_per_thread ? static_cast<unsigned>(n - first) : terngrad_per_thread;
        const float r = running[first / terngrad_step];
        const quantizer q = terngrad_running(r);
        const bool thinned = scale > 0.0f && r != scale;
        const std::uint32_t threshold = thinned ? terngrad_threshold(r, scale) : 0u;
        std::uint32_t c[terngrad_per_thread] = {};
        quantize_run<false, false>(g, nullptr, nullptr, first, count, q, base, c);
        if (thinned) thin_run(c, first, count, thin_base, threshold);
        std::uint32_t word = 0;
        for (unsigned j = 0; j < count; ++j) word |= c[j] << (2 * j);
        store_codes2(codes + 4 * t, word, count);
    }
}

/// Two-pass setup: the bucket's scale and quantiser from its reductions, the scale into the payload.
static __global__ void terngrad_setup_kernel(const moments* total, std::size_t n, double clip_sigmas,
                                             unsigned char* payload, quantizer* q, std::uint32_t* bad) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const moments m = *total;
    if (m.bad != 0 || !finite(m.sum_squares) || !finite(m.sum)) atomicOr(bad, 1u);
    const terngrad_scalars t = terngrad_setup(m, n, clip_sigmas);
    store_f32(payload, t.scale);
    store_f32(payload + 4, 0.0f);
    *q = t.q;
}

template <bool EF, bool Clip>
__global__ void terngrad_two_pass_kernel(const float* g, const float* r_in, float* r_out, std::size_t n,
                                         const quantizer* quant, std::uint64_t key, unsigned char* codes) {
    const counter_rng base(key);
    const quantizer q = *quant;
    const std::size_t runs = (n + terngrad_per_thread - 1) / terngrad_per_thread;
    for (std::size_t t = cuda::detail::grid_index(); t < runs; t += cuda::detail::grid_stride()) {
        const std::size_t first = terngrad_per_thread * t;
        const unsigned count = n - first < terngrad_per_thread ? static_cast<unsigned>(n - first) : terngrad_per_thread;
        std::uint32_t c[terngrad_per_thread] = {};
        quantize_run<EF, Clip>(g, r_in, r_out, first, count, q, base, c);
        std::uint32_t word = 0;
        for (unsigned j = 0; j < count; ++j) word |= c[j] << (2 * j);
        store_codes2(codes + 4 * t, word, count);
    }
}

/// The first byte holding a code 01 (atomicMin).
static __global__ void terngrad_check_kernel(const unsigned char* codes, std::size_t bytes, unsigned long long* first) {
    for (std::size_t j = cuda::detail::grid_index(); j < bytes; j += cuda::detail::grid_stride()) {
        const unsigned c = codes[j];
        if ((c & 0x55u & ~(c >> 1)) != 0) atomicMin(first, static_cast<unsigned long long>(j));
    }
}

template <bool Add, class T>
__global__ void terngrad_decode_kernel(const unsigned char* codes, std::size_t n, float scale, storage_t<T>* out) {
    for (std::size_t i = cuda::detail::grid_index(); i < n; i += cuda::detail::grid_stride()) {
        const std::uint32_t c = (codes[i / 4] >> (2 * (i % 4))) & 3u;
        out[i] = store_float<Add, T>(out[i], code_value(c, scale));
    }
}

}  // namespace hitch::cuda::compress::detail

namespace hitch::compress {

/// compress::terngrad for device buckets (see cuda/compress/terngrad.cuh): encode, encode_ef, decode, decode_add,
/// undo, save_state / load_state.
template <>
class device_codec<terngrad, cuda::device> {
public:
    using codec_type = terngrad;
    /// The counters (step, stream) key the random numbers; they live on the host and travel as the host's blob.
    struct state {
        std::size_t count = 0;
        std::uint64_t step = 0;
        std::uint64_t stream = 0;
    };
    static constexpr std::string_view who = terngrad::who;

    device_codec() = default;
    explicit device_codec(const terngrad& codec) : codec_(codec) {}
    [[nodiscard]] const terngrad& codec() const noexcept { return codec_; }

    [[nodiscard]] state make_state(cuda::device&, std::size_t n) const { return {n, 0, 0}; }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept { return codec_.max_message_bytes(n); }

    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode(cuda::device& dev, tensor_view<T> in, state& s, cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        cd::require_device(in, who);
        cd::check_state_size(who, s.count, in.size());
        const cd::device_floats g(dev, in);
        const dtype type = dtype_of<std::remove_const_t<T>>();
        if (codec_.options().clip_sigmas > 0.0)
            return two_pass<false, true>(dev, g.data(), nullptr, nullptr, in.size(), s, type, out);
        return one_pass(dev, g.data(), in.size(), s, type, out);
    }

    /// Encodes v = g + r_in; r_out = v - tern(v) (device floats).
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode_ef(cuda::device& dev, tensor_view<T> g, tensor_view<const float> r_in, tensor_view<float> r_out,
                          state& s, cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        cd::require_device(g, who);
        cd::check_state_size(who, s.count, g.size());
        cd::check_residuals(who, r_in, r_out, g.size());
        const cd::device_floats v(dev, g);
        const dtype type = dtype_of<std::remove_const_t<T>>();
        if (codec_.options().clip_sigmas > 0.0)
            return two_pass<true, true>(dev, v.data(), r_in.data(), r_out.data(), g.size(), s, type, out);
        return two_pass<true, false>(dev, v.data(), r_in.data(), r_out.data(), g.size(), s, type, out);
    }

    template <class T>
        requires floating_element<T>
    void decode(cuda::device& dev, tensor_view<const std::byte> bytes, tensor_view<T> out) const {
        decode_any<false>(dev, bytes, out);
    }
    template <class T>
        requires floating_element<T>
    void decode_add(cuda::device& dev, tensor_view<const std::byte> bytes, tensor_view<T> acc) const {
        decode_any<true>(dev, bytes, acc);
    }

    /// Takes back the last encode's step.
    void undo(state& s) const noexcept {
        if (s.step > 0) --s.step;
    }

    /// The host codec's blob (u64 step, u64 stream).
    void save_state(cuda::device&, const state& s, std::vector<std::byte>& blob) const {
        codec_.save_state(terngrad::state{s.count, s.step, s.stream}, blob);
    }
    void load_state(cuda::device&, std::span<const std::byte> blob, state& s) const {
        terngrad::state h = codec_.make_state(s.count);
        codec_.load_state(blob, h);
        s.step = h.step;
        s.stream = h.stream;
    }

private:
    std::size_t one_pass(cuda::device& dev, const float* g, std::size_t n, state& s, dtype type,
                         cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        const terngrad_options& o = codec_.options();
        cuda::compress::message_writer w(dev, out, terngrad::codec_id, type, n, 8 + cd::code_bytes(n, 2));
        auto* p = reinterpret_cast<unsigned char*>(w.payload());
        const std::size_t blocks = (n + cd::terngrad_step - 1) / cd::terngrad_step;
        cd::device_flag bad(dev);
        cd::device_scratch<std::uint32_t> tops(dev, blocks), scale(dev, 1);
        cd::device_scratch<float> running(dev, blocks);
        scale.zero();
        if (n != 0) {
            cd::activate(dev);
            cd::terngrad_tops_kernel<<<cd::tile_grid(blocks), 256, 0, dev.stream()>>>(g, n, tops.data());
            cuda::detail::check_launch("hitch::cuda::compress terngrad_tops_kernel");
            constexpr std::size_t per_segment = cd::terngrad_segment / cd::terngrad_step;
            cd::terngrad_running_kernel<<<cuda::detail::grid_blocks((blocks + per_segment - 1) / per_segment, 128), 128,
                                          0, dev.stream()>>>(tops.data(), blocks, running.data(), bad.data());
            cuda::detail::check_launch("hitch::cuda::compress terngrad_running_kernel");
            std::size_t temp = 0;
            cuda::detail::check(cub::DeviceReduce::Reduce(nullptr, temp, tops.data(), scale.data(), blocks,
                                                          cd::max_u32{}, std::uint32_t{0}, dev.stream()),
                                "cub::DeviceReduce::Reduce");
            cd::device_scratch<std::byte> storage(dev, temp);
            cuda::detail::check(cub::DeviceReduce::Reduce(storage.data(), temp, tops.data(), scale.data(), blocks,
                                                          cd::max_u32{}, std::uint32_t{0}, dev.stream()),
                                "cub::DeviceReduce::Reduce");
            const std::size_t runs = (n + cd::terngrad_per_thread - 1) / cd::terngrad_per_thread;
            cd::activate(dev);
            cd::terngrad_one_pass_kernel<<<cuda::detail::grid_blocks(runs), cuda::detail::block_threads, 0,
                                           dev.stream()>>>(
                g, n, running.data(), scale.data(), cd::draw_key(o.seed, s.stream, s.step),
                cd::draw_key(o.seed ^ cd::terngrad_thinning_stream, s.stream, s.step), p + 8);
            cuda::detail::check_launch("hitch::cuda::compress terngrad_one_pass_kernel");
        }
        cd::activate(dev);
        cd::terngrad_front_kernel<<<1, 32, 0, dev.stream()>>>(scale.data(), p);
        cuda::detail::check_launch("hitch::cuda::compress terngrad_front_kernel");
        const std::size_t size = w.finish();
        if (bad.read() != 0) detail::throw_non_finite(who, "the bucket");
        ++s.step;
        return size;
    }

    template <bool EF, bool Clip>
    std::size_t two_pass(cuda::device& dev, const float* g, const float* r_in, float* r_out, std::size_t n, state& s,
                         dtype type, cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        const terngrad_options& o = codec_.options();
        cuda::compress::message_writer w(dev, out, terngrad::codec_id, type, n, 8 + cd::code_bytes(n, 2));
        auto* p = reinterpret_cast<unsigned char*>(w.payload());
        const cd::moment_plan plan = cd::make_moment_plan(n, n);
        cd::device_flag bad(dev);
        cd::device_scratch<cd::moments> partials(dev, plan.blocks), total(dev, 1);
        cd::device_scratch<cd::quantizer> q(dev, 1);
        total.zero();  // an empty bucket's reductions
        cd::activate(dev);
        if (n != 0) {
            cd::launch_moments<EF, Clip, Clip, true>(dev.stream(), g, r_in, plan, partials.data());
            cd::moment_groups_kernel<<<1, 32, 0, dev.stream()>>>(partials.data(), plan, total.data());
            cuda::detail::check_launch("hitch::cuda::compress moment_groups_kernel");
        }
        cd::terngrad_setup_kernel<<<1, 32, 0, dev.stream()>>>(total.data(), n, Clip ? o.clip_sigmas : 0.0, p, q.data(),
                                                              bad.data());
        cuda::detail::check_launch("hitch::cuda::compress terngrad_setup_kernel");
        if (n != 0) {
            const std::size_t runs = (n + cd::terngrad_per_thread - 1) / cd::terngrad_per_thread;
            cd::terngrad_two_pass_kernel<EF, Clip>
                <<<cuda::detail::grid_blocks(runs), cuda::detail::block_threads, 0, dev.stream()>>>(
                    g, r_in, r_out, n, q.data(), cd::draw_key(o.seed, s.stream, s.step), p + 8);
            cuda::detail::check_launch("hitch::cuda::compress terngrad_two_pass_kernel");
        }
        const std::size_t size = w.finish();
        if (bad.read() != 0) detail::throw_non_finite(who, EF ? "the bucket plus its residual" : "the bucket");
        ++s.step;
        return size;
    }

    template <bool Add, class T>
    void decode_any(cuda::device& dev, tensor_view<const std::byte> bytes, tensor_view<T> out) const {
        namespace cd = cuda::compress::detail;
        cd::require_device(out, who);
        const cuda::compress::device_message_view m = cuda::compress::open(dev, bytes, {who, terngrad::codec_id});
        cuda::compress::expect_count(m, out.size(), who);
        const std::size_t n = out.size();
        cuda::compress::payload_reader r(dev, m, who);
        const auto scale = r.get<float>("scale");
        if (r.get<std::uint32_t>("padding") != 0) r.fail("padding bytes are not zero");
        if (!cd::finite(scale) || scale < 0.0f)
            r.fail(hitch::detail::concat("scale ", scale, " is not a finite non-negative number"));
        const auto codes = r.take(cd::code_bytes(n, 2), "codes");
        r.expect_end();
        const auto* c = reinterpret_cast<const unsigned char*>(codes.data());
        if (!codes.empty()) {
            constexpr unsigned long long none_bad = std::numeric_limits<unsigned long long>::max();
            cd::device_scratch<unsigned long long> first(dev, 1);
            cd::store_small(dev, reinterpret_cast<std::byte*>(first.data()),
                            std::span<const std::byte>(reinterpret_cast<const std::byte*>(&none_bad), 8));
            cd::activate(dev);
            cd::terngrad_check_kernel<<<cuda::detail::grid_blocks(codes.size()), cuda::detail::block_threads, 0,
                                        dev.stream()>>>(c, codes.size(), first.data());
            cuda::detail::check_launch("hitch::cuda::compress terngrad_check_kernel");
            const unsigned long long j = cd::read_back(dev, first.data());
            if (j != none_bad) r.fail(hitch::detail::concat("code 01 in byte ", j));
        }
        if (n % 4 != 0) {
            const std::vector<std::byte> last = r.copy(codes.last(1));
            if ((static_cast<unsigned>(last[0]) >> (2 * (n % 4))) != 0) r.fail("padding bits are not zero");
        }
        if (n == 0) return;
        cd::activate(dev);
        cd::terngrad_decode_kernel<Add, T>
            <<<cuda::detail::grid_blocks(n), cuda::detail::block_threads, 0, dev.stream()>>>(c, n, scale,
                                                                                             cd::storage_of(out));
        cuda::detail::check_launch("hitch::cuda::compress terngrad_decode_kernel");
    }

    terngrad codec_{};
};

}  // namespace hitch::compress
