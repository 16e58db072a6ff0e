#pragma once
// The 16-bit casts on the GPU (compress::fp16, compress::bf16; their device_codec specialisations are in fp16.cuh and
// bf16.cuh). One kernel converts, checks and checksums: a block converts a tile of 8192 elements, each thread 32
// elements read with CUB's blocked vector loads, and checksums its 64 bytes of output while they are in registers
// (detail/crc32c.cuh), so the payload is written once and never read back. The message is the host codec's, byte for
// byte. nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/cast16.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cub/block/block_load.cuh>
#include <cub/block/block_store.cuh>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hitch/compress/detail/cast16.hpp"
#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/cuda/compress/cast.hpp"
#include "hitch/cuda/compress/codec.cuh"
#include "hitch/cuda/compress/detail/crc32c.cuh"
#include "hitch/cuda/compress/detail/wire.cuh"
#include "hitch/cuda/device.hpp"

namespace hitch::cuda::compress::detail {

/// Threads per block and elements per thread of the element-wise kernels: 32 elements of 16 bits are one 64-byte
/// checksum slice, a block's 8192 elements one checksum tile.
inline constexpr unsigned elementwise_threads = crc_tile_threads;
inline constexpr unsigned cast16_per_thread = 32;
inline constexpr std::size_t cast16_tile = elementwise_threads * cast16_per_thread;

/// Loads this thread's run of a tile in a blocked arrangement: vectorised when the tile is full (CUB checks the
/// alignment), else guarded; items past the end are left as they were.
template <class S, int N>
__device__ __forceinline__ void load_run(const S* tile, std::size_t valid, S (&items)[N]) {
    if (valid == static_cast<std::size_t>(N) * blockDim.x)
        cub::LoadDirectBlockedVectorized(static_cast<int>(threadIdx.x), const_cast<S*>(tile), items);
    else
        cub::LoadDirectBlocked(static_cast<int>(threadIdx.x), tile, items, static_cast<int>(valid));
}

/// Stores this thread's run of a tile (vectorised when the tile is full and aligned, else guarded).
template <class S, int N>
__device__ __forceinline__ void store_run(S* tile, std::size_t valid, S (&items)[N]) {
    if (valid == static_cast<std::size_t>(N) * blockDim.x && reinterpret_cast<std::uintptr_t>(tile) % 16 == 0)
        cub::StoreDirectBlockedVectorized(static_cast<int>(threadIdx.x), tile, items);
    else
        cub::StoreDirectBlocked(static_cast<int>(threadIdx.x), tile, items, static_cast<int>(valid));
}

/// Stores `count` 16-bit words (packed two per word in w) at out: four 16-byte stores for a whole run at an aligned
/// address, else one word at a time.
__device__ __forceinline__ void store_halves(std::uint16_t* out, const std::uint32_t (&w)[cast16_per_thread / 2],
                                             unsigned count) {
    if (count == cast16_per_thread && reinterpret_cast<std::uintptr_t>(out) % 16 == 0) {
        auto* q = reinterpret_cast<uint4*>(out);
#pragma unroll
        for (int k = 0; k < 4; ++k) q[k] = make_uint4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]);
    } else {
        for (unsigned k = 0; k < count; ++k) out[k] = static_cast<std::uint16_t>(w[k / 2] >> (16 * (k % 2)));
    }
}

/// out[i] = Format's word for v = in[i] (+ r_in[i]); with EF r_out = v - value; with Checksum each tile's contribution
/// to the payload's raw CRC32C goes to contributions[tile]; a non-finite word raises *bad.
template <class Format, bool EF, bool Checksum, class T>
__global__ void __launch_bounds__(elementwise_threads)
    cast16_encode_kernel(const storage_t<T>* in, const float* r_in, float* r_out, std::size_t n, std::uint16_t* out,
                         std::uint32_t* contributions, std::uint32_t* bad) {
    __shared__ crc32c_block::storage s;
    if constexpr (Checksum) load_crc32c_tables(s);
    using S = storage_t<T>;
    const std::size_t tiles = (n + cast16_tile - 1) / cast16_tile;
    bool refused = false;
    for (std::size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const std::size_t base = tile * cast16_tile;
        const std::size_t valid = n - base < cast16_tile ? n - base : cast16_tile;
        S x[cast16_per_thread] = {};
        float r[cast16_per_thread] = {};
        float rest[cast16_per_thread] = {};
        load_run(in + base, valid, x);
        if constexpr (EF) load_run(r_in + base, valid, r);
        const std::size_t first = base + threadIdx.x * cast16_per_thread;
        const unsigned count =
            first < n ? static_cast<unsigned>(n - first < cast16_per_thread ? n - first : cast16_per_thread) : 0u;
        std::uint32_t w[cast16_per_thread / 2] = {};
#pragma unroll
        for (unsigned k = 0; k < cast16_per_thread; ++k) {
            if (k < count) {
                const std::uint16_t h = cast16_encode<Format, EF>(element<T>::to_float(x[k]), r[k], rest[k], refused);
                w[k / 2] |= static_cast<std::uint32_t>(h) << (16 * (k % 2));
            }
        }
        if constexpr (EF) store_run(r_out + base, valid, rest);
        if (count != 0) store_halves(out + first, w, count);
        if constexpr (Checksum) {
            const std::uint32_t raw =
                count == cast16_per_thread
                    ? crc32c_update_words(0, w, cast16_per_thread / 2, s.t)
                    : crc32c_update(0, reinterpret_cast<const unsigned char*>(w), 2 * std::size_t{count}, s.t);
            const std::uint32_t c = crc32c_join_tile(raw, 2 * n, tile, s);
            if (threadIdx.x == 0) contributions[tile] = c;
        }
    }
    if (__syncthreads_or(refused ? 1 : 0) != 0 && threadIdx.x == 0) atomicOr(bad, 1u);
}

