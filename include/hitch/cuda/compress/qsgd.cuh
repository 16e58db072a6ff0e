#pragma once
// compress::qsgd on the GPU: hitch::compress::device_codec<qsgd, cuda::device>. The message and the residual are the
// host codec's, bit for bit:
//
//   norms     the groups' sums of squares in the host's order (quantize.cuh), one thread per group for its norm and
//             quantiser (quantize.hpp's qsgd_setup)
//   codes     one thread per 8 elements: the host's stochastic rounding with the host's keyed counter-based random
//             bits (random.hpp), packed into 8 b bits = b bytes of the fixed-width stream
//   Elias     the codes kept, each non-zero level's entry length from the previous non-zero index (a CUB max scan),
//             the entries' bit offsets (a CUB sum scan), every entry written at its offset with atomic ORs
//   decode    fixed: every code checked, then one thread per 8 codes; Elias: the stream parsed in parallel chunks
//             whose walks from guessed starts are corrected in rounds until they agree (quantize.hpp), then every
//             entry decoded and checked at once, the values scattered
//
// The random counters stay on the host side of the state (they key the launches); the payload is checksummed by
// detail/wire.cuh's tiles. nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/qsgd.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/compress/qsgd.hpp"
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

/// Per group: norm and quantiser from the group's sum of squares; the norm into `norms` (4 bytes per group, any
/// alignment), *bad for a non-finite group.
static __global__ void qsgd_groups_kernel(const moments* totals, std::size_t groups, std::uint32_t levels,
                                          unsigned char* norms, quantizer* quantizers, std::uint32_t* bad) {
    for (std::size_t k = cuda::detail::grid_index(); k < groups; k += cuda::detail::grid_stride()) {
        const qsgd_group g = qsgd_setup(totals[k].sum_squares, levels);
        if (!g.finite) atomicOr(bad, 1u);
        store_f32(norms + 4 * k, g.norm);
        quantizers[k] = g.q;
    }
}

/// One thread per 8 elements: codes of v = g (+ r_in) (and with EF the residual), packed as b-bit codes at
/// `packed` (fixed coding) or kept in `codes` (Elias).
template <bool EF, bool Packed>
__global__ void qsgd_quantize_kernel(const float* g, const float* r_in, float* r_out, std::size_t n, std::size_t size,
                                     const quantizer* quantizers, std::uint64_t key, unsigned b, unsigned char* packed,
                                     std::uint16_t* codes) {
    const counter_rng base(key);
    const std::size_t runs = (n + 7) / 8;
    for (std::size_t t = cuda::detail::grid_index(); t < runs; t += cuda::detail::grid_stride()) {
        const std::size_t first = 8 * t;
        const unsigned count = n - first < 8 ? static_cast<unsigned>(n - first) : 8u;
        std::uint32_t c[8] = {};
        quantize_run<EF, false>(g, r_in, r_out, first, count, quantizers[first / size], base, c);
        if constexpr (Packed)
            pack_codes8(c, count, b, packed + b * t);
        else
            for (unsigned j = 0; j < count; ++j) codes[first + j] = static_cast<std::uint16_t>(c[j]);
    }
}

// ---- Elias coding -----------------------------------------------------------------------------------------------

struct max_u64 {
    __host__ __device__ std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const noexcept {
        return a < b ? b : a;
    }
};
struct sum_u64 {
    __host__ __device__ std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const noexcept { return a + b; }
};

/// keys[i] = i + 1 where code i has a non-zero level, else 0 (a max scan of them gives the previous non-zero index).
static __global__ void elias_keys_kernel(const std::uint16_t* codes, std::size_t n, std::uint64_t* keys,
                                         std::uint32_t* nonzero) {
    for (std::size_t i = cuda::detail::grid_index(); i < n; i += cuda::detail::grid_stride()) {
        const bool nz = (codes[i] >> 1) != 0;
        keys[i] = nz ? i + 1 : 0;
        nonzero[i] = nz ? 1u : 0u;
    }
}

/// lengths[i] = bits of element i's entry (0 for a zero level), from prev[i] = index + 1 of the previous non-zero.
static __global__ void elias_lengths_kernel(const std::uint16_t* codes, const std::uint64_t* prev, std::size_t n,
                                            std::uint64_t* lengths) {
    for (std::size_t i = cuda::detail::grid_index(); i < n; i += cuda::detail::grid_stride())
        lengths[i] = (codes[i] >> 1) != 0 ? elias_entry_bits(i + 1 - prev[i], codes[i]) : 0;
}

