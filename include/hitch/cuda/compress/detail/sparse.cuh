#pragma once
// The kernels the GPU sparse codecs share (threshold, topk, dgc): radix selection of the k largest magnitudes, the
// sampled threshold, order-preserving collection by magnitude (CUB DeviceSelect), the sparse payload's writer
// (varint sizes, a CUB exclusive scan for the offsets, a scatter) and reader (a scan over the bytes that end a
// varint, the entries decoded in parallel, a saturating scan for the indices), and the scatter into a bucket. The
// per-element math is detail/sparse.hpp's, which the host tests compare with the CPU codecs. nvcc only.
//
// Selection (exact top-k, Lin et al. 2018's threshold by sampling, Strom 2015's fixed threshold) always returns
// ascending indices; top-k's ties at the k-th magnitude go to the lowest indices, so the set is the host's.
//
//   exact     three histogram passes over |v|'s bits (11, 10, 10 bits; a radix select: no sort of the bucket) find
//             the k-th largest magnitude t and how many ties at t the top k take; if it is not all of them, a scan
//             over the ties finds the last one taken; one DeviceSelect pass collects the k elements in order.
//   sampled   the threshold is estimated from a keyed sample (a radix select over the sample), one DeviceSelect pass
//             collects the candidates at or above it (at most `cap` are kept), and the exact selection above runs
//             over the few candidates. Too few or too many candidates correct the sample's rank, as the host does;
//             after a few tries the exact selection over the bucket takes over.
//
// A selection by magnitude bits meets every NaN and infinity (they sort above every finite magnitude), so each pass
// that collects also reports them, and the caller throws non_finite_error before any state changes.
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/detail/sparse.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cuda_runtime.h>

#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "hitch/compress/detail/sparse.hpp"
#include "hitch/compress/tuning.hpp"
#include "hitch/core/error.hpp"
#include "hitch/cuda/compress/codec.cuh"
#include "hitch/cuda/compress/detail/sparse.hpp"
#include "hitch/cuda/compress/detail/sparse_random.hpp"
#include "hitch/cuda/compress/detail/wire.cuh"
#include "hitch/cuda/detail/launch.cuh"
#include "hitch/cuda/device.hpp"

namespace hitch::cuda::compress::detail::sparse {

using cuda::compress::detail::activate;
using cuda::compress::detail::decode_through_floats;
using cuda::compress::detail::read_back;
using cuda::compress::detail::require_device;
using cuda::detail::check;
using cuda::detail::check_launch;
using cuda::detail::grid_index;
using cuda::detail::grid_stride;

// ---- device memory kept between calls ----------------------------------------------------------------------------

/// A grow-only device array of a codec's state (workspace reused by every encode of the bucket). Its contents are
/// unspecified after it grows.
template <class T>
class scratch {
public:
    scratch() = default;
    scratch(const scratch&) = delete;
    scratch& operator=(const scratch&) = delete;
    scratch(scratch&& o) noexcept
        : device_(o.device_), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
    scratch& operator=(scratch&& o) noexcept {
        if (this != &o) {
            release();
            device_ = o.device_;
            data_ = std::exchange(o.data_, nullptr);
            size_ = std::exchange(o.size_, 0);
        }
        return *this;
    }
    ~scratch() { release(); }

    /// Room for n values (grows by a quarter beyond n, so a slowly growing need reallocates rarely).
    T* reserve(cuda::device& dev, std::size_t n) {
        if (n <= size_ && data_ != nullptr) return data_;
        release();
        const std::size_t want = std::max<std::size_t>(n + n / 4, 1);
        device_ = &dev;
        data_ = static_cast<T*>(dev.allocate_bytes(want * sizeof(T)));
        size_ = want;
        return data_;
    }
    [[nodiscard]] T* data() const noexcept { return data_; }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }

private:
    void release() noexcept {
        if (data_ != nullptr) device_->deallocate_bytes(data_, size_ * sizeof(T));
        data_ = nullptr;
        size_ = 0;
    }
    cuda::device* device_ = nullptr;
    T* data_ = nullptr;
    std::size_t size_ = 0;
};

/// Runs a CUB device algorithm with its two-call temporary storage protocol, the storage cached in `temp`:
/// call(void* storage, std::size_t& bytes) -> cudaError_t.
template <class Call>
void run_cub(cuda::device& dev, scratch<std::byte>& temp, std::string_view what, Call&& call) {
    std::size_t bytes = 0;
    check(call(nullptr, bytes), what);
    void* storage = temp.reserve(dev, bytes);
    check(call(storage, bytes), what);
}

/// What the host reads back after a selection or a payload pass, in one copy.
struct status_words {
    std::uint64_t count = 0;          // elements selected (all of them, also beyond a cap)
    std::uint64_t payload_bytes = 0;  // bytes of the varint region written
    std::uint32_t non_finite = 0;     // a NaN or an infinity was met
    std::uint32_t corrupt = 0;        // a check of the payload reader failed (corrupt_code)
};

/// Why the parallel payload reader refused a message (the host then throws with the host codec's text).
using corrupt_code = std::uint32_t;
inline constexpr corrupt_code corrupt_none = 0;
inline constexpr corrupt_code corrupt_varint_count = 1;  // the terminators do not end exactly `count` varints
inline constexpr corrupt_code corrupt_varint = 2;        // a varint longer than 10 bytes, or beyond 64 bits
inline constexpr corrupt_code corrupt_index = 3;         // an index outside the bucket
inline constexpr corrupt_code corrupt_value = 4;         // a value that is not finite