/// A 16-bit word of a payload at any byte alignment.
__device__ __forceinline__ std::uint16_t load_u16(const unsigned char* p, std::size_t i, bool aligned) {
    if (aligned) return reinterpret_cast<const std::uint16_t*>(p)[i];
    return static_cast<std::uint16_t>(p[2 * i] | p[2 * i + 1] << 8);
}

template <class Format, bool Add, class T>
__global__ void cast16_decode_kernel(const unsigned char* in, storage_t<T>* out, std::size_t n) {
    const bool aligned = reinterpret_cast<std::uintptr_t>(in) % 2 == 0;
    for (std::size_t i = cuda::detail::grid_index(); i < n; i += cuda::detail::grid_stride())
        out[i] = store_float<Add, T>(out[i], Format::value(load_u16(in, i, aligned)));
}

template <class Format, class T>
__global__ void cast16_summed_kernel(const std::uint16_t* sum, storage_t<T>* out, std::size_t n) {
    for (std::size_t i = cuda::detail::grid_index(); i < n; i += cuda::detail::grid_stride())
        out[i] = element<T>::from_float(Format::value(sum[i]));
}

/// The GPU form of compress::detail::cast16<HostFormat>: Codec is fp16 or bf16, Format its word rule (cast.hpp).
template <class Codec, class Format, class HostFormat>
class cast16_device {
public:
    using codec_type = Codec;
    using state = hitch::compress::empty_state;
    template <class T>
    using summable_t = typename HostFormat::storage;
    static constexpr std::string_view who = Codec::who;

    cast16_device() = default;
    explicit cast16_device(const Codec& codec) : codec_(codec) {}
    [[nodiscard]] const Codec& codec() const noexcept { return codec_; }

    [[nodiscard]] state make_state(cuda::device&, std::size_t n) const { return {n}; }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept { return codec_.max_message_bytes(n); }

    /// Encodes a device bucket into `out`; returns the message size. Throws non_finite_error (as the host codec)
    /// when the bucket or its conversion holds NaN or an infinity. Waits for the stream (to know that).
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode(cuda::device& dev, tensor_view<T> in, state& s, device_message& out) const {
        require_device(in, who);
        check_state_size(who, s.count, in.size());
        return convert<false>(dev, tensor_view<const std::remove_const_t<T>>(in), {}, {}, out, not_representable());
    }