/// Writes every non-zero level's entry at its bit offset (quantize.hpp's elias_entry), ORing its 1 bits into the
/// stream's 32-bit words (bit p is bit 7 - p % 8 of byte p / 8, the bytes little-endian in a word).
static __global__ void elias_write_kernel(const std::uint16_t* codes, const std::uint64_t* prev,
                                          const std::uint64_t* offsets, std::size_t n, std::uint32_t* words) {
    for (std::size_t i = cuda::detail::grid_index(); i < n; i += cuda::detail::grid_stride()) {
        if ((codes[i] >> 1) == 0) continue;
        elias_entry(offsets[i], i + 1 - prev[i], codes[i], [words](std::uint64_t p) {
            const std::uint64_t byte = p / 8;
            atomicOr(words + byte / 4, 1u << (8 * (byte % 4) + (7 - p % 8)));
        });
    }
}

// The parallel parse of an Elias stream (quantize.hpp): chunk walks, rounds, the starts, the entries.

static __global__ void elias_first_walks_kernel(const unsigned char* s, std::size_t bytes, std::uint64_t chunks,
                                                std::uint32_t* marks, std::uint64_t* in, elias_walk* walks) {
    for (std::uint64_t c = cuda::detail::grid_index(); c < chunks; c += cuda::detail::grid_stride()) {
        const elias_chunk ch = elias_chunk_of(s, bytes, c, elias_chunk_bits, marks);
        in[c] = ch.begin;
        walks[c] = ch.first_walk(ch.begin);
    }
}

static __global__ void elias_round_kernel(const unsigned char* s, std::size_t bytes, std::uint64_t chunks,
                                          std::uint32_t* marks, std::uint64_t* in, const elias_walk* now,
                                          elias_walk* next, std::uint32_t* changed) {
    bool walked = false;
    for (std::uint64_t c = cuda::detail::grid_index(); c < chunks; c += cuda::detail::grid_stride()) {
        if (c == 0) {
            next[0] = now[0];
            continue;
        }
        const elias_chunk ch = elias_chunk_of(s, bytes, c, elias_chunk_bits, marks);
        walked = elias_round(ch, now[c - 1].exit, in[c], now[c], next[c]) || walked;
    }
    if (walked) atomicOr(changed, 1u);
}

static __global__ void elias_counts_kernel(const elias_walk* walks, std::uint64_t chunks, std::uint64_t* entries) {
    for (std::uint64_t c = cuda::detail::grid_index(); c < chunks; c += cuda::detail::grid_stride())
        entries[c] = walks[c].entries;
}

static __global__ void elias_starts_kernel(const unsigned char* s, std::size_t bytes, std::uint64_t chunks,
                                           std::uint32_t* marks, const std::uint64_t* in, const std::uint64_t* offsets,
                                           std::uint64_t limit, std::uint64_t* starts) {
    for (std::uint64_t c = cuda::detail::grid_index(); c < chunks; c += cuda::detail::grid_stride())
        elias_list_starts(elias_chunk_of(s, bytes, c, elias_chunk_bits, marks), in[c], offsets[c], limit, starts);
}

/// Entry j's fields; a level above s lowers *key to its failure.
static __global__ void elias_fields_kernel(const unsigned char* s, std::size_t bytes, const std::uint64_t* starts,
                                           std::uint64_t m, std::uint32_t levels, std::uint64_t* gaps,
                                           std::uint32_t* code, std::uint64_t* level, unsigned long long* key) {
    for (std::uint64_t j = cuda::detail::grid_index(); j < m; j += cuda::detail::grid_stride()) {
        const elias_entry_fields f = elias_entry_at(s, bytes, starts[j]);
        gaps[j] = f.gap;
        level[j] = f.level;
        code[j] = static_cast<std::uint32_t>(f.level << 1 | f.sign);
        if (f.level > levels) atomicMin(key, static_cast<unsigned long long>(elias_failure_key(j, 2)));
    }
}

