#pragma once
// CRC32C kernels: a block checksums one 16 KiB tile of a device payload per iteration (detail/crc32c.hpp's
// geometry), each thread 64 bytes, and joins the slices into the tile's contribution to the payload's raw state; the
// contributions are XORed by a CUB device reduction (detail/wire.cuh's payload_crc). Encoders that hold their
// payload in registers (the element-wise codecs) call crc_join_tile themselves and skip the second read. nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/detail/crc32c.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>

#include <cstddef>
#include <cstdint>

#include "hitch/cuda/compress/detail/crc32c.hpp"
#include "hitch/cuda/detail/launch.cuh"

namespace hitch::cuda::compress::detail {

// The tables in global memory (computed by the compiler; each translation unit has its copy).
static __device__ constexpr crc32c_table_set device_crc32c_tables{};
static __device__ constexpr crc32c_power_set device_crc32c_powers{};
static __device__ constexpr crc32c_slice_shift_set device_crc32c_slice_shifts{};

/// XOR: joins contributions (commutative, so any reduction order gives the same state).
struct crc32c_xor {
    __host__ __device__ std::uint32_t operator()(std::uint32_t a, std::uint32_t b) const noexcept { return a ^ b; }
};
/// Multiplication mod P: joins shift factors (commutative and associative).
struct crc32c_times {
    __device__ std::uint32_t operator()(std::uint32_t a, std::uint32_t b) const noexcept {
        return crc32c_multiply(a, b);
    }
};

/// What a block needs to checksum tiles: the slicing tables in shared memory and the reductions' storage.
struct crc32c_block {
    using reduce = cub::BlockReduce<std::uint32_t, crc_tile_threads>;
    using warp_reduce = cub::WarpReduce<std::uint32_t>;
    struct storage {
        std::uint32_t t[8][256];
        union {
            typename reduce::TempStorage block;
            typename warp_reduce::TempStorage warp;
        } temp;
    };
};

/// Copies the slicing tables into shared memory (every thread of the block calls it; it ends with a barrier).
__device__ __forceinline__ void load_crc32c_tables(crc32c_block::storage& s) {
    const std::uint32_t* from = &device_crc32c_tables.t[0][0];
    std::uint32_t* to = &s.t[0][0];
    for (unsigned i = threadIdx.x; i < 8 * 256; i += blockDim.x) to[i] = from[i];
    __syncthreads();
}

/// The raw state (from 0) of 64 bytes held as sixteen little-endian words.
__device__ __forceinline__ std::uint32_t crc32c_slice_words(const std::uint32_t (&w)[16],
                                                            const crc32c_block::storage& s) {
    return crc32c_update_words(0, w, 16, s.t);
}

/// Joins the slices of tile `tile` of an n-byte payload, `raw` being this thread's slice state (slice threadIdx.x,
/// detail/crc32c.hpp's crc_slice_of), into the tile's contribution to the payload's raw state, returned in thread 0.
/// Called by all crc_tile_threads threads of the block; the storage is free again when it returns.
__device__ __forceinline__ std::uint32_t crc32c_join_tile(std::uint32_t raw, std::size_t n, std::size_t tile,
                                                          crc32c_block::storage& s) {
    const std::uint32_t mine =
        crc_slice_contribution(raw, n, tile, threadIdx.x, device_crc32c_slice_shifts.x, device_crc32c_powers.x2k);
    const std::uint32_t joined = crc32c_block::reduce(s.temp.block).Reduce(mine, crc32c_xor{});
    __syncthreads();
    // The factor past the rest of the payload: x^(8 after) is the product of x^(2^k) over the bits k of 8 after,
    // one or two bits per lane of the first warp.
    std::uint32_t factor = crc32c_one;
    if (threadIdx.x < 32) {
        const std::uint64_t bits = crc_bytes_after_tile(n, tile) * 8;
        const unsigned k = threadIdx.x;
        const std::uint32_t low = ((bits >> k) & 1u) ? device_crc32c_powers.x2k[k] : crc32c_one;
        const std::uint32_t high = ((bits >> (k + 32)) & 1u) ? device_crc32c_powers.x2k[k + 32] : crc32c_one;
        factor = crc32c_block::warp_reduce(s.temp.warp).Reduce(crc32c_multiply(low, high), crc32c_times{});
    }
    __syncthreads();
    return crc32c_multiply(factor, joined);
}

/// contributions[tile] for every tile of the n bytes at p (grid-stride over tiles; any alignment of p).
static __global__ void __launch_bounds__(crc_tile_threads)
    crc32c_tiles_kernel(const unsigned char* p, std::size_t n, std::uint32_t* contributions) {
    __shared__ crc32c_block::storage s;
    load_crc32c_tables(s);
    const bool aligned = reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
    const std::size_t tiles = crc_tiles(n);
    for (std::size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const crc_slice slice = crc_slice_of(n, tile, threadIdx.x);
        std::uint32_t raw = 0;
        if (aligned && slice.end - slice.begin == crc_slice_bytes) {
            const auto* q = reinterpret_cast<const uint4*>(p + slice.begin);
            std::uint32_t w[16];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const uint4 v = q[k];
                w[4 * k] = v.x;
                w[4 * k + 1] = v.y;
                w[4 * k + 2] = v.z;
                w[4 * k + 3] = v.w;
            }
            raw = crc32c_slice_words(w, s);
        } else {
            raw = crc32c_update(0, p + slice.begin, slice.end - slice.begin, s.t);
        }
        const std::uint32_t c = crc32c_join_tile(raw, n, tile, s);
        if (threadIdx.x == 0) contributions[tile] = c;
    }
}

}  // namespace hitch::cuda::compress::detail
