#pragma once
// compress::dgc on the GPU: hitch::compress::device_codec<compress::dgc, cuda::device>. Deep Gradient Compression
// (Lin, Han, Mao, Wang and Dally 2018) with its state in CUDA memory, step for step the host codec's:
//
//   local gradient clipping   g <- g min(1, (c / sqrt(N)) / ||g||_2)   (||g||^2 summed in compress::dgc's fixed
//                                                                       order: one thread per lane of a block, one
//                                                                       thread block per group of blocks)
//   momentum correction       u <- m u + g;  v <- v + u                (Nesterov: u <- m (u + g); v <- v + u + g)
//   sparsification            the k largest |v| (k from the warm-up schedule) by the sampled threshold, exactly the
//                             host's set (ties to the lowest indices)
//   momentum factor masking   u <- 0 and v <- 0 where sent
//
// The new u and v are written beside the old ones and swapped in only when the encode succeeds, so a refused bucket
// (non_finite_error) changes nothing and undo() can take an encode back, as on the host. The message is the host
// codec's byte for byte, and the state blob too.
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/dgc.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/compress/dgc.hpp"
#include "hitch/compress/tuning.hpp"
#include "hitch/cuda/compress/codec.cuh"
#include "hitch/cuda/compress/detail/sparse.cuh"
#include "hitch/cuda/compress/topk.cuh"
#include "hitch/device/buffer.hpp"

namespace hitch::cuda::compress::detail::sparse {

inline constexpr unsigned dgc_norm_threads = 8 * static_cast<unsigned>(hitch::compress::tuning::dgc_norm_group);
static_assert(dgc_norm_threads <= 1024, "one thread block per group of DGC's norm: at most 128 blocks a group");

/// What the norm pass leaves on the device.
struct dgc_scalars {
    double norm2 = 0.0;
    float scale = 1.0f;
    std::uint32_t non_finite = 0;
};

/// One thread block per group of blocks, one thread per lane of a block: the lanes' sums, each block's lanes folded,
/// the group's blocks added in order (compress::detail::dgc_squared_norm's order).
static __global__ void __launch_bounds__(dgc_norm_threads)
    dgc_norm_groups_kernel(const float* g, std::uint64_t n, double* group_sums) {
    constexpr std::uint64_t block = hitch::compress::tuning::dgc_norm_block;
    constexpr unsigned blocks = static_cast<unsigned>(hitch::compress::tuning::dgc_norm_group);
    __shared__ double lanes[dgc_norm_threads];
    __shared__ double block_sums[blocks];
    const unsigned b = threadIdx.x / 8, lane = threadIdx.x % 8;
    const std::uint64_t group0 = static_cast<std::uint64_t>(blockIdx.x) * block * blocks;
    const std::uint64_t b0 = group0 + b * block;
    lanes[threadIdx.x] = b0 < n ? dgc_lane_sum(g, n, b0, block, lane) : 0.0;
    __syncthreads();
    if (lane == 0) block_sums[b] = dgc_fold_lanes(&lanes[threadIdx.x]);
    __syncthreads();
    if (threadIdx.x == 0) {
        double sum = 0.0;
        for (unsigned k = 0; k < blocks && group0 + k * block < n; ++k) sum = hd::add(sum, block_sums[k]);
        group_sums[blockIdx.x] = sum;
    }
}

/// The groups added in order; the clipping factor; a non-finite norm (NaN or an infinity in g) noted.
static __global__ void dgc_scale_kernel(const double* group_sums, std::uint64_t groups, double limit, bool clip,
                                        dgc_scalars* out) {
    double total = 0.0;
    for (std::uint64_t k = 0; k < groups; ++k) total = hd::add(total, group_sums[k]);
    out->norm2 = total;
    out->non_finite = total <= 1.7976931348623157e308 ? 0u : 1u;
    out->scale = dgc_scale(total, limit, clip);
}

static __global__ void dgc_momentum_kernel(const float* g, std::uint64_t n, const dgc_scalars* scalars, float m,
                                           bool nesterov, const float* u0, const float* v0, float* u, float* v) {
    const float scale = scalars->scale;
    for (std::uint64_t i = grid_index(); i < n; i += grid_stride())
        dgc_momentum(g[i], scale, m, nesterov, u0[i], v0[i], u[i], v[i]);
}

/// Momentum factor masking: u and v are 0 where sent.
static __global__ void dgc_mask_kernel(float* u, float* v, const std::uint64_t* index, std::uint64_t k) {
    for (std::uint64_t j = grid_index(); j < k; j += grid_stride()) {
        u[index[j]] = 0.0f;
        v[index[j]] = 0.0f;
    }
}

}  // namespace hitch::cuda::compress::detail::sparse