/// index[j] from the saturated sums of the gaps; an index past the bucket lowers *key to its failure.
static __global__ void elias_index_kernel(const std::uint64_t* sums, std::uint64_t m, std::uint64_t n,
                                          std::uint64_t* index, unsigned long long* key) {
    for (std::uint64_t j = cuda::detail::grid_index(); j < m; j += cuda::detail::grid_stride()) {
        if (sums[j] > n) atomicMin(key, static_cast<unsigned long long>(elias_failure_key(j, 1)));
        index[j] = sums[j] - 1;
    }
}

/// Whether only padding follows entry nnz - 1 (elias_parse's last check).
static __global__ void elias_tail_kernel(const unsigned char* s, std::size_t bytes, const std::uint64_t* starts,
                                         std::uint64_t nnz, std::uint32_t* ok) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const std::uint64_t end = nnz == 0 ? 0 : elias_entry_at(s, bytes, starts[nnz - 1]).end;
    *ok = elias_only_padding(s, bytes, end) ? 1u : 0u;
}

static __global__ void elias_scatter_kernel(const std::uint64_t* index, const std::uint32_t* code, std::uint64_t nnz,
                                            const unsigned char* norms, std::uint32_t levels, std::size_t size,
                                            float* out) {
    for (std::size_t j = cuda::detail::grid_index(); j < nnz; j += cuda::detail::grid_stride()) {
        const std::size_t i = index[j];
        const float unit = hd::div(load_f32(norms + 4 * (i / size)), static_cast<float>(levels));
        out[i] = hd::add(out[i], code_value(code[j], unit));
    }
}

// ---- fixed coding decode ----------------------------------------------------------------------------------------

/// The first group whose norm the decoder refuses (atomicMin).
static __global__ void qsgd_norm_check_kernel(const unsigned char* norms, std::size_t groups,
                                              unsigned long long* first) {
    for (std::size_t k = cuda::detail::grid_index(); k < groups; k += cuda::detail::grid_stride()) {
        const float norm = load_f32(norms + 4 * k);
        if (!finite(norm) || norm < 0.0f) atomicMin(first, static_cast<unsigned long long>(k));
    }
}

/// The first code the decoder refuses (atomicMin), one thread per 8 codes.
static __global__ void qsgd_code_check_kernel(const unsigned char* stream, std::size_t n, unsigned b,
                                              std::uint32_t levels, unsigned long long* first) {
    for (std::size_t t = cuda::detail::grid_index(); t < (n + 7) / 8; t += cuda::detail::grid_stride()) {
        const unsigned count = n - 8 * t < 8 ? static_cast<unsigned>(n - 8 * t) : 8u;
        for (unsigned j = 0; j < count; ++j)
            if (code_invalid(code_from(stream + b * t, std::size_t{j} * b, b), levels)) {
                atomicMin(first, static_cast<unsigned long long>(8 * t + j));
                break;
            }
    }
}

template <bool Add, class T>
__global__ void qsgd_decode_kernel(const unsigned char* norms, const unsigned char* stream, std::size_t n,
                                   std::size_t size, unsigned b, std::uint32_t levels, storage_t<T>* out) {
    for (std::size_t t = cuda::detail::grid_index(); t < (n + 7) / 8; t += cuda::detail::grid_stride()) {
        const std::size_t first = 8 * t;
        const unsigned count = n - first < 8 ? static_cast<unsigned>(n - first) : 8u;
        const float unit = hd::div(load_f32(norms + 4 * (first / size)), static_cast<float>(levels));
        for (unsigned j = 0; j < count; ++j)
            out[first + j] =
                store_float<Add, T>(out[first + j], code_value(code_from(stream + b * t, std::size_t{j} * b, b), unit));
    }
}

}  // namespace hitch::cuda::compress::detail

namespace hitch::compress {

/// compress::qsgd for device buckets (see cuda/compress/qsgd.cuh): encode, encode_ef, decode, decode_add, undo,
/// save_state / load_state.
template <>
class device_codec<qsgd, cuda::device> {
public:
    using codec_type = qsgd;
    /// The counters (step, stream) key the random numbers; they live on the host and travel as the host's blob.
    struct state {
        std::size_t count = 0;
        std::uint64_t step = 0;
        std::uint64_t stream = 0;
    };
    static constexpr std::string_view who = qsgd::who;

    device_codec() = default;
    explicit device_codec(const qsgd& codec) : codec_(codec) {}
    [[nodiscard]] const qsgd& codec() const noexcept { return codec_; }