    /// Error feedback: sends cast(g + r_in), writes r_out = g + r_in - cast(g + r_in) (device floats).
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode_ef(cuda::device& dev, tensor_view<T> g, tensor_view<const float> r_in, tensor_view<float> r_out,
                          state& s, device_message& out) const {
        require_device(g, who);
        check_state_size(who, s.count, g.size());
        check_residuals(who, r_in, r_out, g.size());
        return convert<true>(dev, tensor_view<const std::remove_const_t<T>>(g), r_in, r_out, out,
                             "the bucket plus its residual (or its conversion)");
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

    // Additive form: the 16-bit values, summed by an all-reduce (device buffers of summable_t).
    [[nodiscard]] std::size_t summable_count(const state&, std::size_t n) const noexcept { return n; }
    template <class T, class S>
        requires floating_element<std::remove_const_t<T>>
    void encode_summable(cuda::device& dev, tensor_view<T> in, state& s, tensor_view<S> out) const {
        static_assert(std::is_same_v<S, typename HostFormat::storage>, "encode_summable writes summable_t values");
        require_device(in, who);
        require_device(out, who);
        check_state_size(who, s.count, in.size());
        if (out.size() < in.size())
            throw config_error(
                hitch::detail::concat(who, ": ", out.size(), " summable values for a bucket of ", in.size()));
        using U = std::remove_const_t<T>;
        if (in.empty()) return;
        device_flag bad(dev);
        activate(dev);
        cast16_encode_kernel<Format, false, false, U>
            <<<tile_grid(tiles(in.size())), elementwise_threads, 0, dev.stream()>>>(
                storage_of(tensor_view<const U>(in)), nullptr, nullptr, in.size(),
                reinterpret_cast<std::uint16_t*>(out.data()), nullptr, bad.data());
        cuda::detail::check_launch("hitch::cuda::compress cast16_encode_kernel");
        if (bad.read() != 0) hitch::compress::detail::throw_non_finite(who, not_representable());
    }
    template <class S, class T>
        requires floating_element<T>
    void decode_summed(cuda::device& dev, tensor_view<const S> sum, const state&, tensor_view<T> out) const {
        static_assert(std::is_same_v<S, typename HostFormat::storage>, "decode_summed reads summable_t values");
        require_device(sum, who);
        require_device(out, who);
        if (out.empty()) return;
        activate(dev);
        cast16_summed_kernel<Format, T>
            <<<cuda::detail::grid_blocks(out.size()), cuda::detail::block_threads, 0, dev.stream()>>>(
                reinterpret_cast<const std::uint16_t*>(sum.data()), storage_of(out), out.size());
        cuda::detail::check_launch("hitch::cuda::compress cast16_summed_kernel");
    }

    /// The same blobs as the host codec's (the state is the bucket size only).
    void save_state(cuda::device&, const state& s, std::vector<std::byte>& blob) const { codec_.save_state(s, blob); }
    void load_state(cuda::device&, std::span<const std::byte> blob, state& s) const { codec_.load_state(blob, s); }

private:
    [[nodiscard]] static std::size_t tiles(std::size_t n) noexcept { return (n + cast16_tile - 1) / cast16_tile; }
    [[nodiscard]] static std::string not_representable() {
        return hitch::detail::concat("the bucket (or its conversion to ", HostFormat::what, ")");
    }

    template <bool EF, class T>
    std::size_t convert(cuda::device& dev, tensor_view<const T> in, tensor_view<const float> r_in,
                        tensor_view<float> r_out, device_message& out, const std::string& what) const {
        const std::size_t n = in.size();
        message_writer w(dev, out, Codec::codec_id, dtype_of<T>(), n, 2 * n);
        device_flag bad(dev);
        if (n != 0) {
            device_scratch<std::uint32_t> contributions(dev, tiles(n));
            activate(dev);
            cast16_encode_kernel<Format, EF, true, T><<<tile_grid(tiles(n)), elementwise_threads, 0, dev.stream()>>>(
                storage_of(in), EF ? r_in.data() : nullptr, EF ? r_out.data() : nullptr, n,
                reinterpret_cast<std::uint16_t*>(w.payload()), contributions.data(), bad.data());
            cuda::detail::check_launch("hitch::cuda::compress cast16_encode_kernel");
            join_tiles(dev, contributions.data(), tiles(n), w.payload_raw());
        } else {
            join_tiles(dev, nullptr, 0, w.payload_raw());
        }
        const std::size_t size = w.finish_with_payload_crc();
        if (bad.read() != 0) hitch::compress::detail::throw_non_finite(who, what);
        return size;
    }

    template <bool Add, class T>
    void decode_any(cuda::device& dev, tensor_view<const std::byte> bytes, tensor_view<T> out) const {
        require_device(out, who);
        const device_message_view m = open(dev, bytes, {who, Codec::codec_id});
        expect_count(m, out.size(), who);
        if (m.payload_bytes != 2 * out.size())
            wire::corrupt(who, hitch::detail::concat("payload of ", m.payload_bytes, " bytes for ", out.size(), " ",
                                                     HostFormat::what, " elements"));
        if (out.empty()) return;
        activate(dev);
        cast16_decode_kernel<Format, Add, T>
            <<<cuda::detail::grid_blocks(out.size()), cuda::detail::block_threads, 0, dev.stream()>>>(
                reinterpret_cast<const unsigned char*>(m.payload), storage_of(out), out.size());
        cuda::detail::check_launch("hitch::cuda::compress cast16_decode_kernel");
    }

    Codec codec_{};
};

}  // namespace hitch::cuda::compress::detail
