#pragma once
// hitch::amp::device_amp<hitch::cuda::device>: the mixed-precision kernels for amp::loss_scaler and
// amp::mixed_precision_optimizer on a GPU, with the host loops' bits (hitch/cuda/amp/convert.hpp):
//   unscale     g32 = float(g_low) * (1/S) (or g = g * (1/S) in place), and whether any result is inf or NaN: each
//               block ORs its threads' flags (__syncthreads_or) and a block that saw one sets a flag in device
//               memory, which the host reads once
//   widen       w32 = float(w_low), g32 = float(g_low)
//   narrow      w_low = Low(w32), round to nearest even
//   first inf/NaN of the FP32 gradients (without loss scaling: the gradient guard's report), as the smallest index
//               per layer (atomicMin), read back once
// Each is one launch over every layer (the chunk table of hitch/cuda/optim/multi_tensor.hpp). nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/amp/mixed_precision.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "hitch/amp/device_amp.hpp"
#include "hitch/amp/mixed_precision.hpp"
#include "hitch/amp/nonfinite.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/cuda/amp/convert.hpp"
#include "hitch/cuda/detail/hd.hpp"
#include "hitch/cuda/detail/launch.cuh"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/optim/multi_tensor.hpp"
#include "hitch/device/buffer.hpp"

namespace hitch::cuda::amp::detail {

using hitch::cuda::optim::chunk_begin;
using hitch::cuda::optim::chunk_end;
using hitch::cuda::optim::chunk_entry;

/// Threads per block of the conversion kernels (one chunk of 4096 elements per block, 16 per thread).
inline constexpr unsigned convert_threads = 256;

/// One layer of a mixed-precision launch: its Low parameters and gradient (as 16-bit words) and its FP32 masters.
struct amp_entry {
    std::uint16_t* low_w = nullptr;
    const std::uint16_t* low_g = nullptr;
    float* w = nullptr;
    float* g = nullptr;
    std::uint64_t n = 0;
};

enum class conversion { widen_params, widen_grads, unscale_grads, narrow_params, unscale_in_place, find_nonfinite };

/// One kernel for every conversion (Op picks it at compile time): blocks take chunks in order.
template <bool IsHalf, conversion Op>
__global__ void __launch_bounds__(convert_threads)
    convert_kernel(const chunk_entry* chunks, std::uint64_t count, const amp_entry* rows, float inv, unsigned* any_bad,
                   unsigned long long* first_bad) {
    using low = low16<IsHalf>;
    for (std::uint64_t c = blockIdx.x; c < count; c += gridDim.x) {
        const chunk_entry e = chunks[c];
        const amp_entry& r = rows[e.tensor];
        const std::uint64_t end = chunk_end(r.n, e.index);
        bool bad = false;
        for (std::uint64_t i = chunk_begin(e.index) + threadIdx.x; i < end; i += blockDim.x) {
            if constexpr (Op == conversion::widen_params) {
                r.w[i] = low::to_float(r.low_w[i]);
            } else if constexpr (Op == conversion::widen_grads) {
                r.g[i] = low::to_float(r.low_g[i]);
            } else if constexpr (Op == conversion::unscale_grads) {
                const float x = unscale(low::to_float(r.low_g[i]), inv);
                r.g[i] = x;
                bad = bad || hd::non_finite(x);
            } else if constexpr (Op == conversion::narrow_params) {
                r.low_w[i] = low::from_float(r.w[i]);
            } else if constexpr (Op == conversion::unscale_in_place) {
                const float x = unscale(r.g[i], inv);
                r.g[i] = x;
                bad = bad || hd::non_finite(x);
            } else {
                if (hd::non_finite(r.g[i])) {
                    atomicMin(first_bad + e.tensor, static_cast<unsigned long long>(i));
                    break;  // the rest of this thread's elements come later
                }
            }
        }
        if constexpr (Op == conversion::unscale_grads || Op == conversion::unscale_in_place) {
            if (__syncthreads_or(bad ? 1 : 0) != 0 && threadIdx.x == 0) atomicOr(any_bad, 1u);
        }
    }
}

/// The tables of one set of layers in device memory, and the flag and per-layer words the checks report in.
class amp_tables {
public:
    amp_tables() = default;
    amp_tables(cuda::device& dev, const std::vector<amp_entry>& rows) : dev_(&dev), size_(rows.size()) {
        std::vector<std::size_t> sizes;
        sizes.reserve(rows.size());
        for (const amp_entry& r : rows) sizes.push_back(static_cast<std::size_t>(r.n));
        const hitch::cuda::optim::chunk_layout layout = hitch::cuda::optim::make_chunk_layout(sizes);
        count_ = layout.chunks.size();
        rows_ = device_buffer<amp_entry, cuda::device>(dev, rows.size());
        dev.copy_from_host(rows_.data(), rows.data(), rows.size() * sizeof(amp_entry));
        chunks_ = device_buffer<chunk_entry, cuda::device>(dev, layout.chunks.size());
        dev.copy_from_host(chunks_.data(), layout.chunks.data(), layout.chunks.size() * sizeof(chunk_entry));
        flag_ = device_buffer<unsigned, cuda::device>(dev, 1);
        first_ = device_buffer<unsigned long long, cuda::device>(dev, rows.size());
    }