/// Threads of the selection kernels.
inline constexpr unsigned select_threads = 256;
/// Elements per thread of a histogram pass (a grid of n / 4096 blocks, capped).
inline constexpr unsigned select_items = 16;
/// Elements per tile of the tie scan (one block each).
inline constexpr unsigned tie_items = 16;
inline constexpr unsigned tie_tile = select_threads * tie_items;

// ---- magnitude sources ---------------------------------------------------------------------------------------------

/// |v[i]|'s bits, from a float array.
struct float_magnitudes {
    const float* v;
    __device__ __forceinline__ std::uint32_t operator()(std::uint64_t i) const { return magnitude_bits(v[i]); }
};
/// Magnitude bits gathered earlier (a sample, the candidates).
struct stored_magnitudes {
    const std::uint32_t* m;
    __device__ __forceinline__ std::uint32_t operator()(std::uint64_t i) const { return m[i]; }
};

// ---- radix select ------------------------------------------------------------------------------------------------

/// Device storage of one radix selection: its state and the histogram of the pass running.
struct radix_workspace {
    radix_state state;
    std::uint32_t blocks_done;
    std::uint32_t hist[radix_max_bins];
};

static __global__ void radix_begin_kernel(radix_workspace* ws, std::uint64_t k) {
    for (unsigned b = threadIdx.x; b < radix_max_bins; b += blockDim.x) ws->hist[b] = 0;
    if (threadIdx.x == 0) {
        ws->state.prefix = 0;
        ws->state.prefix_mask = 0;
        ws->state.remaining = k;
        ws->state.above = 0;
        ws->state.ties = 0;
        ws->state.last_tie = ~std::uint64_t{0};
        ws->state.non_finite = 0;
        ws->blocks_done = 0;
    }
}

/// The last block of a pass: the bin holding the remaining-th largest by a block-wide suffix sum of the histogram
/// (radix_choose's bin), the prefix extended; the histogram cleared for the next pass.
__device__ inline void radix_choose_block(radix_workspace* ws, radix_pass p, unsigned pass) {
    constexpr unsigned per = radix_max_bins / select_threads;
    using scan_t = cub::BlockScan<std::uint64_t, select_threads>;
    __shared__ typename scan_t::TempStorage storage;
    const unsigned bins = 1u << p.bits;
    const bool last = pass + 1 == radix_pass_count;
    const std::uint64_t remaining = ws->state.remaining;
    std::uint32_t h[per];
    std::uint64_t mine = 0;
    for (unsigned u = 0; u < per; ++u) {
        const unsigned r = threadIdx.x * per + u;  // rank of the bin from the top
        h[u] = r < bins ? __ldcg(&ws->hist[bins - 1 - r]) : 0u;
        mine += h[u];
    }
    std::uint64_t higher = 0;
    scan_t(storage).ExclusiveSum(mine, higher);
    __syncthreads();
    for (unsigned u = 0; u < per; ++u) {
        const unsigned r = threadIdx.x * per + u;
        if (r < bins && higher < remaining && higher + h[u] >= remaining) {
            radix_state s = ws->state;
            radix_take_bin(s, p, bins - 1 - r, higher, h[u], last);
            ws->state.prefix = s.prefix;
            ws->state.prefix_mask = s.prefix_mask;
            ws->state.remaining = s.remaining;
            ws->state.above = s.above;
            ws->state.ties = s.ties;
            if (last) ws->state.last_tie = s.ties == s.remaining ? ~std::uint64_t{0} : 0;
        }
        if (pass == 0 && r < bins && bins - 1 - r >= radix_first_non_finite_bin && h[u] != 0) ws->state.non_finite = 1;
        higher += h[u];
    }
    __syncthreads();
    for (unsigned b = threadIdx.x; b < radix_max_bins; b += blockDim.x) ws->hist[b] = 0;
    if (threadIdx.x == 0) ws->blocks_done = 0;
}

/// One pass: every block histograms the digit of the elements matching the prefix in shared memory and adds it to
/// the global histogram; the last block to finish chooses the bin.
template <class Source>
__global__ void __launch_bounds__(select_threads)
    radix_pass_kernel(Source src, std::uint64_t n, radix_workspace* ws, unsigned pass) {
    __shared__ std::uint32_t shist[radix_max_bins];
    __shared__ bool last_block;
    const radix_pass p = radix_pass_at(pass);
    const unsigned bins = 1u << p.bits;
    for (unsigned b = threadIdx.x; b < bins; b += blockDim.x) shist[b] = 0;
    __syncthreads();
    radix_state s;
    s.prefix = ws->state.prefix;
    s.prefix_mask = ws->state.prefix_mask;
    const std::uint64_t stride = grid_stride();
    std::uint64_t i = grid_index();
    for (; i + 3 * stride < n; i += 4 * stride) {
        const std::uint32_t m0 = src(i), m1 = src(i + stride), m2 = src(i + 2 * stride), m3 = src(i + 3 * stride);
        if (radix_matches(s, m0)) atomicAdd(&shist[radix_bin(m0, p)], 1u);
        if (radix_matches(s, m1)) atomicAdd(&shist[radix_bin(m1, p)], 1u);
        if (radix_matches(s, m2)) atomicAdd(&shist[radix_bin(m2, p)], 1u);
        if (radix_matches(s, m3)) atomicAdd(&shist[radix_bin(m3, p)], 1u);
    }
    for (; i < n; i += stride) {
        const std::uint32_t m = src(i);
        if (radix_matches(s, m)) atomicAdd(&shist[radix_bin(m, p)], 1u);
    }
    __syncthreads();
    for (unsigned b = threadIdx.x; b < bins; b += blockDim.x)
        if (shist[b] != 0) atomicAdd(&ws->hist[b], shist[b]);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last_block = atomicAdd(&ws->blocks_done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last_block) return;
    __threadfence();
    radix_choose_block(ws, p, pass);
}