namespace hitch::compress {

/// compress::dgc for buckets in CUDA memory, its momentum and velocity on the device.
template <>
class device_codec<dgc, cuda::device> {
public:
    using codec_type = dgc;
    static constexpr std::string_view who = dgc::who;

    struct state {
        std::size_t count = 0;
        std::uint64_t step = 0;
        device_buffer<float, cuda::device> u, v;              // momentum and accumulated velocity
        device_buffer<float, cuda::device> u_other, v_other;  // the previous u and v after an encode (for undo)
        cuda::compress::detail::sparse::scratch<double> group_sums;
        cuda::compress::detail::sparse::scratch<cuda::compress::detail::sparse::dgc_scalars> scalars;
        cuda::compress::detail::sparse::select_workspace select;
        cuda::compress::detail::sparse::scratch<std::uint64_t> offsets;
    };

    device_codec() = default;
    explicit device_codec(const dgc& codec) : codec_(codec) {}
    [[nodiscard]] const dgc& codec() const noexcept { return codec_; }
    [[nodiscard]] const dgc::options_type& options() const noexcept { return codec_.options(); }

    /// u and v start at zero (device_buffer zero-initialises).
    [[nodiscard]] state make_state(cuda::device& dev, std::size_t n) const {
        state s;
        s.count = n;
        s.u = device_buffer<float, cuda::device>(dev, n);
        s.v = device_buffer<float, cuda::device>(dev, n);
        s.u_other = device_buffer<float, cuda::device>(dev, n);
        s.v_other = device_buffer<float, cuda::device>(dev, n);
        return s;
    }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept { return codec_.max_message_bytes(n); }
    [[nodiscard]] double density(std::uint64_t step) const noexcept { return codec_.density(step); }