    [[nodiscard]] state make_state(cuda::device&, std::size_t n) const { return {n, 0, 0}; }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept { return codec_.max_message_bytes(n); }

    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode(cuda::device& dev, tensor_view<T> in, state& s, cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        cd::require_device(in, who);
        cd::check_state_size(who, s.count, in.size());
        const cd::device_floats g(dev, in);
        return encode_impl<false>(dev, g.data(), nullptr, nullptr, in.size(), s, dtype_of<std::remove_const_t<T>>(),
                                  out);
    }

    /// Encodes v = g + r_in; r_out = v - Q(v) (device floats).
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode_ef(cuda::device& dev, tensor_view<T> g, tensor_view<const float> r_in, tensor_view<float> r_out,
                          state& s, cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        cd::require_device(g, who);
        cd::check_state_size(who, s.count, g.size());
        cd::check_residuals(who, r_in, r_out, g.size());
        const cd::device_floats v(dev, g);
        return encode_impl<true>(dev, v.data(), r_in.data(), r_out.data(), g.size(), s,
                                 dtype_of<std::remove_const_t<T>>(), out);
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
        codec_.save_state(qsgd::state{s.count, s.step, s.stream, {}, {}}, blob);
    }
    void load_state(cuda::device&, std::span<const std::byte> blob, state& s) const {
        qsgd::state h = codec_.make_state(s.count);
        codec_.load_state(blob, h);
        s.step = h.step;
        s.stream = h.stream;
    }

private:
    template <bool EF>
    std::size_t encode_impl(cuda::device& dev, const float* g, const float* r_in, float* r_out, std::size_t n, state& s,
                            dtype type, cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        const qsgd_options& o = codec_.options();
        const std::size_t size = o.group_size == 0 || o.group_size >= n ? n : o.group_size;
        const cd::moment_plan plan = cd::make_moment_plan(n, size);
        const std::size_t groups = plan.groups;
        const unsigned b = codec_.code_bits();
        const std::size_t front = 16 + 4 * groups;
        const bool fixed = o.coding == qsgd_coding::fixed;
        const std::uint64_t key = cd::draw_key(o.seed, s.stream, s.step);
        std::array<std::byte, 16> head{};
        wire::store_le<std::uint32_t>(head.data(), o.levels);
        wire::store_le<std::uint8_t>(head.data() + 4, static_cast<std::uint8_t>(o.coding));
        wire::store_le<std::uint64_t>(head.data() + 8, size >= n ? 0 : size);

        cd::device_flag bad(dev);
        cd::device_scratch<cd::moments> partials(dev, plan.blocks), totals(dev, groups);
        cd::device_scratch<cd::quantizer> quantizers(dev, groups);
        cd::device_scratch<unsigned char> norms(dev, fixed ? 0 : 4 * groups);
        std::optional<cuda::compress::message_writer> w;
        if (fixed) w.emplace(dev, out, qsgd::codec_id, type, n, front + cd::code_bytes(n, b));
        unsigned char* norm_at = fixed ? reinterpret_cast<unsigned char*>(w->payload()) + 16 : norms.data();
        cd::device_scratch<std::uint16_t> codes(dev, fixed ? 0 : n);
        if (n != 0) {
            cd::activate(dev);
            cd::launch_moments<EF, true, false, false>(dev.stream(), g, r_in, plan, partials.data());
            cd::moment_groups_kernel<<<cuda::detail::grid_blocks(groups, 128), 128, 0, dev.stream()>>>(
                partials.data(), plan, totals.data());
            cuda::detail::check_launch("hitch::cuda::compress moment_groups_kernel");
            cd::qsgd_groups_kernel<<<cuda::detail::grid_blocks(groups, 128), 128, 0, dev.stream()>>>(
                totals.data(), groups, o.levels, norm_at, quantizers.data(), bad.data());
            cuda::detail::check_launch("hitch::cuda::compress qsgd_groups_kernel");
            const std::size_t runs = (n + 7) / 8;
            auto* packed = fixed ? reinterpret_cast<unsigned char*>(w->payload()) + front : nullptr;
            if (fixed)
                cd::qsgd_quantize_kernel<EF, true>
                    <<<cuda::detail::grid_blocks(runs), cuda::detail::block_threads, 0, dev.stream()>>>(
                        g, r_in, r_out, n, size, quantizers.data(), key, b, packed, nullptr);
            else
                cd::qsgd_quantize_kernel<EF, false>
                    <<<cuda::detail::grid_blocks(runs), cuda::detail::block_threads, 0, dev.stream()>>>(
                        g, r_in, r_out, n, size, quantizers.data(), key, b, nullptr, codes.data());
            cuda::detail::check_launch("hitch::cuda::compress qsgd_quantize_kernel");
        }
        std::size_t bytes = 0;
        if (fixed) {
            cd::store_small(dev, w->payload(), head);
            bytes = w->finish();
            if (bad.read() != 0) detail::throw_non_finite(who, EF ? "the bucket plus its residual" : "the bucket");
        } else {
            if (bad.read() != 0) detail::throw_non_finite(who, EF ? "the bucket plus its residual" : "the bucket");
            bytes = write_elias(dev, codes.data(), norms.data(), n, groups, front, head, type, out);
        }
        ++s.step;
        return bytes;
    }