/// Tie scan, first step: how many ties at t each tile holds (nothing to do when the top k take every tie).
template <class Source>
__global__ void __launch_bounds__(select_threads)
    tie_count_kernel(Source src, std::uint64_t n, const radix_workspace* ws, std::uint64_t* tile_counts) {
    using reduce_t = cub::BlockReduce<std::uint64_t, select_threads>;
    __shared__ typename reduce_t::TempStorage storage;
    if (ws->state.ties == ws->state.remaining) {
        if (threadIdx.x == 0) tile_counts[blockIdx.x] = 0;
        return;
    }
    const std::uint32_t t = ws->state.prefix;
    const std::uint64_t base = static_cast<std::uint64_t>(blockIdx.x) * tie_tile;
    std::uint64_t count = 0;
    for (unsigned u = 0; u < tie_items; ++u) {
        const std::uint64_t i = base + u * select_threads + threadIdx.x;
        if (i < n && src(i) == t) ++count;
    }
    const std::uint64_t total = reduce_t(storage).Sum(count);
    if (threadIdx.x == 0) tile_counts[blockIdx.x] = total;
}

/// Tie scan, last step: the tile holding the remaining-th tie finds it by a block scan in index order.
template <class Source>
__global__ void __launch_bounds__(select_threads)
    tie_find_kernel(Source src, std::uint64_t n, radix_workspace* ws, const std::uint64_t* tile_counts,
                    const std::uint64_t* tile_inclusive) {
    using scan_t = cub::BlockScan<std::uint32_t, select_threads>;
    __shared__ typename scan_t::TempStorage storage;
    const std::uint64_t remaining = ws->state.remaining;
    if (ws->state.ties == remaining) return;
    const std::uint64_t inclusive = tile_inclusive[blockIdx.x], before = inclusive - tile_counts[blockIdx.x];
    if (!(before < remaining && remaining <= inclusive)) return;
    const auto want = static_cast<std::uint32_t>(remaining - before);
    const std::uint32_t t = ws->state.prefix;
    const std::uint64_t first = static_cast<std::uint64_t>(blockIdx.x) * tie_tile + threadIdx.x * tie_items;
    bool tie[tie_items];
    std::uint32_t mine = 0;
    for (unsigned u = 0; u < tie_items; ++u) {
        const std::uint64_t i = first + u;
        tie[u] = i < n && src(i) == t;
        mine += tie[u] ? 1u : 0u;
    }
    std::uint32_t rank = 0;
    scan_t(storage).ExclusiveSum(mine, rank);
    for (unsigned u = 0; u < tie_items; ++u)
        if (tie[u] && ++rank == want) ws->state.last_tie = first + u;
}

/// Selected by the top-k rule of a finished radix selection (element or candidate position i).
template <class Source>
struct topk_flag {
    Source src;
    const radix_state* state;
    __device__ __forceinline__ bool operator()(std::uint64_t i) const {
        return topk_selected(src(i), i, state->prefix, state->last_tie);
    }
};

/// |v| at or above a threshold given in bits, fixed or read from device memory (a radix selection's prefix);
/// notes NaN and infinities.
template <class Source>
struct at_least_flag {
    Source src;
    std::uint32_t fixed;
    const std::uint32_t* from_device;
    std::uint32_t* non_finite;
    __device__ __forceinline__ bool operator()(std::uint64_t i) const {
        const std::uint32_t m = src(i);
        if (non_finite_bits(m)) *non_finite = 1;
        return m >= (from_device != nullptr ? *from_device : fixed);
    }
};

/// Writes output j only below the cap (DeviceSelect's output counts every selected element).
template <class T>
struct capped_store {
    T* out;
    std::uint64_t cap;
    __device__ __forceinline__ void operator()(std::ptrdiff_t j, T value) const {
        if (static_cast<std::uint64_t>(j) < cap) out[j] = value;
    }
};

static __global__ void gather_magnitudes_kernel(const float* v, const std::uint64_t* index, std::uint64_t count,
                                                std::uint32_t* out) {
    for (std::uint64_t j = grid_index(); j < count; j += grid_stride()) out[j] = magnitude_bits(v[index[j]]);
}