    /// Runs conversion Op over every layer; for the unscales, returns whether any result is inf or NaN (waits for
    /// the GPU), else false.
    template <bool IsHalf, conversion Op>
    bool run(float inv = 1.0f) {
        constexpr bool flags = Op == conversion::unscale_grads || Op == conversion::unscale_in_place;
        if (count_ == 0) return false;
        hitch::cuda::detail::check(cudaSetDevice(dev_->ordinal()), "cudaSetDevice");
        if constexpr (flags) dev_->fill_zero(flag_.data(), sizeof(unsigned));
        if constexpr (Op == conversion::find_nonfinite)
            hitch::cuda::detail::check(
                cudaMemsetAsync(first_.data(), 0xff, size_ * sizeof(unsigned long long), dev_->stream()),
                "cudaMemsetAsync");
        const unsigned blocks =
            static_cast<unsigned>(count_ < hitch::cuda::detail::max_grid_blocks
                                      ? count_
                                      : static_cast<std::uint64_t>(hitch::cuda::detail::max_grid_blocks));
        convert_kernel<IsHalf, Op><<<blocks, convert_threads, 0, dev_->stream()>>>(chunks_.data(), count_, rows_.data(),
                                                                                   inv, flag_.data(), first_.data());
        hitch::cuda::detail::check_launch("hitch::cuda::amp convert_kernel");
        if constexpr (flags) {
            unsigned any = 0;
            dev_->copy_to_host(&any, flag_.data(), sizeof any);
            return any != 0;
        }
        return false;
    }

    /// After run<find_nonfinite>: the first layer with an inf or NaN, its first such element and its value.
    [[nodiscard]] hitch::amp::detail::nonfinite_report first_report(const std::vector<amp_entry>& rows) const {
        hitch::amp::detail::nonfinite_report report;
        if (count_ == 0) return report;
        std::vector<unsigned long long> first(size_);
        dev_->copy_to_host(first.data(), first_.data(), size_ * sizeof(unsigned long long));
        for (std::size_t k = 0; k < size_; ++k) {
            if (first[k] == std::numeric_limits<unsigned long long>::max()) continue;
            float value = 0.0f;
            dev_->copy_to_host(&value, rows[k].g + first[k], sizeof value);
            report = {static_cast<std::int64_t>(k), static_cast<std::int64_t>(first[k]), value};
            break;
        }
        return report;
    }

private:
    cuda::device* dev_ = nullptr;
    std::size_t size_ = 0;
    std::uint64_t count_ = 0;
    device_buffer<amp_entry, cuda::device> rows_;
    device_buffer<chunk_entry, cuda::device> chunks_;
    device_buffer<unsigned, cuda::device> flag_;
    device_buffer<unsigned long long, cuda::device> first_;
};

template <class Low>
inline constexpr bool is_half = std::is_same_v<Low, hitch::half>;

}  // namespace hitch::cuda::amp::detail

namespace hitch::amp {

template <>
struct device_amp<cuda::device> {
    /// Every layer's FP32 gradient times inv, in place; true when any result is inf or NaN (waits for the GPU).
    static bool unscale(cuda::device& dev, std::span<const layer> layers, float inv) {
        std::vector<cuda::amp::detail::amp_entry> rows;
        rows.reserve(layers.size());
        for (const layer& l : layers) {
            if (l.grads.space() != memory_space::cuda)
                throw config_error(hitch::detail::concat("hitch::amp::loss_scaler::unscale: the gradient of layer '",
                                                         l.name, "' is in ", name(l.grads.space()),
                                                         " memory, not the GPU's"));
            rows.push_back({nullptr, nullptr, nullptr, l.grads.data(), l.grads.size()});
        }
        cuda::amp::detail::amp_tables tables(dev, rows);
        return tables.run<true, cuda::amp::detail::conversion::unscale_in_place>(inv);
    }

    template <floating_element Low>
    class plan {
        static_assert(std::is_same_v<Low, half> || std::is_same_v<Low, bfloat16>,
                      "hitch::amp::mixed_precision_optimizer on the GPU takes hitch::half or hitch::bfloat16 "
                      "model parameters");
        static constexpr bool is_half = cuda::amp::detail::is_half<Low>;
        using conversion = cuda::amp::detail::conversion;

    public:
        plan() = default;
        plan(cuda::device& dev, std::span<const tensor_view<Low>> low_params,
             std::span<const tensor_view<Low>> low_grads, std::span<const tensor_view<float>> master_params,
             std::span<const tensor_view<float>> master_grads) {
            for (std::size_t k = 0; k < low_params.size(); ++k) {
                for (const memory_space s :
                     {low_params[k].space(), low_grads[k].space(), master_params[k].space(), master_grads[k].space()})
                    if (s != memory_space::cuda)
                        throw config_error(hitch::detail::concat("hitch::amp::mixed_precision_optimizer: layer ", k,
                                                                 " has a view in ", name(s), " memory, not the GPU's"));
                rows_.push_back({reinterpret_cast<std::uint16_t*>(low_params[k].data()),
                                 reinterpret_cast<const std::uint16_t*>(low_grads[k].data()), master_params[k].data(),
                                 master_grads[k].data(), low_params[k].size()});
            }
            tables_ = cuda::amp::detail::amp_tables(dev, rows_);
        }

        void widen_params() { tables_.template run<is_half, conversion::widen_params>(); }
        [[nodiscard]] bool unscale(float inv) { return tables_.template run<is_half, conversion::unscale_grads>(inv); }
        void widen_grads() { tables_.template run<is_half, conversion::widen_grads>(); }
        [[nodiscard]] hitch::amp::detail::nonfinite_report first_nonfinite() {
            tables_.template run<is_half, conversion::find_nonfinite>();
            return tables_.first_report(rows_);
        }
        void narrow() { tables_.template run<is_half, conversion::narrow_params>(); }

    private:
        std::vector<cuda::amp::detail::amp_entry> rows_;
        cuda::amp::detail::amp_tables tables_;
    };
};

}  // namespace hitch::amp