    /// Elias: entry lengths from a max scan of the non-zero indices, offsets from a sum scan, then the entries.
    std::size_t write_elias(cuda::device& dev, const std::uint16_t* codes, const unsigned char* norms, std::size_t n,
                            std::size_t groups, std::size_t front, const std::array<std::byte, 16>& head, dtype type,
                            cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        cd::device_scratch<std::uint64_t> keys(dev, n), prev(dev, n), offsets(dev, n);
        cd::device_scratch<std::uint32_t> nonzero(dev, n);
        cd::device_scratch<std::uint64_t> sums(dev, 2);  // nnz, bits
        std::uint64_t nnz = 0, bits = 0;
        if (n != 0) {
            cd::activate(dev);
            const unsigned grid = cuda::detail::grid_blocks(n);
            cd::elias_keys_kernel<<<grid, cuda::detail::block_threads, 0, dev.stream()>>>(codes, n, keys.data(),
                                                                                          nonzero.data());
            cuda::detail::check_launch("hitch::cuda::compress elias_keys_kernel");
            scan_max(dev, keys.data(), prev.data(), n);
            std::uint64_t* lengths = keys.data();  // the keys are no longer needed
            cd::elias_lengths_kernel<<<grid, cuda::detail::block_threads, 0, dev.stream()>>>(codes, prev.data(), n,
                                                                                             lengths);
            cuda::detail::check_launch("hitch::cuda::compress elias_lengths_kernel");
            scan_sum(dev, lengths, offsets.data(), n);
            reduce_sum(dev, nonzero.data(), sums.data(), n);
            reduce_sum(dev, lengths, sums.data() + 1, n);
            nnz = cd::read_back(dev, sums.data());
            bits = cd::read_back(dev, sums.data() + 1);
        }
        const std::size_t stream_bytes = static_cast<std::size_t>((bits + 7) / 8);
        const std::size_t payload = front + 8 + stream_bytes;
        out.bind(dev);
        out.reserve(wire::header_bytes + payload + 8);  // room for the last 32-bit word the entries are ORed into
        cuda::compress::message_writer w(dev, out, qsgd::codec_id, type, n, payload);
        auto* p = reinterpret_cast<unsigned char*>(w.payload());
        cd::store_small(dev, w.payload(), head);
        if (groups != 0)
            cuda::detail::check(cudaMemcpyAsync(p + 16, norms, 4 * groups, cudaMemcpyDeviceToDevice, dev.stream()),
                                "cudaMemcpyAsync D2D");
        std::array<std::byte, 8> count{};
        wire::store_le<std::uint64_t>(count.data(), nnz);
        cd::store_small(dev, w.payload() + front, count);
        // The stream starts 4-byte aligned (32 + 16 + 4 G + 8 bytes into the message); zero it, whole words.
        unsigned char* stream = p + front + 8;
        const std::size_t words = (stream_bytes + 3) / 4;
        dev.fill_zero(stream, 4 * words);
        if (nnz != 0) {
            cd::activate(dev);
            cd::elias_write_kernel<<<cuda::detail::grid_blocks(n), cuda::detail::block_threads, 0, dev.stream()>>>(
                codes, prev.data(), offsets.data(), n, reinterpret_cast<std::uint32_t*>(stream));
            cuda::detail::check_launch("hitch::cuda::compress elias_write_kernel");
        }
        return w.finish();
    }