static __global__ void sample_kernel(const float* v, std::uint64_t n, std::uint64_t key, std::uint64_t s,
                                     std::uint32_t* out) {
    for (std::uint64_t j = grid_index(); j < s; j += grid_stride()) {
        const std::uint32_t m = magnitude_bits(v[sample_index(key, j, n)]);
        out[j] = m > infinity_bits ? infinity_bits : m;  // NaN counts as infinity: the collecting pass reports it
    }
}

/// The selection workspace of one bucket (kept in a codec's state).
struct select_workspace {
    scratch<radix_workspace> radix;         // [0]: the bucket or the candidates, [1]: the sample
    scratch<std::uint64_t> tiles;           // tie scan: counts, then inclusive sums
    scratch<std::uint32_t> sample;          // sampled magnitudes
    scratch<std::uint64_t> candidates;      // sampled path: candidate indices
    scratch<std::uint32_t> candidate_bits;  // their magnitudes
    scratch<std::uint64_t> selected;        // the result: ascending indices
    scratch<status_words> status;           // read back by the host
    scratch<std::byte> temp;                // CUB's temporary storage
};

/// What a selection found (read back on the host).
struct selection_result {
    std::uint64_t count = 0;  // indices in ws.selected
    bool finite = true;       // false: the scan met NaN or an infinity (the selection is then unspecified)
    int passes = 0;           // sampled: collecting passes over the bucket (0: exact selection)
};

/// Radix select over `src` (n elements, 1 <= k < n) into ws.radix[slot]; the last tie is found when `ties` is set.
template <class Source>
void radix_select(cuda::device& dev, select_workspace& ws, Source src, std::uint64_t n, std::uint64_t k, unsigned slot,
                  bool ties) {
    radix_workspace* rw = ws.radix.data() + slot;
    const cudaStream_t stream = dev.stream();
    radix_begin_kernel<<<1, select_threads, 0, stream>>>(rw, k);
    check_launch("hitch::cuda::compress radix_begin_kernel");
    const unsigned grid = cuda::detail::grid_blocks(n, select_threads, select_items);
    for (unsigned pass = 0; pass < radix_pass_count; ++pass) {
        radix_pass_kernel<<<grid, select_threads, 0, stream>>>(src, n, rw, pass);
        check_launch("hitch::cuda::compress radix_pass_kernel");
    }
    if (!ties) return;
    const std::uint64_t tiles = (n + tie_tile - 1) / tie_tile;
    std::uint64_t* counts = ws.tiles.reserve(dev, 2 * tiles);
    std::uint64_t* inclusive = counts + tiles;
    // One block per tile: more tiles than a grid may have blocks are not needed below 2^31 tiles.
    const auto blocks = static_cast<unsigned>(tiles);
    tie_count_kernel<<<blocks, select_threads, 0, stream>>>(src, n, rw, counts);
    check_launch("hitch::cuda::compress tie_count_kernel");
    run_cub(dev, ws.temp, "cub::DeviceScan::InclusiveSum (ties)", [&](void* p, std::size_t& bytes) {
        return cub::DeviceScan::InclusiveSum(p, bytes, counts, inclusive, static_cast<std::int64_t>(tiles), stream);
    });
    tie_find_kernel<<<blocks, select_threads, 0, stream>>>(src, n, rw, counts, inclusive);
    check_launch("hitch::cuda::compress tie_find_kernel");
}

/// DeviceSelect of the inputs whose flag is set, in order, into out (at most cap kept); the count goes to
/// ws.status->count.
template <class Input, class Flag>
void select_flagged(cuda::device& dev, select_workspace& ws, Input input, Flag flag, std::uint64_t n,
                    std::uint64_t* out, std::uint64_t cap) {
    const cudaStream_t stream = dev.stream();
    auto flags = thrust::make_transform_iterator(thrust::counting_iterator<std::uint64_t>(0), flag);
    auto output = thrust::make_tabulate_output_iterator(capped_store<std::uint64_t>{out, cap});
    std::uint64_t* count = &ws.status.data()->count;
    run_cub(dev, ws.temp, "cub::DeviceSelect::Flagged", [&](void* p, std::size_t& bytes) {
        return cub::DeviceSelect::Flagged(p, bytes, input, flags, output, count, static_cast<std::int64_t>(n), stream);
    });
}

[[nodiscard]] inline status_words read_status(cuda::device& dev, select_workspace& ws) {
    return read_back(dev, ws.status.data());
}
inline void clear_status(cuda::device& dev, select_workspace& ws) {
    ws.status.reserve(dev, 1);
    check(cudaMemsetAsync(ws.status.data(), 0, sizeof(status_words), dev.stream()), "cudaMemsetAsync");
}

/// Every element at or above `bits` (in order) into ws.selected, growing it to the count when `cap` was too small:
/// threshold's selection, and top-k with k >= n (bits 0).
inline selection_result select_at_least(cuda::device& dev, select_workspace& ws, const float* v, std::uint64_t n,
                                        std::uint32_t bits, std::uint64_t cap_hint) {
    activate(dev);
    clear_status(dev, ws);
    std::uint64_t cap = std::max<std::uint64_t>(std::min<std::uint64_t>(cap_hint, n), 1);
    for (;;) {
        std::uint64_t* out = ws.selected.reserve(dev, static_cast<std::size_t>(cap));
        cap = ws.selected.size();
        if (n != 0)
            select_flagged(dev, ws, thrust::counting_iterator<std::uint64_t>(0),
                           at_least_flag<float_magnitudes>{{v}, bits, nullptr, &ws.status.data()->non_finite}, n, out,
                           cap);
        const status_words st = read_status(dev, ws);
        if (st.non_finite != 0) return {0, false, 0};
        if (st.count <= cap) return {st.count, true, 0};
        cap = st.count;  // a larger selection than ever before: grow and collect again
    }
}

