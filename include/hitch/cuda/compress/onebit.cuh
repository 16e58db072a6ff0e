#pragma once
// compress::onebit on the GPU: hitch::compress::device_codec<onebit, cuda::device>. The message and the residual are
// the host codec's, bit for bit (onebit.hpp holds the shared arithmetic):
//
//   signs    a half-warp per 512-element sign block: lane L sums the block's elements L, L + 16, ... in double in
//            that order (the host's lanes), the signs are gathered with warp ballots, the lanes folded in lane order
//   sums     one thread per run of block sums (a group's blocks; 128 blocks when the bucket is one group), then one
//            thread per group adds its runs and writes the two means
//   residual with error feedback, r_out = v - D(message) in a last element-wise pass
//
// and the payload is checksummed by detail/wire.cuh's tiles. nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/onebit.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/cuda/compress/cast.hpp"
#include "hitch/cuda/compress/codec.cuh"
#include "hitch/cuda/compress/detail/wire.cuh"
#include "hitch/cuda/compress/onebit.hpp"
#include "hitch/cuda/device.hpp"

namespace hitch::cuda::compress::detail {

/// A little-endian float at any alignment.
__device__ __forceinline__ float load_f32(const unsigned char* p) {
    const std::uint32_t w = static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                            static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
    return hd::from_bits(w);
}
__device__ __forceinline__ void store_f32(unsigned char* p, float v) {
    const std::uint32_t w = hd::bits(v);
    for (int k = 0; k < 4; ++k) p[k] = static_cast<unsigned char>(w >> (8 * k));
}

/// Sign bits and block sums: half-warp h of warp w takes sign block 2 w + h (grid-stride over block pairs).
template <bool EF>
__global__ void onebit_sign_kernel(const float* g, const float* r, onebit_plan plan, unsigned char* bits,
                                   sign_sums* partials) {
    const unsigned lane = threadIdx.x % 32, half = lane / 16, l = lane % 16;
    const std::size_t warps = static_cast<std::size_t>(gridDim.x) * (blockDim.x / 32);
    const std::size_t pairs = (plan.blocks + 1) / 2;
    for (std::size_t pair = cuda::detail::grid_index() / 32; pair < pairs; pair += warps) {
        const std::size_t b = 2 * pair + half;
        const bool live = b < plan.blocks;
        const std::size_t start = live ? plan.start_of(b) : 0, len = live ? plan.length_of(b) : 0;
        sign_lane sums;
        std::uint32_t words[2] = {0, 0};
        for (unsigned m = 0; m < onebit_block / onebit_lanes; ++m) {
            const std::size_t o = l + onebit_lanes * m;
            bool negative = false;
            if (o < len) {
                float v = g[start + o];
                if constexpr (EF) v = hd::add(v, r[start + o]);
                negative = sign_add(sums, v);
            }
            const std::uint32_t ballot = __ballot_sync(0xffffffffu, negative);
            if (l == m % onebit_lanes) words[m / onebit_lanes] = (ballot >> (16 * half)) & 0xffffu;
        }
        // Lane l holds the sign words of elements [16 m, 16 m + 16) for m = l and l + 16: two bytes each.
        const std::size_t valid_bytes = (len + 7) / 8;
        for (unsigned k = 0; k < 2; ++k) {
            const std::size_t at = 2 * (l + onebit_lanes * k);
            if (at < valid_bytes) bits[start / 8 + at] = static_cast<unsigned char>(words[k]);
            if (at + 1 < valid_bytes) bits[start / 8 + at + 1] = static_cast<unsigned char>(words[k] >> 8);
        }
        unsigned negatives = static_cast<unsigned>(__popc(words[0]) + __popc(words[1]));
        for (unsigned offset = onebit_lanes / 2; offset >= 1; offset /= 2)
            negatives += __shfl_xor_sync(0xffffffffu, negatives, offset, onebit_lanes);
        // The lanes folded in lane order (sign_pass's finish_block).
        sign_sums block;
        for (unsigned j = 0; j < onebit_lanes; ++j) {
            const double p = __shfl_sync(0xffffffffu, sums.positive, j, onebit_lanes);
            const double q = __shfl_sync(0xffffffffu, sums.negative, j, onebit_lanes);
            block.positive = hd::add(block.positive, p);
            block.negative = hd::add(block.negative, q);
        }
        block.negatives = negatives;
        if (live && l == 0) partials[b] = block;
    }
}

/// runs[k] = the sum of blocks [k run, (k + 1) run) in order.
static __global__ void onebit_runs_kernel(const sign_sums* partials, onebit_plan plan, sign_sums* runs) {
    const std::size_t count = (plan.blocks + plan.run - 1) / plan.run;
    for (std::size_t k = cuda::detail::grid_index(); k < count; k += cuda::detail::grid_stride()) {
        sign_sums total;
        const std::size_t end = (k + 1) * plan.run < plan.blocks ? (k + 1) * plan.run : plan.blocks;
        for (std::size_t b = k * plan.run; b < end; ++b) sign_accumulate(total, partials[b]);
        runs[k] = total;
    }
}

/// Each group's two means from its runs (in order), into the payload and `values`; *bad for a non-finite group.
static __global__ void onebit_pairs_kernel(const sign_sums* runs, onebit_plan plan, unsigned char* pairs,
                                           onebit_pair* values, std::uint32_t* bad) {
    for (std::size_t k = cuda::detail::grid_index(); k < plan.groups; k += cuda::detail::grid_stride()) {
        sign_sums total;
        for (std::size_t j = 0; j < plan.runs; ++j) sign_accumulate(total, runs[k * plan.runs + j]);
        const std::size_t begin = k * plan.size, len = plan.n - begin < plan.size ? plan.n - begin : plan.size;
        if (!onebit_finite(total)) atomicOr(bad, 1u);
        const onebit_pair p = onebit_values(total, len);
        store_f32(pairs + 8 * k, p.a);
        store_f32(pairs + 8 * k + 4, p.b);
        values[k] = p;
    }
}

static __global__ void onebit_residual_kernel(const float* g, const float* r_in, float* r_out, onebit_plan plan,
                                              const onebit_pair* values) {
    for (std::size_t i = cuda::detail::grid_index(); i < plan.n; i += cuda::detail::grid_stride())
        r_out[i] = onebit_residual(g[i], r_in[i], values[i / plan.size]);
}

/// The first group whose values the decoder refuses (atomicMin into *first).
static __global__ void onebit_check_kernel(const unsigned char* pairs, std::size_t groups, unsigned long long* first) {
    for (std::size_t k = cuda::detail::grid_index(); k < groups; k += cuda::detail::grid_stride())
        if (onebit_pair_invalid(load_f32(pairs + 8 * k), load_f32(pairs + 8 * k + 4)))
            atomicMin(first, static_cast<unsigned long long>(k));
}

template <bool Add, class T>
__global__ void onebit_decode_kernel(const unsigned char* pairs, const unsigned char* bits, std::size_t n,
                                     std::size_t size, storage_t<T>* out) {
    for (std::size_t i = cuda::detail::grid_index(); i < n; i += cuda::detail::grid_stride()) {
        const std::size_t k = i / size;
        const bool negative = (bits[i / 8] >> (i % 8)) & 1u;
        out[i] = store_float<Add, T>(out[i], load_f32(pairs + 8 * k + (negative ? 4 : 0)));
    }
}

}  // namespace hitch::cuda::compress::detail