    static void scan_max(cuda::device& dev, const std::uint64_t* in, std::uint64_t* out, std::size_t n) {
        namespace cd = cuda::compress::detail;
        std::size_t temp = 0;
        cuda::detail::check(
            cub::DeviceScan::ExclusiveScan(nullptr, temp, in, out, cd::max_u64{}, std::uint64_t{0}, n, dev.stream()),
            "cub::DeviceScan::ExclusiveScan");
        cd::device_scratch<std::byte> storage(dev, temp);
        cuda::detail::check(cub::DeviceScan::ExclusiveScan(storage.data(), temp, in, out, cd::max_u64{},
                                                           std::uint64_t{0}, n, dev.stream()),
                            "cub::DeviceScan::ExclusiveScan");
    }
    static void scan_sum(cuda::device& dev, const std::uint64_t* in, std::uint64_t* out, std::size_t n) {
        namespace cd = cuda::compress::detail;
        std::size_t temp = 0;
        cuda::detail::check(cub::DeviceScan::ExclusiveSum(nullptr, temp, in, out, n, dev.stream()),
                            "cub::DeviceScan::ExclusiveSum");
        cd::device_scratch<std::byte> storage(dev, temp);
        cuda::detail::check(cub::DeviceScan::ExclusiveSum(storage.data(), temp, in, out, n, dev.stream()),
                            "cub::DeviceScan::ExclusiveSum");
    }
    template <class In>
    static void reduce_sum(cuda::device& dev, const In* in, std::uint64_t* out, std::size_t n) {
        namespace cd = cuda::compress::detail;
        std::size_t temp = 0;
        cuda::detail::check(
            cub::DeviceReduce::Reduce(nullptr, temp, in, out, n, cd::sum_u64{}, std::uint64_t{0}, dev.stream()),
            "cub::DeviceReduce::Reduce");
        cd::device_scratch<std::byte> storage(dev, temp);
        cuda::detail::check(
            cub::DeviceReduce::Reduce(storage.data(), temp, in, out, n, cd::sum_u64{}, std::uint64_t{0}, dev.stream()),
            "cub::DeviceReduce::Reduce");
    }