/// Exact top-k (1 <= k < n) of the float array v: radix select, the last tie, one collecting pass.
inline selection_result select_topk_exact(cuda::device& dev, select_workspace& ws, const float* v, std::uint64_t n,
                                          std::uint64_t k) {
    activate(dev);
    clear_status(dev, ws);
    ws.radix.reserve(dev, 2);
    radix_select(dev, ws, float_magnitudes{v}, n, k, 0, true);
    std::uint64_t* out = ws.selected.reserve(dev, static_cast<std::size_t>(k));
    const radix_state* state = &ws.radix.data()->state;
    select_flagged(dev, ws, thrust::counting_iterator<std::uint64_t>(0), topk_flag<float_magnitudes>{{v}, state}, n,
                   out, k);
    const status_words st = read_status(dev, ws);
    const radix_state rs = read_back(dev, state);
    if (rs.non_finite != 0) return {0, false, 0};
    if (st.count != k)
        throw hitch::error(hitch::detail::concat("hitch::cuda::compress: top-k selected ", st.count, " of ", k,
                                                 " elements (internal error)"));
    return {k, true, 0};
}

/// Top-k of v with the threshold estimated from a keyed sample (compress::detail::topk_sampled's schedule of ranks
/// and its fallback); the same elements as select_topk_exact.
inline selection_result select_topk_sampled(cuda::device& dev, select_workspace& ws, const float* v, std::uint64_t n,
                                            std::uint64_t k, std::uint64_t key,
                                            const hitch::compress::detail::sampling& how) {
    namespace tuning = hitch::compress::tuning;
    auto s = static_cast<std::uint64_t>(std::llround(static_cast<double>(n) * how.fraction));
    s = std::max<std::uint64_t>(s, how.min_sample);
    if (k == 0 || s * tuning::topk_sample_share > n || k * tuning::topk_selected_share > n)
        return select_topk_exact(dev, ws, v, n, k);
    activate(dev);
    const cudaStream_t stream = dev.stream();
    ws.radix.reserve(dev, 2);
    std::uint32_t* sample = ws.sample.reserve(dev, static_cast<std::size_t>(s));
    sample_kernel<<<cuda::detail::grid_blocks(s), cuda::detail::block_threads, 0, stream>>>(v, n, key, s, sample);
    check_launch("hitch::cuda::compress sample_kernel");
    const double expected = static_cast<double>(s) * static_cast<double>(k) / static_cast<double>(n);
    double rank = expected + 3.0 * std::sqrt(expected) + 2.0;
    const std::uint64_t cap = std::max<std::uint64_t>(4 * k, k + 4096);
    std::uint64_t* candidates = ws.candidates.reserve(dev, static_cast<std::size_t>(cap));
    const std::uint32_t* threshold = &(ws.radix.data() + 1)->state.prefix;
    for (int attempt = 0; attempt < how.attempts; ++attempt) {
        const auto m = static_cast<std::uint64_t>(std::clamp(std::ceil(rank), 1.0, static_cast<double>(s)));
        // The m-th largest of the sample (m == s: the smallest; radix select needs m < s, so take all then).
        if (m < s) {
            radix_select(dev, ws, stored_magnitudes{sample}, s, m, 1, false);
        } else {
            radix_begin_kernel<<<1, select_threads, 0, stream>>>(ws.radix.data() + 1, 0);  // prefix 0: everything
            check_launch("hitch::cuda::compress radix_begin_kernel");
        }
        clear_status(dev, ws);
        select_flagged(dev, ws, thrust::counting_iterator<std::uint64_t>(0),
                       at_least_flag<float_magnitudes>{{v}, 0, threshold, &ws.status.data()->non_finite}, n, candidates,
                       cap);
        const status_words st = read_status(dev, ws);
        if (st.non_finite != 0) return {0, false, attempt + 1};
        const std::uint64_t count = st.count;
        if (count >= k && count <= cap) {
            std::uint64_t* out = ws.selected.reserve(dev, static_cast<std::size_t>(k));
            if (count == k) {
                check(cudaMemcpyAsync(out, candidates, k * sizeof(std::uint64_t), cudaMemcpyDeviceToDevice, stream),
                      "cudaMemcpyAsync D2D");
                return {k, true, attempt + 1};
            }
            std::uint32_t* bits = ws.candidate_bits.reserve(dev, static_cast<std::size_t>(count));
            gather_magnitudes_kernel<<<cuda::detail::grid_blocks(count), cuda::detail::block_threads, 0, stream>>>(
                v, candidates, count, bits);
            check_launch("hitch::cuda::compress gather_magnitudes_kernel");
            radix_select(dev, ws, stored_magnitudes{bits}, count, k, 0, true);
            clear_status(dev, ws);
            select_flagged(dev, ws, candidates, topk_flag<stored_magnitudes>{{bits}, &ws.radix.data()->state}, count,
                           out, k);
            const status_words done = read_status(dev, ws);
            if (done.count != k)
                throw hitch::error(hitch::detail::concat("hitch::cuda::compress: sampled top-k selected ", done.count,
                                                         " of ", k, " elements (internal error)"));
            return {k, true, attempt + 1};
        }
        // Too few: lower the threshold (a higher rank); too many: scale the rank to aim at 1.5 k.
        if (count < k)
            rank = std::max(rank * 2.0, rank + 2.0 * std::sqrt(expected) + 4.0);
        else
            rank = std::max(1.0, std::floor(rank * 1.5 * static_cast<double>(k) / static_cast<double>(count)));
    }
    return select_topk_exact(dev, ws, v, n, k);
}

