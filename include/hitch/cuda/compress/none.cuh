#pragma once
// compress::none on the GPU: hitch::compress::device_codec<none, cuda::device>. The payload is the bucket's bytes;
// the encode copies them into the message and checksums each 64-byte slice while it holds it (one pass, no second
// read), and never waits for the device. nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/none.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/cuda/compress/cast.hpp"
#include "hitch/cuda/compress/codec.cuh"
#include "hitch/cuda/compress/detail/crc32c.cuh"
#include "hitch/cuda/compress/detail/wire.cuh"
#include "hitch/cuda/device.hpp"

namespace hitch::cuda::compress::detail {

/// Copies `bytes` bytes from `in` to `out` and writes each 16 KiB tile's contribution to the copy's raw CRC32C:
/// thread t of a block moves and checksums slice t of a tile (16-byte loads and stores where both sides allow).
static __global__ void __launch_bounds__(crc_tile_threads)
    copy_checksum_kernel(const unsigned char* in, unsigned char* out, std::size_t bytes, std::uint32_t* contributions) {
    __shared__ crc32c_block::storage s;
    load_crc32c_tables(s);
    const bool wide = reinterpret_cast<std::uintptr_t>(in) % 16 == 0 && reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
    const std::size_t tiles = crc_tiles(bytes);
    for (std::size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const crc_slice slice = crc_slice_of(bytes, tile, threadIdx.x);
        std::uint32_t raw = 0;
        if (wide && slice.end - slice.begin == crc_slice_bytes) {
            const auto* q = reinterpret_cast<const uint4*>(in + slice.begin);
            auto* o = reinterpret_cast<uint4*>(out + slice.begin);
            std::uint32_t w[16];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const uint4 v = q[k];
                o[k] = v;
                w[4 * k] = v.x;
                w[4 * k + 1] = v.y;
                w[4 * k + 2] = v.z;
                w[4 * k + 3] = v.w;
            }
            raw = crc32c_slice_words(w, s);
        } else {
            for (std::size_t i = slice.begin; i < slice.end; ++i) {
                out[i] = in[i];
                raw = crc32c_update1(raw, in[i], s.t);
            }
        }
        const std::uint32_t c = crc32c_join_tile(raw, bytes, tile, s);
        if (threadIdx.x == 0) contributions[tile] = c;
    }
}

/// v = float(g) + r_in (none's encode_ef), raising *bad for a non-finite v.
template <class T>
__global__ void none_add_residual_kernel(const storage_t<T>* g, const float* r_in, float* v, std::size_t n,
                                         std::uint32_t* bad) {
    bool refused = false;
    for (std::size_t i = cuda::detail::grid_index(); i < n; i += cuda::detail::grid_stride()) {
        v[i] = hd::add(element<T>::to_float(g[i]), r_in[i]);
        refused = refused || !finite(v[i]);
    }
    if (refused) atomicOr(bad, 1u);
}

/// Element i of a payload of D at any alignment.
template <class D>
__device__ __forceinline__ storage_t<D> load_element(const unsigned char* p, std::size_t i, bool aligned) {
    using S = storage_t<D>;
    if (aligned) return reinterpret_cast<const S*>(p)[i];
    S v;
    unsigned char* b = reinterpret_cast<unsigned char*>(&v);
    for (std::size_t k = 0; k < sizeof(S); ++k) b[k] = p[i * sizeof(S) + k];
    return v;
}

template <bool Add, class D, class T>
__global__ void none_decode_kernel(const unsigned char* in, storage_t<T>* out, std::size_t n) {
    const bool aligned = reinterpret_cast<std::uintptr_t>(in) % sizeof(storage_t<D>) == 0;
    for (std::size_t i = cuda::detail::grid_index(); i < n; i += cuda::detail::grid_stride())
        out[i] = none_store<Add, D, T>(out[i], load_element<D>(in, i, aligned));
}

}  // namespace hitch::cuda::compress::detail

namespace hitch::compress {

/// compress::none for device buckets: the message holds the elements as they are (additive, exact).
template <>
class device_codec<none, cuda::device> {
public:
    using codec_type = none;
    using state = empty_state;
    template <class T>
    using summable_t = std::remove_const_t<T>;
    static constexpr std::string_view who = none::who;

    device_codec() = default;
    explicit device_codec(const none& codec) : codec_(codec) {}
    [[nodiscard]] const none& codec() const noexcept { return codec_; }

    [[nodiscard]] state make_state(cuda::device&, std::size_t n) const { return {n}; }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept { return codec_.max_message_bytes(n); }

    /// Copies the bucket into a message (queued: no wait for the device).
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode(cuda::device& dev, tensor_view<T> in, state& s, cuda::compress::device_message& out) const {
        using U = std::remove_const_t<T>;
        cuda::compress::detail::require_device(in, who);
        cuda::compress::detail::check_state_size(who, s.count, in.size());
        return write(dev, reinterpret_cast<const unsigned char*>(in.data()), in.size(), dtype_of<U>(), sizeof(U), out);
    }