    /// The parallel parse (quantize.hpp): index[j] and code[j] of the first nnz entries, or the first failure in
    /// the host decoder's terms.
    static cuda::compress::detail::elias_status parse_elias(cuda::device& dev, const unsigned char* s,
                                                            std::size_t bytes, std::uint64_t nnz, std::uint64_t n,
                                                            std::uint32_t levels, std::uint64_t* index,
                                                            std::uint32_t* code) {
        namespace cd = cuda::compress::detail;
        const std::uint64_t chunks = cd::elias_chunks(bytes, cd::elias_chunk_bits);
        cd::device_scratch<std::uint32_t> marks(dev, chunks * (cd::elias_chunk_bits / 32));
        cd::device_scratch<std::uint64_t> in(dev, chunks), entries(dev, chunks), offsets(dev, chunks);
        cd::device_scratch<cd::elias_walk> now(dev, chunks), next(dev, chunks);
        cd::elias_walk* a = now.data();
        cd::elias_walk* b = next.data();
        std::uint64_t total = 0;
        if (chunks != 0) {
            const unsigned grid = cuda::detail::grid_blocks(chunks, 128);
            cd::activate(dev);
            cd::elias_first_walks_kernel<<<grid, 128, 0, dev.stream()>>>(s, bytes, chunks, marks.data(), in.data(), a);
            cuda::detail::check_launch("hitch::cuda::compress elias_first_walks_kernel");
            for (;;) {  // rounds until no chunk walks again (after round r, chunks 0 .. r are settled)
                const cd::device_flag changed(dev);
                cd::activate(dev);
                cd::elias_round_kernel<<<grid, 128, 0, dev.stream()>>>(s, bytes, chunks, marks.data(), in.data(), a, b,
                                                                       changed.data());
                cuda::detail::check_launch("hitch::cuda::compress elias_round_kernel");
                std::swap(a, b);
                if (changed.read() == 0) break;
            }
            cd::elias_counts_kernel<<<grid, 128, 0, dev.stream()>>>(a, chunks, entries.data());
            cuda::detail::check_launch("hitch::cuda::compress elias_counts_kernel");
            scan_sum(dev, entries.data(), offsets.data(), chunks);
            total = cd::read_back(dev, offsets.data() + chunks - 1) + cd::read_back(dev, entries.data() + chunks - 1);
        }
        const std::uint64_t m = total < nnz ? total : nnz;
        cd::device_scratch<std::uint64_t> starts(dev, m), gaps(dev, m), sums(dev, m), level(dev, m);
        cd::device_scratch<unsigned long long> key(dev, 1);
        // Fewer entries than announced: the entry after the last one does not decode (the first check of its entry).
        const unsigned long long initial =
            total < nnz ? cd::elias_failure_key(total, 0) : std::numeric_limits<unsigned long long>::max();
        cd::store_small(dev, reinterpret_cast<std::byte*>(key.data()),
                        std::span<const std::byte>(reinterpret_cast<const std::byte*>(&initial), 8));
        if (m != 0) {
            cd::activate(dev);
            cd::elias_starts_kernel<<<cuda::detail::grid_blocks(chunks, 128), 128, 0, dev.stream()>>>(
                s, bytes, chunks, marks.data(), in.data(), offsets.data(), m, starts.data());
            cuda::detail::check_launch("hitch::cuda::compress elias_starts_kernel");
            cd::elias_fields_kernel<<<cuda::detail::grid_blocks(m), cuda::detail::block_threads, 0, dev.stream()>>>(
                s, bytes, starts.data(), m, levels, gaps.data(), code, level.data(), key.data());
            cuda::detail::check_launch("hitch::cuda::compress elias_fields_kernel");
            std::size_t temp = 0;
            const cd::elias_index_sum op{n + 1};
            cuda::detail::check(
                cub::DeviceScan::InclusiveScan(nullptr, temp, gaps.data(), sums.data(), op, m, dev.stream()),
                "cub::DeviceScan::InclusiveScan");
            cd::device_scratch<std::byte> storage(dev, temp);
            cuda::detail::check(
                cub::DeviceScan::InclusiveScan(storage.data(), temp, gaps.data(), sums.data(), op, m, dev.stream()),
                "cub::DeviceScan::InclusiveScan");
            cd::activate(dev);
            cd::elias_index_kernel<<<cuda::detail::grid_blocks(m), cuda::detail::block_threads, 0, dev.stream()>>>(
                sums.data(), m, n, index, key.data());
            cuda::detail::check_launch("hitch::cuda::compress elias_index_kernel");
        }
        const unsigned long long first = cd::read_back(dev, key.data());
        if (first != std::numeric_limits<unsigned long long>::max()) {
            const std::uint64_t j = first / 4;
            const auto check = static_cast<std::uint32_t>(first % 4);
            return {check + 1, j, check == 2 ? cd::read_back(dev, level.data() + j) : 0};
        }
        cd::device_flag ok(dev);
        cd::activate(dev);
        cd::elias_tail_kernel<<<1, 32, 0, dev.stream()>>>(s, bytes, starts.data(), nnz, ok.data());
        cuda::detail::check_launch("hitch::cuda::compress elias_tail_kernel");
        if (ok.read() == 0) return {4, 0, 0};
        return {};
    }