/// Top-k by the method asked for; k >= n selects everything, k == 0 nothing. The indices are in ws.selected.
inline selection_result select_topk(cuda::device& dev, select_workspace& ws, const float* v, std::uint64_t n,
                                    std::uint64_t k, bool sampled, std::uint64_t key,
                                    const hitch::compress::detail::sampling& how) {
    if (k >= n) return select_at_least(dev, ws, v, n, 0, n);
    if (k == 0) return {0, true, 0};
    return sampled ? select_topk_sampled(dev, ws, v, n, k, key, how) : select_topk_exact(dev, ws, v, n, k);
}

// ---- payload writer -------------------------------------------------------------------------------------------------

/// Entry j's code in a topk / dgc payload.
struct gap_codes {
    const std::uint64_t* index;
    __device__ __forceinline__ std::uint64_t operator()(std::uint64_t j) const { return sparse_code(index, j); }
};
/// Entry j's code in a threshold payload (the sign of v at the index in the lowest bit).
struct signed_gap_codes {
    const std::uint64_t* index;
    const float* v;
    __device__ __forceinline__ std::uint64_t operator()(std::uint64_t j) const {
        return threshold_entry_code(index, v, j);
    }
};
template <class Code>
struct varint_sizes {
    Code code;
    __device__ __forceinline__ std::uint64_t operator()(std::uint64_t j) const { return varint_size(code(j)); }
};

/// Every entry's varint at its offset; the last entry reports the region's length.
template <class Code>
__global__ void write_varints_kernel(unsigned char* region, std::uint64_t count, Code code,
                                     const std::uint64_t* offsets) {
    for (std::uint64_t j = grid_index(); j < count; j += grid_stride()) put_varint(region + offsets[j], code(j));
}
template <class Code>
__global__ void varint_total_kernel(std::uint64_t count, Code code, const std::uint64_t* offsets,
                                    status_words* status) {
    status->payload_bytes = count == 0 ? 0 : offsets[count - 1] + varint_size(code(count - 1));
}

/// topk / dgc payload's fixed part and values: u64 k | k x f32 v[index[j]].
static __global__ void write_sparse_values_kernel(unsigned char* payload, const std::uint64_t* index, std::uint64_t k,
                                                  const float* v) {
    const std::uint64_t first = grid_index();
    if (first == 0) store_u64(payload, k);
    for (std::uint64_t j = first; j < k; j += grid_stride())
        store_f32(payload + sparse_layout::values_at() + 4 * j, v[index[j]]);
}

static __global__ void write_threshold_head_kernel(unsigned char* payload, std::uint64_t count, float tau) {
    store_u64(payload, count);
    store_f32(payload + 8, tau);
}

/// The varint offsets of `count` entries (an exclusive scan of their sizes) and the region's length, read back:
/// the payload's size is known before the message is sized.
template <class Code>
std::uint64_t plan_varints(cuda::device& dev, select_workspace& ws, scratch<std::uint64_t>& offsets, Code code,
                           std::uint64_t count) {
    if (count == 0) return 0;
    const cudaStream_t stream = dev.stream();
    std::uint64_t* off = offsets.reserve(dev, static_cast<std::size_t>(count));
    auto sizes = thrust::make_transform_iterator(thrust::counting_iterator<std::uint64_t>(0), varint_sizes<Code>{code});
    run_cub(dev, ws.temp, "cub::DeviceScan::ExclusiveSum (varint offsets)", [&](void* p, std::size_t& bytes) {
        return cub::DeviceScan::ExclusiveSum(p, bytes, sizes, off, static_cast<std::int64_t>(count), stream);
    });
    ws.status.reserve(dev, 1);
    varint_total_kernel<<<1, 1, 0, stream>>>(count, code, off, ws.status.data());
    check_launch("hitch::cuda::compress varint_total_kernel");
    return read_status(dev, ws).payload_bytes;
}

template <class Code>
void write_varints(cuda::device& dev, unsigned char* region, const std::uint64_t* offsets, Code code,
                   std::uint64_t count) {
    if (count == 0) return;
    write_varints_kernel<<<cuda::detail::grid_blocks(count), cuda::detail::block_threads, 0, dev.stream()>>>(
        region, count, code, offsets);
    check_launch("hitch::cuda::compress write_varints_kernel");
}