    /// Encodes the bucket `in` (any floating type, as floats) into `out`; returns the message's size.
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode(cuda::device& dev, tensor_view<T> in, state& s, cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        namespace sp = cuda::compress::detail::sparse;
        namespace tuning = hitch::compress::tuning;
        const std::size_t n = in.size();
        cd::require_device(in, who);
        cd::check_state_size(who, s.count, n);
        if (s.u.size() != n || s.v.size() != n || s.u_other.size() != n || s.v_other.size() != n)
            throw config_error(hitch::detail::concat(who, ": the state's vectors do not match the bucket of ", n));
        const cd::device_floats g(dev, in);
        const auto& o = codec_.options();
        sp::activate(dev);
        const cudaStream_t stream = dev.stream();
        // The norm (it also finds NaN and infinities in g), then u and v beside the old ones.
        constexpr std::uint64_t group = tuning::dgc_norm_block * tuning::dgc_norm_group;
        const std::uint64_t groups = (n + group - 1) / group;
        double* sums = s.group_sums.reserve(dev, static_cast<std::size_t>(std::max<std::uint64_t>(groups, 1)));
        sp::dgc_scalars* scalars = s.scalars.reserve(dev, 1);
        if (groups != 0) {
            sp::dgc_norm_groups_kernel<<<static_cast<unsigned>(groups), sp::dgc_norm_threads, 0, stream>>>(g.data(), n,
                                                                                                           sums);
            sp::check_launch("hitch::cuda::compress dgc_norm_groups_kernel");
        }
        const double limit = o.clip_norm / std::sqrt(static_cast<double>(o.ranks));
        sp::dgc_scale_kernel<<<1, 1, 0, stream>>>(sums, groups, limit, o.clip_norm > 0.0, scalars);
        sp::check_launch("hitch::cuda::compress dgc_scale_kernel");
        if (n != 0) {
            sp::dgc_momentum_kernel<<<cuda::detail::grid_blocks(n), cuda::detail::block_threads, 0, stream>>>(
                g.data(), n, scalars, static_cast<float>(o.momentum), o.nesterov, s.u.data(), s.v.data(),
                s.u_other.data(), s.v_other.data());
            sp::check_launch("hitch::cuda::compress dgc_momentum_kernel");
        }
        const std::size_t k = hitch::compress::detail::selected_count(n, codec_.density(s.step));
        const hitch::compress::detail::sampling how{o.sample_fraction, o.min_sample, tuning::topk_sample_attempts};
        const sp::selection_result r =
            sp::select_topk(dev, s.select, s.v_other.data(), n, k, true, sp::draw_key(o.seed, 0, s.step), how);
        if (sp::read_back(dev, scalars).non_finite != 0) hitch::compress::detail::throw_non_finite(who);
        if (!r.finite) hitch::compress::detail::throw_non_finite(who, "the accumulated velocity");
        const std::size_t size = sp::write_sparse_message(dev, s.select, s.offsets, s.v_other.data(), n, k,
                                                          dgc::codec_id, dtype_of<std::remove_const_t<T>>(), out);
        if (k != 0) {
            sp::dgc_mask_kernel<<<cuda::detail::grid_blocks(k), cuda::detail::block_threads, 0, stream>>>(
                s.u_other.data(), s.v_other.data(), s.select.selected.data(), k);
            sp::check_launch("hitch::cuda::compress dgc_mask_kernel");
        }
        std::swap(s.u, s.u_other);
        std::swap(s.v, s.v_other);
        ++s.step;
        return size;
    }

    /// Takes back the last encode: the previous momentum and velocity are swapped back in.
    void undo(state& s) const noexcept {
        std::swap(s.u, s.u_other);
        std::swap(s.v, s.v_other);
        if (s.step > 0) --s.step;
    }

    template <class T>
        requires floating_element<T>
    void decode(cuda::device& dev, tensor_view<const std::byte> message, tensor_view<T> out) const {
        cuda::compress::detail::sparse::decode_sparse_message<false>(dev, message, out, who, dgc::codec_id);
    }
    template <class T>
        requires floating_element<T>
    void decode_add(cuda::device& dev, tensor_view<const std::byte> message, tensor_view<T> acc) const {
        cuda::compress::detail::sparse::decode_sparse_message<true>(dev, message, acc, who, dgc::codec_id);
    }

    /// The host codec's blob: u64 step | n floats u | n floats v.
    void save_state(cuda::device& dev, const state& s, std::vector<std::byte>& blob) const {
        dgc::state host;
        host.count = s.count;
        host.step = s.step;
        host.u.resize(s.count);
        host.v.resize(s.count);
        dev.copy_to_host(host.u.data(), s.u.data(), s.count * sizeof(float));
        dev.copy_to_host(host.v.data(), s.v.data(), s.count * sizeof(float));
        codec_.save_state(host, blob);
    }
    void load_state(cuda::device& dev, std::span<const std::byte> blob, state& s) const {
        dgc::state host = codec_.make_state(s.count);
        codec_.load_state(blob, host);  // every check on the host before the device state changes
        if (s.u.size() != s.count) s = make_state(dev, s.count);
        dev.copy_from_host(s.u.data(), host.u.data(), s.count * sizeof(float));
        dev.copy_from_host(s.v.data(), host.v.data(), s.count * sizeof(float));
        if (s.count != 0) {
            dev.fill_zero(s.u_other.data(), s.count * sizeof(float));
            dev.fill_zero(s.v_other.data(), s.count * sizeof(float));
        }
        s.step = host.step;
    }

private:
    dgc codec_{};
};

}  // namespace hitch::compress