    template <bool Add, class T>
    void decode_any(cuda::device& dev, tensor_view<const std::byte> bytes, tensor_view<T> out) const {
        namespace cd = cuda::compress::detail;
        cd::require_device(out, who);
        const cuda::compress::device_message_view m = cuda::compress::open(dev, bytes, {who, qsgd::codec_id});
        cuda::compress::expect_count(m, out.size(), who);
        const std::size_t n = out.size();
        cuda::compress::payload_reader r(dev, m, who);
        const auto s = r.get<std::uint32_t>("levels");
        const auto coding = r.get<std::uint8_t>("coding");
        const auto pad0 = r.get<std::uint8_t>("padding");
        const auto pad1 = r.get<std::uint16_t>("padding");
        const auto group = r.get<std::uint64_t>("group size");
        if (s < 1 || s > 32767) r.fail(hitch::detail::concat("levels ", s, " outside [1, 32767]"));
        if (coding > 1) r.fail(hitch::detail::concat("coding ", int{coding}, " is neither fixed (0) nor Elias (1)"));
        if (pad0 != 0 || pad1 != 0) r.fail("padding bytes are not zero");
        if (group % 8 != 0) r.fail(hitch::detail::concat("group size ", group, " is not a multiple of 8"));
        const std::size_t size = group == 0 || group >= n ? n : static_cast<std::size_t>(group);
        const std::size_t g_count = n == 0 ? 0 : detail::ceil_div(n, size);
        const auto norms = r.take(4 * static_cast<std::uint64_t>(g_count), "group norms");
        const auto* norm_bytes = reinterpret_cast<const unsigned char*>(norms.data());
        constexpr unsigned long long none_bad = std::numeric_limits<unsigned long long>::max();
        const auto first_bad = [&](auto&& launch) {
            cd::device_scratch<unsigned long long> first(dev, 1);
            cd::store_small(dev, reinterpret_cast<std::byte*>(first.data()),
                            std::span<const std::byte>(reinterpret_cast<const std::byte*>(&none_bad), 8));
            cd::activate(dev);
            launch(first.data());
            return cd::read_back(dev, first.data());
        };
        if (g_count != 0) {
            const unsigned long long k = first_bad([&](unsigned long long* first) {
                cd::qsgd_norm_check_kernel<<<cuda::detail::grid_blocks(g_count), cuda::detail::block_threads, 0,
                                             dev.stream()>>>(norm_bytes, g_count, first);
                cuda::detail::check_launch("hitch::cuda::compress qsgd_norm_check_kernel");
            });
            if (k != none_bad) {
                const std::vector<std::byte> v = r.copy(norms.subspan(4 * k, 4));
                r.fail(hitch::detail::concat("norm of group ", k, " is ", wire::load_le<float>(v.data()),
                                             ", not a finite non-negative number"));
            }
        }
        if (coding == 0) {
            const unsigned b = 1u + static_cast<unsigned>(std::bit_width(s));
            const auto stream = r.take(cd::code_bytes(n, b), "codes");
            r.expect_end();
            if (n * b % 8 != 0) {
                const std::vector<std::byte> last = r.copy(stream.last(1));
                if ((static_cast<unsigned>(last[0]) >> (n * b % 8)) != 0) r.fail("padding bits are not zero");
            }
            const auto* codes = reinterpret_cast<const unsigned char*>(stream.data());
            if (n != 0) {
                const unsigned long long i = first_bad([&](unsigned long long* first) {
                    cd::qsgd_code_check_kernel<<<cuda::detail::grid_blocks((n + 7) / 8), cuda::detail::block_threads, 0,
                                                 dev.stream()>>>(codes, n, b, s, first);
                    cuda::detail::check_launch("hitch::cuda::compress qsgd_code_check_kernel");
                });
                if (i != none_bad) {
                    const std::size_t bit = i * b, lo = bit / 8, hi = (bit + b - 1) / 8;
                    const std::vector<std::byte> v = r.copy(stream.subspan(lo, hi - lo + 1));
                    const std::uint32_t c = cd::code_from(reinterpret_cast<const unsigned char*>(v.data()), bit % 8, b);
                    r.fail(hitch::detail::concat("code ", c, " of element ", i, " is not a level in [0, ", s,
                                                 "] with a sign"));
                }
                cd::activate(dev);
                cd::qsgd_decode_kernel<Add, T>
                    <<<cuda::detail::grid_blocks((n + 7) / 8), cuda::detail::block_threads, 0, dev.stream()>>>(
                        norm_bytes, codes, n, size, b, s, cd::storage_of(out));
                cuda::detail::check_launch("hitch::cuda::compress qsgd_decode_kernel");
            }
            return;
        }
        const std::uint64_t nnz = r.count("non-zero count", n);
        const auto stream = r.rest();
        cd::device_scratch<std::uint64_t> index(dev, nnz);
        cd::device_scratch<std::uint32_t> code(dev, nnz);
        const cd::elias_status st = parse_elias(dev, reinterpret_cast<const unsigned char*>(stream.data()),
                                                stream.size(), nnz, n, s, index.data(), code.data());
        if (st.kind != 0) r.fail(cd::elias_failure(st, nnz, n, s));
        cd::decode_through_floats<Add>(dev, out, [&](auto add, float* floats) {
            if constexpr (!decltype(add)::value) dev.fill_zero(floats, n * sizeof(float));
            if (nnz == 0) return;
            cd::activate(dev);
            cd::elias_scatter_kernel<<<cuda::detail::grid_blocks(nnz), cuda::detail::block_threads, 0, dev.stream()>>>(
                index.data(), code.data(), nnz, norm_bytes, s, size, floats);
            cuda::detail::check_launch("hitch::cuda::compress elias_scatter_kernel");
        });
    }

    qsgd codec_{};
};

}  // namespace hitch::compress