/// Encodes a topk / dgc message of the k selected elements of v (indices in ws.selected) into `out`; returns its
/// size. `type` and `n` go into the header.
inline std::size_t write_sparse_message(cuda::device& dev, select_workspace& ws, scratch<std::uint64_t>& offsets,
                                        const float* v, std::uint64_t n, std::uint64_t k, std::uint8_t codec,
                                        dtype type, device_message& out) {
    const std::uint64_t* index = ws.selected.data();
    const std::uint64_t varints = plan_varints(dev, ws, offsets, gap_codes{index}, k);
    const std::size_t payload = sparse_layout::varints_at(static_cast<std::size_t>(k)) + varints;
    message_writer w(dev, out, codec, type, n, payload);
    auto* p = reinterpret_cast<unsigned char*>(w.payload());
    write_sparse_values_kernel<<<cuda::detail::grid_blocks(k), cuda::detail::block_threads, 0, dev.stream()>>>(p, index,
                                                                                                               k, v);
    check_launch("hitch::cuda::compress write_sparse_values_kernel");
    write_varints(dev, p + sparse_layout::varints_at(static_cast<std::size_t>(k)), offsets.data(), gap_codes{index}, k);
    return w.finish();
}

// ---- payload reader -------------------------------------------------------------------------------------------------

struct ends_varint_flag {
    const unsigned char* region;
    __device__ __forceinline__ std::uint64_t operator()(std::uint64_t b) const {
        return ends_varint(region[b]) ? 1 : 0;
    }
};

/// Each terminator records where its entry ends; the last byte checks that exactly `count` varints fill the region.
static __global__ void varint_ends_kernel(const unsigned char* region, std::uint64_t bytes, std::uint64_t count,
                                          const std::uint64_t* rank, std::uint64_t* ends, status_words* status) {
    for (std::uint64_t b = grid_index(); b < bytes; b += grid_stride()) {
        const bool term = ends_varint(region[b]);
        if (term && rank[b] < count) ends[rank[b]] = b;
        if (b + 1 == bytes && (!term || rank[b] + 1 != count)) atomicMax(&status->corrupt, corrupt_varint_count);
    }
}

/// Each entry decoded between the previous terminator and its own: steps[j] = gap + 1 (checked below n), the sign
/// of threshold's codes, and topk's values checked finite.
template <bool Signed>
__global__ void varint_decode_kernel(const unsigned char* region, std::uint64_t count, const std::uint64_t* ends,
                                     std::uint64_t n, const unsigned char* values, std::uint64_t* steps,
                                     unsigned char* negative, status_words* status) {
    if (status->corrupt != corrupt_none) return;
    for (std::uint64_t j = grid_index(); j < count; j += grid_stride()) {
        const std::uint64_t start = j == 0 ? 0 : ends[j - 1] + 1;
        std::uint64_t code = 0;
        if (!read_varint(region + start, ends[j] - start + 1, code)) {
            atomicMax(&status->corrupt, corrupt_varint);
            continue;
        }
        const std::uint64_t gap = Signed ? code >> 1 : code;
        if (gap >= n) atomicMax(&status->corrupt, corrupt_index);
        steps[j] = gap + 1;
        if constexpr (Signed) negative[j] = static_cast<unsigned char>(code & 1u);
        if (values != nullptr && non_finite_bits(magnitude_bits(load_f32(values + 4 * j))))
            atomicMax(&status->corrupt, corrupt_value);
    }
}

struct saturating_sum {
    __device__ __forceinline__ std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const {
        return saturating_add(a, b);
    }
};

static __global__ void last_index_kernel(const std::uint64_t* positions, std::uint64_t count, std::uint64_t n,
                                         status_words* status) {
    if (status->corrupt == corrupt_none && count != 0 && positions[count - 1] > n)
        atomicMax(&status->corrupt, corrupt_index);
}

/// The device buffers of a decode (one call's).
struct read_workspace {
    scratch<std::uint64_t> rank;      // per byte of the region: terminators before it
    scratch<std::uint64_t> ends;      // per entry: its terminator's byte
    scratch<std::uint64_t> steps;     // per entry: gap + 1, then (scanned) index + 1
    scratch<unsigned char> negative;  // threshold: per entry, its sign
    scratch<status_words> status;
    scratch<std::byte> temp;
};