    /// Sends g + r_in exactly (a float message); r_out becomes zero. Refuses a non-finite g + r_in before writing.
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode_ef(cuda::device& dev, tensor_view<T> g, tensor_view<const float> r_in, tensor_view<float> r_out,
                          state& s, cuda::compress::device_message& out) const {
        using U = std::remove_const_t<T>;
        namespace cd = cuda::compress::detail;
        cd::require_device(g, who);
        cd::check_state_size(who, s.count, g.size());
        cd::check_residuals(who, r_in, r_out, g.size());
        const std::size_t n = g.size();
        cd::device_scratch<float> v(dev, n);
        cd::device_flag bad(dev);
        if (n != 0) {
            cd::activate(dev);
            cd::none_add_residual_kernel<U>
                <<<cuda::detail::grid_blocks(n), cuda::detail::block_threads, 0, dev.stream()>>>(
                    cd::storage_of(tensor_view<const U>(g)), r_in.data(), v.data(), n, bad.data());
            cuda::detail::check_launch("hitch::cuda::compress none_add_residual_kernel");
        }
        if (bad.read() != 0) detail::throw_non_finite(who);
        const std::size_t size =
            write(dev, reinterpret_cast<const unsigned char*>(v.data()), n, dtype::f32, sizeof(float), out);
        dev.fill_zero(r_out.data(), n * sizeof(float));
        return size;
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

    // Additive form: the elements themselves.
    [[nodiscard]] std::size_t summable_count(const state&, std::size_t n) const noexcept { return n; }
    template <class T, class S>
    void encode_summable(cuda::device& dev, tensor_view<T> in, state& s, tensor_view<S> out) const {
        static_assert(std::is_same_v<S, std::remove_const_t<T>>, "none's summable values are the elements");
        cuda::compress::detail::require_device(in, who);
        cuda::compress::detail::require_device(out, who);
        cuda::compress::detail::check_state_size(who, s.count, in.size());
        dev.copy(out.data(), in.data(), in.size() * sizeof(S));
    }
    template <class S, class T>
    void decode_summed(cuda::device& dev, tensor_view<const S> sum, const state&, tensor_view<T> out) const {
        static_assert(std::is_same_v<S, T>, "none's summable values are the elements");
        cuda::compress::detail::require_device(sum, who);
        cuda::compress::detail::require_device(out, who);
        dev.copy(out.data(), sum.data(), out.size() * sizeof(T));
    }

    void save_state(cuda::device&, const state& s, std::vector<std::byte>& blob) const { codec_.save_state(s, blob); }
    void load_state(cuda::device&, std::span<const std::byte> blob, state& s) const { codec_.load_state(blob, s); }

private:
    static std::size_t write(cuda::device& dev, const unsigned char* in, std::size_t n, dtype type, std::size_t width,
                             cuda::compress::device_message& out) {
        namespace cd = cuda::compress::detail;
        const std::size_t bytes = n * width;
        cuda::compress::message_writer w(dev, out, codec_id(), type, n, bytes);
        const std::size_t tiles = cd::crc_tiles(bytes);
        cd::device_scratch<std::uint32_t> contributions(dev, tiles);
        if (tiles != 0) {
            cd::activate(dev);
            cd::copy_checksum_kernel<<<cd::tile_grid(tiles), cd::crc_tile_threads, 0, dev.stream()>>>(
                in, reinterpret_cast<unsigned char*>(w.payload()), bytes, contributions.data());
            cuda::detail::check_launch("hitch::cuda::compress copy_checksum_kernel");
        }
        cd::join_tiles(dev, contributions.data(), tiles, w.payload_raw());
        return w.finish_with_payload_crc();
    }
    static constexpr std::uint8_t codec_id() noexcept { return none::codec_id; }

    template <bool Add, class D, class T>
    static void launch_decode(cuda::device& dev, const std::byte* p, tensor_view<T> out) {
        namespace cd = cuda::compress::detail;
        cd::activate(dev);
        cd::none_decode_kernel<Add, D, T>
            <<<cuda::detail::grid_blocks(out.size()), cuda::detail::block_threads, 0, dev.stream()>>>(
                reinterpret_cast<const unsigned char*>(p), cd::storage_of(out), out.size());
        cuda::detail::check_launch("hitch::cuda::compress none_decode_kernel");
    }

    template <bool Add, class T>
    void decode_any(cuda::device& dev, tensor_view<const std::byte> bytes, tensor_view<T> out) const {
        cuda::compress::detail::require_device(out, who);
        const cuda::compress::device_message_view m = cuda::compress::open(dev, bytes, {who, none::codec_id});
        cuda::compress::expect_count(m, out.size(), who);
        const std::size_t width = size_of(m.head.type);
        if (m.payload_bytes != out.size() * width)
            wire::corrupt(who, hitch::detail::concat("payload of ", m.payload_bytes, " bytes for ", out.size(),
                                                     " elements of ", hitch::name(m.head.type)));
        if (out.empty()) return;
        switch (m.head.type) {
            case dtype::f16:
                launch_decode<Add, half>(dev, m.payload, out);
                break;
            case dtype::bf16:
                launch_decode<Add, bfloat16>(dev, m.payload, out);
                break;
            case dtype::f32:
                launch_decode<Add, float>(dev, m.payload, out);
                break;
            default:
                launch_decode<Add, double>(dev, m.payload, out);
                break;  // open() admits only floating types
        }
    }

    none codec_{};
};

}  // namespace hitch::compress