namespace hitch::compress {

/// compress::onebit for device buckets (see cuda/compress/onebit.cuh): encode, encode_ef, decode, decode_add,
/// save_state / load_state.
template <>
class device_codec<onebit, cuda::device> {
public:
    using codec_type = onebit;
    using state = empty_state;
    static constexpr std::string_view who = onebit::who;

    device_codec() = default;
    explicit device_codec(const onebit& codec) : codec_(codec) {}
    [[nodiscard]] const onebit& codec() const noexcept { return codec_; }

    [[nodiscard]] state make_state(cuda::device&, std::size_t n) const { return {n}; }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept { return codec_.max_message_bytes(n); }

    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode(cuda::device& dev, tensor_view<T> in, state& s, cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        cd::require_device(in, who);
        cd::check_state_size(who, s.count, in.size());
        const cd::device_floats g(dev, in);
        return encode_impl<false>(dev, g.data(), nullptr, nullptr, in.size(), dtype_of<std::remove_const_t<T>>(), out);
    }

    /// Encodes v = g + r_in; r_out = v - D(message) (device floats).
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode_ef(cuda::device& dev, tensor_view<T> g, tensor_view<const float> r_in, tensor_view<float> r_out,
                          state& s, cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        cd::require_device(g, who);
        cd::check_state_size(who, s.count, g.size());
        cd::check_residuals(who, r_in, r_out, g.size());
        const cd::device_floats v(dev, g);
        return encode_impl<true>(dev, v.data(), r_in.data(), r_out.data(), g.size(), dtype_of<std::remove_const_t<T>>(),
                                 out);
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

    void save_state(cuda::device&, const state& s, std::vector<std::byte>& blob) const { codec_.save_state(s, blob); }
    void load_state(cuda::device&, std::span<const std::byte> blob, state& s) const { codec_.load_state(blob, s); }

private:
    template <bool EF>
    std::size_t encode_impl(cuda::device& dev, const float* g, const float* r_in, float* r_out, std::size_t n,
                            dtype type, cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        const cd::onebit_plan plan = cd::make_onebit_plan(n, codec_.options().group_size);
        const std::size_t payload = 8 + 8 * plan.groups + (n + 7) / 8;
        cuda::compress::message_writer w(dev, out, onebit::codec_id, type, n, payload);
        std::array<std::byte, 8> field{};
        wire::store_le<std::uint64_t>(field.data(), plan.group_field(codec_.options().group_size));
        cd::store_small(dev, w.payload(), field);
        cd::device_flag bad(dev);
        if (n != 0) {
            auto* pairs = reinterpret_cast<unsigned char*>(w.payload()) + 8;
            unsigned char* bits = pairs + 8 * plan.groups;
            const std::size_t run_count = (plan.blocks + plan.run - 1) / plan.run;
            cd::device_scratch<cd::sign_sums> partials(dev, plan.blocks), runs(dev, run_count);
            cd::device_scratch<cd::onebit_pair> values(dev, plan.groups);
            cd::activate(dev);
            const std::size_t pair_count = (plan.blocks + 1) / 2;
            cd::onebit_sign_kernel<EF>
                <<<cuda::detail::grid_blocks(pair_count * 32), cuda::detail::block_threads, 0, dev.stream()>>>(
                    g, r_in, plan, bits, partials.data());
            cuda::detail::check_launch("hitch::cuda::compress onebit_sign_kernel");
            cd::onebit_runs_kernel<<<cuda::detail::grid_blocks(run_count, 128), 128, 0, dev.stream()>>>(
                partials.data(), plan, runs.data());
            cuda::detail::check_launch("hitch::cuda::compress onebit_runs_kernel");
            cd::onebit_pairs_kernel<<<cuda::detail::grid_blocks(plan.groups, 128), 128, 0, dev.stream()>>>(
                runs.data(), plan, pairs, values.data(), bad.data());
            cuda::detail::check_launch("hitch::cuda::compress onebit_pairs_kernel");
            if constexpr (EF) {
                cd::onebit_residual_kernel<<<cuda::detail::grid_blocks(n), cuda::detail::block_threads, 0,
                                             dev.stream()>>>(g, r_in, r_out, plan, values.data());
                cuda::detail::check_launch("hitch::cuda::compress onebit_residual_kernel");
            }
        }
        const std::size_t size = w.finish();
        if (bad.read() != 0) detail::throw_non_finite(who, EF ? "the bucket plus its residual" : "the bucket");
        return size;
    }

    template <bool Add, class T>
    void decode_any(cuda::device& dev, tensor_view<const std::byte> bytes, tensor_view<T> out) const {
        namespace cd = cuda::compress::detail;
        cd::require_device(out, who);
        const cuda::compress::device_message_view m = cuda::compress::open(dev, bytes, {who, onebit::codec_id});
        cuda::compress::expect_count(m, out.size(), who);
        const std::size_t n = out.size();
        cuda::compress::payload_reader r(dev, m, who);
        const auto group = r.get<std::uint64_t>("group size");
        if (group % 8 != 0) r.fail(hitch::detail::concat("group size ", group, " is not a multiple of 8"));
        const std::size_t g_count = n == 0 ? 0 : (group == 0 || group >= n ? 1 : detail::ceil_div(n, group));
        const auto pairs = r.take(8 * static_cast<std::uint64_t>(g_count), "reconstruction values");
        const auto bits = r.take(detail::ceil_div(n, 8), "sign bits");
        r.expect_end();
        if (g_count != 0) {
            cd::device_scratch<unsigned long long> first(dev, 1);
            constexpr unsigned long long none_bad = std::numeric_limits<unsigned long long>::max();
            cd::store_small(dev, reinterpret_cast<std::byte*>(first.data()),
                            std::span<const std::byte>(reinterpret_cast<const std::byte*>(&none_bad), 8));
            cd::activate(dev);
            cd::onebit_check_kernel<<<cuda::detail::grid_blocks(g_count), cuda::detail::block_threads, 0,
                                      dev.stream()>>>(reinterpret_cast<const unsigned char*>(pairs.data()), g_count,
                                                      first.data());
            cuda::detail::check_launch("hitch::cuda::compress onebit_check_kernel");
            const unsigned long long k = cd::read_back(dev, first.data());
            if (k != none_bad) {
                const std::vector<std::byte> pair = r.copy(pairs.subspan(8 * k, 8));
                const float a = wire::load_le<float>(pair.data()), b = wire::load_le<float>(pair.data() + 4);
                r.fail(hitch::detail::concat("reconstruction values (", a, ", ", b, ") of group ", k,
                                             " are not a non-negative and a non-positive finite mean"));
            }
        }
        if (n % 8 != 0) {
            const std::vector<std::byte> last = r.copy(bits.subspan(n / 8, 1));
            if ((static_cast<unsigned>(last[0]) >> (n % 8)) != 0) r.fail("padding bits are not zero");
        }
        if (n == 0) return;
        const std::size_t size = group == 0 || group >= n ? n : static_cast<std::size_t>(group);
        cd::activate(dev);
        cd::onebit_decode_kernel<Add, T>
            <<<cuda::detail::grid_blocks(n), cuda::detail::block_threads, 0, dev.stream()>>>(
                reinterpret_cast<const unsigned char*>(pairs.data()),
                reinterpret_cast<const unsigned char*>(bits.data()), n, size, cd::storage_of(out));
        cuda::detail::check_launch("hitch::cuda::compress onebit_decode_kernel");
    }

    onebit codec_{};
};

}  // namespace hitch::compress