/// Parses the varint region of `count` entries for a bucket of n: afterwards rw.steps holds index + 1 per entry.
/// Returns the first failed check (corrupt_none: the entries are valid); nothing is written to any bucket.
template <bool Signed>
corrupt_code read_varints(cuda::device& dev, read_workspace& rw, const unsigned char* region, std::uint64_t bytes,
                          std::uint64_t count, std::uint64_t n, const unsigned char* values) {
    const cudaStream_t stream = dev.stream();
    status_words* status = rw.status.reserve(dev, 1);
    check(cudaMemsetAsync(status, 0, sizeof(status_words), stream), "cudaMemsetAsync");
    if (bytes == 0) return count == 0 ? corrupt_none : corrupt_varint_count;
    std::uint64_t* rank = rw.rank.reserve(dev, static_cast<std::size_t>(bytes));
    std::uint64_t* ends = rw.ends.reserve(dev, static_cast<std::size_t>(std::max<std::uint64_t>(count, 1)));
    std::uint64_t* steps = rw.steps.reserve(dev, static_cast<std::size_t>(std::max<std::uint64_t>(count, 1)));
    unsigned char* negative =
        Signed ? rw.negative.reserve(dev, static_cast<std::size_t>(std::max<std::uint64_t>(count, 1))) : nullptr;
    auto flags = thrust::make_transform_iterator(thrust::counting_iterator<std::uint64_t>(0), ends_varint_flag{region});
    scratch<std::byte>& temp = rw.temp;
    run_cub(dev, temp, "cub::DeviceScan::ExclusiveSum (varint terminators)", [&](void* p, std::size_t& b) {
        return cub::DeviceScan::ExclusiveSum(p, b, flags, rank, static_cast<std::int64_t>(bytes), stream);
    });
    varint_ends_kernel<<<cuda::detail::grid_blocks(bytes), cuda::detail::block_threads, 0, stream>>>(
        region, bytes, count, rank, ends, status);
    check_launch("hitch::cuda::compress varint_ends_kernel");
    if (count != 0) {
        varint_decode_kernel<Signed><<<cuda::detail::grid_blocks(count), cuda::detail::block_threads, 0, stream>>>(
            region, count, ends, n, values, steps, negative, status);
        check_launch("hitch::cuda::compress varint_decode_kernel");
        run_cub(dev, temp, "cub::DeviceScan::InclusiveScan (indices)", [&](void* p, std::size_t& b) {
            return cub::DeviceScan::InclusiveScan(p, b, steps, steps, saturating_sum{},
                                                  static_cast<std::int64_t>(count), stream);
        });
        last_index_kernel<<<1, 1, 0, stream>>>(steps, count, n, status);
        check_launch("hitch::cuda::compress last_index_kernel");
    }
    return read_back(dev, status).corrupt;
}

/// out[index] (+)= value for topk's entries: out[p - 1] = out[p - 1] + v_j with p = the scanned step.
static __global__ void scatter_values_kernel(float* out, const std::uint64_t* positions, const unsigned char* values,
                                             std::uint64_t count) {
    for (std::uint64_t j = grid_index(); j < count; j += grid_stride()) {
        float& o = out[positions[j] - 1];
        o = hd::add(o, load_f32(values + 4 * j));
    }
}
/// The same for threshold's entries: +-tau.
static __global__ void scatter_signs_kernel(float* out, const std::uint64_t* positions, const unsigned char* negative,
                                            std::uint64_t count, float tau) {
    for (std::uint64_t j = grid_index(); j < count; j += grid_stride()) {
        float& o = out[positions[j] - 1];
        o = hd::add(o, negative[j] != 0 ? -tau : tau);
    }
}

/// The text the host codec gives for each failed check of the parallel reader.
[[noreturn]] inline void throw_corrupt(std::string_view who, corrupt_code code, std::uint64_t n) {
    switch (code) {
        case corrupt_varint_count:
            wire::corrupt(who, "truncated varint, or unexpected bytes after the indices");
        case corrupt_varint:
            wire::corrupt(who, "varint longer than 10 bytes or overflows 64 bits");
        case corrupt_index:
            wire::corrupt(who, hitch::detail::concat("an index is outside the bucket of ", n, " elements"));
        case corrupt_value:
            wire::corrupt(who, "a value is not finite");
        default:
            wire::corrupt(who, "invalid sparse payload");
    }
}

/// Decodes a topk / dgc payload (already opened: header and checksum checked) into out (decode: zeros elsewhere;
/// decode_add: added). Every check runs before the first write.
template <bool Add>
void decode_sparse(cuda::device& dev, read_workspace& rw, const device_message_view& m, float* out, std::uint64_t n,
                   std::string_view who) {
    payload_reader r(dev, m, who);
    const std::uint64_t k = r.count("selected count", n);
    const auto values = r.take(4 * k, "values");
    const auto rest = r.rest();
    if (k > rest.size()) r.fail(hitch::detail::concat("truncated: ", k, " indices in ", rest.size(), " bytes"));
    const auto* region = reinterpret_cast<const unsigned char*>(rest.data());
    const auto* vals = reinterpret_cast<const unsigned char*>(values.data());
    const corrupt_code code = read_varints<false>(dev, rw, region, rest.size(), k, n, vals);
    if (code != corrupt_none) throw_corrupt(who, code, n);
    const cudaStream_t stream = dev.stream();
    if constexpr (!Add)
        if (n != 0) check(cudaMemsetAsync(out, 0, n * sizeof(float), stream), "cudaMemsetAsync");
    if (k != 0) {
        scatter_values_kernel<<<cuda::detail::grid_blocks(k), cuda::detail::block_threads, 0, stream>>>(
            out, rw.steps.data(), vals, k);
        check_launch("hitch::cuda::compress scatter_values_kernel");
    }
}

/// A topk / dgc message decoded into a bucket of any floating type: opened (header, checksum, element count), then
/// decode_sparse into the bucket (float) or a float buffer stored into it.
template <bool Add, class T>
void decode_sparse_message(cuda::device& dev, tensor_view<const std::byte> message, tensor_view<T> out,
                           std::string_view who, std::uint8_t codec) {
    require_device(out, who);
    const device_message_view m = open(dev, message, {who, codec});
    expect_count(m, out.size(), who);
    read_workspace rw;
    decode_through_floats<Add>(
        dev, out, [&](auto add, float* p) { decode_sparse<decltype(add)::value>(dev, rw, m, p, out.size(), who); });
}

}  // namespace hitch::cuda::compress::detail::sparse
