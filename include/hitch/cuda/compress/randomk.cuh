#pragma once
// compress::randomk on the GPU: hitch::compress::device_codec<compress::randomk, cuda::device>. Random-k
// sparsification (Stich, Cordonnier and Jaggi 2018) of a bucket in CUDA memory, drawing exactly the host codec's
// coordinates from the same key, so the message is the host's byte for byte (payload u64 key | u64 k | k x f32
// values) and every rank, on the GPU or not, draws the same coordinates to decode it.
//
// The host draws with xoshiro256**, one value after another, rejecting values >= n and repeats. The GPU draws the
// same set in batches (detail/sparse_random.hpp): each thread jumps its generator to its part of the stream with
// GF(2) jump tables and generates a run of outputs; a stable radix sort by value finds each value's first place in
// the batch; a scan over the new values in stream order stops where the host's loop would stop. A small draw runs
// the host's loop on one GPU thread instead. The chosen bitmap becomes ascending indices by a scan over its words'
// popcounts.
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/randomk.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/compress/randomk.hpp"
#include "hitch/cuda/compress/codec.cuh"
#include "hitch/cuda/compress/detail/sparse.cuh"
#include "hitch/cuda/compress/detail/sparse_random.hpp"
#include "hitch/cuda/compress/detail/sparse_tuning.hpp"
#include "hitch/cuda/compress/topk.cuh"

namespace hitch::cuda::compress::detail::sparse {

// ---- jump tables: computed once on the host, copied once to each GPU -----------------------------------------------

/// The host's tables, A^(2^i) for i < tuning::randomk_jump_tables (computed on first use).
inline const std::vector<jump_matrix>& host_jump_tables() {
    static const std::vector<jump_matrix> tables = make_jump_tables(cuda::compress::tuning::randomk_jump_tables);
    return tables;
}

/// The tables in the memory of GPU `ordinal`, copied on first use and kept for the life of the process (a few
/// hundred KiB per GPU; every random-k state and decode on that GPU shares them).
inline const jump_matrix* device_jump_tables(cuda::device& dev) {
    static std::mutex guard;
    static std::array<jump_matrix*, 64> per_device{};
    const int ordinal = dev.ordinal();
    if (ordinal < 0 || ordinal >= static_cast<int>(per_device.size()))
        throw config_error(hitch::detail::concat("hitch::cuda::compress::randomk: GPU ordinal ", ordinal,
                                                 " beyond the ", per_device.size(), " the jump tables are kept for"));
    const std::lock_guard<std::mutex> lock(guard);
    jump_matrix*& p = per_device[static_cast<std::size_t>(ordinal)];
    if (p == nullptr) {
        const auto& host = host_jump_tables();
        activate(dev);
        jump_matrix* d = nullptr;
        check(cudaMalloc(&d, host.size() * sizeof(jump_matrix)), "cudaMalloc (jump tables)");
        check(cudaMemcpy(d, host.data(), host.size() * sizeof(jump_matrix), cudaMemcpyHostToDevice),
              "cudaMemcpy (jump tables)");
        p = d;
    }
    return p;
}

// ---- the draw -------------------------------------------------------------------------------------------------------

/// The host's loop on one thread (small draws).
static __global__ void draw_sequential_kernel(std::uint64_t key, draw_plan plan, std::uint64_t* bitmap) {
    draw_bitmap(key, plan, bitmap);
}

/// Stream outputs [0, outputs) of a batch from `base`, `per_thread` consecutive ones per thread: each output's value
/// (accepted_value) and its position.
static __global__ void draw_generate_kernel(const jump_matrix* tables, unsigned table_count, xoshiro_state base,
                                            draw_plan plan, std::uint64_t outputs, std::uint64_t per_thread,
                                            std::uint64_t* values, std::uint64_t* positions) {
    for (std::uint64_t first = grid_index() * per_thread; first < outputs; first += grid_stride() * per_thread) {
        xoshiro_state x = jump_by(tables, table_count, base, first);
        const std::uint64_t end = first + per_thread < outputs ? first + per_thread : outputs;
        for (std::uint64_t t = first; t < end; ++t) {
            values[t] = accepted_value(plan, xoshiro_next(x));
            positions[t] = t;
        }
    }
}

/// After the stable sort by value: the first occurrence of each accepted value that no earlier batch took is new
/// (flagged at its stream position).
static __global__ void draw_fresh_kernel(const std::uint64_t* sorted_values, const std::uint64_t* sorted_positions,
                                         std::uint64_t outputs, std::uint64_t n, const std::uint64_t* bitmap,
                                         unsigned char* fresh) {
    for (std::uint64_t i = grid_index(); i < outputs; i += grid_stride()) {
        const std::uint64_t v = sorted_values[i];
        const bool first = i == 0 || sorted_values[i - 1] != v;
        const bool taken = v < n && ((bitmap[v / 64] >> (v % 64)) & 1u) != 0;
        fresh[sorted_positions[i]] = v < n && first && !taken ? 1 : 0;
    }
}

struct fresh_count {
    const unsigned char* fresh;
    __device__ __forceinline__ std::uint64_t operator()(std::uint64_t t) const { return fresh[t]; }
};

/// The new values up to the one that completes the draw go into the bitmap.
static __global__ void draw_take_kernel(const std::uint64_t* values, const unsigned char* fresh,
                                        const std::uint64_t* rank, std::uint64_t outputs, std::uint64_t left,
                                        std::uint64_t* bitmap) {
    for (std::uint64_t t = grid_index(); t < outputs; t += grid_stride())
        if (fresh[t] != 0 && rank[t] <= left) {
            const std::uint64_t v = values[t];
            atomicOr(reinterpret_cast<unsigned long long*>(bitmap + v / 64), 1ull << (v % 64));
        }
}

struct chosen_count {
    draw_plan plan;
    const std::uint64_t* bitmap;
    __device__ __forceinline__ std::uint64_t operator()(std::uint64_t w) const {
        return static_cast<std::uint64_t>(__popcll(chosen_bits(plan, bitmap[w], w)));
    }
};

/// Each bitmap word writes its chosen indices from its offset on.
static __global__ void draw_indices_kernel(draw_plan plan, const std::uint64_t* bitmap, const std::uint64_t* offsets,
                                           std::uint64_t* out) {
    const std::uint64_t words = (plan.n + 63) / 64;
    for (std::uint64_t w = grid_index(); w < words; w += grid_stride()) {
        std::uint64_t bits = chosen_bits(plan, bitmap[w], w);
        std::uint64_t at = offsets[w];
        while (bits != 0) {
            out[at++] = w * 64 + static_cast<std::uint64_t>(__ffsll(static_cast<long long>(bits)) - 1);
            bits &= bits - 1;
        }
    }
}

/// Device buffers of the draw (a codec state's, or one decode's).
struct draw_workspace {
    scratch<std::uint64_t> bitmap;
    scratch<std::uint64_t> values, positions, sorted_values, sorted_positions, rank;
    scratch<unsigned char> fresh;
    scratch<std::uint64_t> offsets;  // per bitmap word
    scratch<std::uint64_t> indices;  // the result: k ascending indices
    scratch<std::byte> temp;
};

/// Draws compress::detail::random_indices(key, n, k) into ws.indices (k ascending indices).
inline void draw_indices(cuda::device& dev, draw_workspace& ws, std::uint64_t key, std::uint64_t n, std::uint64_t k) {
    activate(dev);
    const cudaStream_t stream = dev.stream();
    const draw_plan plan = plan_draw(n, k);
    const std::uint64_t words = (n + 63) / 64;
    ws.indices.reserve(dev, static_cast<std::size_t>(std::max<std::uint64_t>(plan.k, 1)));
    if (words == 0 || plan.k == 0) return;
    std::uint64_t* bitmap = ws.bitmap.reserve(dev, static_cast<std::size_t>(words));
    check(cudaMemsetAsync(bitmap, 0, words * sizeof(std::uint64_t), stream), "cudaMemsetAsync");
    if (plan.pick != 0 && plan.pick <= cuda::compress::tuning::randomk_sequential_draw) {
        draw_sequential_kernel<<<1, 1, 0, stream>>>(key, plan, bitmap);
        check_launch("hitch::cuda::compress draw_sequential_kernel");
    } else if (plan.pick != 0) {
        const auto& host_tables = host_jump_tables();
        const jump_matrix* tables = device_jump_tables(dev);
        const auto table_count = static_cast<unsigned>(host_tables.size());
        const unsigned key_bits = static_cast<unsigned>(std::bit_width(n));  // values <= n
        xoshiro_state base = xoshiro_seed(key);
        for (std::uint64_t left = plan.pick; left > 0;) {
            const std::uint64_t outputs = draw_batch_outputs(plan, left);
            if (outputs >= (std::uint64_t{1} << table_count))
                throw config_error("hitch::cuda::compress::randomk: a draw beyond the jump tables' reach");
            std::uint64_t* values = ws.values.reserve(dev, static_cast<std::size_t>(outputs));
            std::uint64_t* positions = ws.positions.reserve(dev, static_cast<std::size_t>(outputs));
            std::uint64_t* sorted_values = ws.sorted_values.reserve(dev, static_cast<std::size_t>(outputs));
            std::uint64_t* sorted_positions = ws.sorted_positions.reserve(dev, static_cast<std::size_t>(outputs));
            std::uint64_t* rank = ws.rank.reserve(dev, static_cast<std::size_t>(outputs));
            unsigned char* fresh = ws.fresh.reserve(dev, static_cast<std::size_t>(outputs));
            const std::uint64_t per_thread = cuda::compress::tuning::randomk_outputs_per_thread;
            const std::uint64_t threads = (outputs + per_thread - 1) / per_thread;
            draw_generate_kernel<<<cuda::detail::grid_blocks(threads), cuda::detail::block_threads, 0, stream>>>(
                tables, table_count, base, plan, outputs, per_thread, values, positions);
            check_launch("hitch::cuda::compress draw_generate_kernel");
            run_cub(dev, ws.temp, "cub::DeviceRadixSort::SortPairs (draw)", [&](void* p, std::size_t& bytes) {
                return cub::DeviceRadixSort::SortPairs(p, bytes, values, sorted_values, positions, sorted_positions,
                                                       static_cast<std::int64_t>(outputs), 0,
                                                       static_cast<int>(key_bits), stream);
            });
            draw_fresh_kernel<<<cuda::detail::grid_blocks(outputs), cuda::detail::block_threads, 0, stream>>>(
                sorted_values, sorted_positions, outputs, n, bitmap, fresh);
            check_launch("hitch::cuda::compress draw_fresh_kernel");
            auto counts =
                thrust::make_transform_iterator(thrust::counting_iterator<std::uint64_t>(0), fresh_count{fresh});
            run_cub(dev, ws.temp, "cub::DeviceScan::InclusiveSum (draw)", [&](void* p, std::size_t& bytes) {
                return cub::DeviceScan::InclusiveSum(p, bytes, counts, rank, static_cast<std::int64_t>(outputs),
                                                     stream);
            });
            draw_take_kernel<<<cuda::detail::grid_blocks(outputs), cuda::detail::block_threads, 0, stream>>>(
                values, fresh, rank, outputs, left, bitmap);
            check_launch("hitch::cuda::compress draw_take_kernel");
            const std::uint64_t found = read_back(dev, rank + outputs - 1);
            left -= found < left ? found : left;
            base = jump_by(host_tables.data(), table_count, base, outputs);
        }
    }
    std::uint64_t* offsets = ws.offsets.reserve(dev, static_cast<std::size_t>(words));
    auto counts =
        thrust::make_transform_iterator(thrust::counting_iterator<std::uint64_t>(0), chosen_count{plan, bitmap});
    run_cub(dev, ws.temp, "cub::DeviceScan::ExclusiveSum (bitmap)", [&](void* p, std::size_t& bytes) {
        return cub::DeviceScan::ExclusiveSum(p, bytes, counts, offsets, static_cast<std::int64_t>(words), stream);
    });
    draw_indices_kernel<<<cuda::detail::grid_blocks(words), cuda::detail::block_threads, 0, stream>>>(
        plan, bitmap, offsets, ws.indices.data());
    check_launch("hitch::cuda::compress draw_indices_kernel");
}

// ---- the codec's kernels --------------------------------------------------------------------------------------------

/// Notes a NaN or an infinity in v: the lowest such index (atomicMin), ~0 when none.
static __global__ void first_non_finite_kernel(const float* v, std::uint64_t n, unsigned long long* first) {
    for (std::uint64_t i = grid_index(); i < n; i += grid_stride())
        if (non_finite_bits(magnitude_bits(v[i]))) atomicMin(first, static_cast<unsigned long long>(i));
}

/// The lowest j whose value (a received message's) is not finite.
static __global__ void randomk_check_values_kernel(const unsigned char* values, std::uint64_t k,
                                                   unsigned long long* first) {
    for (std::uint64_t j = grid_index(); j < k; j += grid_stride())
        if (non_finite_bits(magnitude_bits(load_f32(values + 4 * j))))
            atomicMin(first, static_cast<unsigned long long>(j));
}

/// Payload: u64 key | u64 k | k x f32 f v[index[j]].
static __global__ void write_randomk_kernel(unsigned char* payload, std::uint64_t key, const std::uint64_t* index,
                                            std::uint64_t k, const float* v, float factor) {
    const std::uint64_t first = grid_index();
    if (first == 0) {
        store_u64(payload, key);
        store_u64(payload + 8, k);
    }
    for (std::uint64_t j = first; j < k; j += grid_stride())
        store_f32(payload + 16 + 4 * j, hd::mul(factor, v[index[j]]));
}

/// Error feedback at the drawn coordinates: r -= f r.
static __global__ void randomk_residual_kernel(float* r, const std::uint64_t* index, std::uint64_t k, float factor) {
    for (std::uint64_t j = grid_index(); j < k; j += grid_stride()) {
        float& x = r[index[j]];
        x = hd::sub(x, hd::mul(factor, x));
    }
}

/// The additive form: out[j] = f v[index[j]].
static __global__ void randomk_summable_kernel(float* out, const std::uint64_t* index, std::uint64_t k, const float* v,
                                               float factor) {
    for (std::uint64_t j = grid_index(); j < k; j += grid_stride()) out[j] = hd::mul(factor, v[index[j]]);
}

/// out[index[j]] = out[index[j]] + value j (decode after zeroing, and decode_add), or = sum[j] (decode_summed).
static __global__ void randomk_scatter_kernel(float* out, const std::uint64_t* index, std::uint64_t k,
                                              const unsigned char* values, const float* sums) {
    for (std::uint64_t j = grid_index(); j < k; j += grid_stride()) {
        float& o = out[index[j]];
        o = values != nullptr ? hd::add(o, load_f32(values + 4 * j)) : sums[j];
    }
}

}  // namespace hitch::cuda::compress::detail::sparse

namespace hitch::compress {

/// compress::randomk for buckets in CUDA memory.
template <>
class device_codec<randomk, cuda::device> {
public:
    using codec_type = randomk;
    static constexpr std::string_view who = randomk::who;
    template <class T>
    using summable_t = float;

    struct state {
        std::size_t count = 0;
        std::uint64_t step = 0;      // the same on every rank
        std::uint64_t last_key = 0;  // key of the last draw
        std::uint64_t drawn = 0;     // coordinates of the last draw (in draw.indices)
        cuda::compress::detail::sparse::draw_workspace draw;
        cuda::compress::detail::sparse::scratch<unsigned long long> first_bad;
    };

    device_codec() = default;
    explicit device_codec(const randomk& codec) : codec_(codec) {}
    [[nodiscard]] const randomk& codec() const noexcept { return codec_; }
    [[nodiscard]] const randomk::options_type& options() const noexcept { return codec_.options(); }

    [[nodiscard]] state make_state(cuda::device& /*dev*/, std::size_t n) const {
        state s;
        s.count = n;
        return s;
    }
    [[nodiscard]] std::size_t k(std::size_t n) const noexcept { return codec_.k(n); }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept { return codec_.max_message_bytes(n); }
    /// The drawn coordinates of the last encode (device memory, ascending; `s.drawn` of them).
    [[nodiscard]] const std::uint64_t* indices(const state& s) const noexcept { return s.draw.indices.data(); }

    /// Encodes `in` (any floating type, as floats) into `out`; returns the message's size.
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode(cuda::device& dev, tensor_view<T> in, state& s, cuda::compress::device_message& out) const {
        namespace cd = cuda::compress::detail;
        cd::require_device(in, who);
        cd::check_state_size(who, s.count, in.size());
        const cd::device_floats v(dev, in);
        check_finite(dev, v.data(), in.size(), s, "the bucket");
        draw(dev, s, in.size());
        return write(dev, v.data(), dtype_of<std::remove_const_t<T>>(), s, out);
    }

    /// Encodes v = g + r_in at the drawn coordinates; r_out = v - D(m).
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
        check_finite(dev, r_out.data(), n, s, "the bucket plus its residual");
        draw(dev, s, n);
        const std::size_t size = write(dev, r_out.data(), dtype_of<std::remove_const_t<T>>(), s, out);
        if (s.drawn != 0) {
            sp::randomk_residual_kernel<<<cuda::detail::grid_blocks(s.drawn), cuda::detail::block_threads, 0,
                                          dev.stream()>>>(r_out.data(), indices(s), s.drawn, codec_.factor(n));
            sp::check_launch("hitch::cuda::compress randomk_residual_kernel");
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

    // The additive form: the k values at the drawn coordinates (device floats); every rank drew the same ones.
    [[nodiscard]] std::size_t summable_count(const state&, std::size_t n) const noexcept { return k(n); }
    template <class T, class S>
        requires floating_element<std::remove_const_t<T>>
    void encode_summable(cuda::device& dev, tensor_view<T> in, state& s, tensor_view<S> out) const {
        static_assert(std::is_same_v<S, float>, "encode_summable writes summable_t values (float)");
        namespace cd = cuda::compress::detail;
        namespace sp = cuda::compress::detail::sparse;
        cd::require_device(in, who);
        cd::require_device(out, who);
        cd::check_state_size(who, s.count, in.size());
        if (out.size() < k(in.size()))
            throw config_error(hitch::detail::concat(who, ": ", out.size(), " summable values for ", k(in.size()),
                                                     " drawn coordinates"));
        const cd::device_floats v(dev, in);
        check_finite(dev, v.data(), in.size(), s, "the bucket");
        draw(dev, s, in.size());
        if (s.drawn != 0) {
            sp::randomk_summable_kernel<<<cuda::detail::grid_blocks(s.drawn), cuda::detail::block_threads, 0,
                                          dev.stream()>>>(out.data(), indices(s), s.drawn, v.data(),
                                                          codec_.factor(in.size()));
            sp::check_launch("hitch::cuda::compress randomk_summable_kernel");
        }
    }
    /// out = the summed values at the drawn coordinates, zeros elsewhere.
    template <class S, class T>
        requires floating_element<T>
    void decode_summed(cuda::device& dev, tensor_view<const S> sum, const state& s, tensor_view<T> out) const {
        static_assert(std::is_same_v<S, float>, "decode_summed reads summable_t values (float)");
        namespace cd = cuda::compress::detail;
        namespace sp = cuda::compress::detail::sparse;
        cd::require_device(sum, who);
        cd::require_device(out, who);
        cd::activate(dev);
        cd::decode_through_floats<false>(dev, out, [&](auto, float* p) {
            if (!out.empty())
                sp::check(cudaMemsetAsync(p, 0, out.size() * sizeof(float), dev.stream()), "cudaMemsetAsync");
            if (s.drawn != 0) {
                sp::randomk_scatter_kernel<<<cuda::detail::grid_blocks(s.drawn), cuda::detail::block_threads, 0,
                                             dev.stream()>>>(p, indices(s), s.drawn, nullptr, sum.data());
                sp::check_launch("hitch::cuda::compress randomk_scatter_kernel");
            }
        });
    }
    /// What every rank must agree on before the values are summed: the key of the draw.
    [[nodiscard]] std::uint64_t agreement_value(const state& s) const noexcept { return s.last_key; }

    void undo(state& s) const noexcept {
        if (s.step > 0) --s.step;
    }

    /// The host codec's blob: u64 step.
    void save_state(cuda::device& /*dev*/, const state& s, std::vector<std::byte>& blob) const {
        randomk::state host = codec_.make_state(s.count);
        host.step = s.step;
        codec_.save_state(host, blob);
    }
    void load_state(cuda::device& /*dev*/, std::span<const std::byte> blob, state& s) const {
        randomk::state host = codec_.make_state(s.count);
        codec_.load_state(blob, host);
        s.step = host.step;
    }

private:
    void check_finite(cuda::device& dev, const float* v, std::size_t n, state& s, std::string_view what) const {
        namespace sp = cuda::compress::detail::sparse;
        if (n == 0) return;
        sp::activate(dev);
        unsigned long long* first = s.first_bad.reserve(dev, 1);
        sp::check(cudaMemsetAsync(first, 0xff, sizeof(unsigned long long), dev.stream()), "cudaMemsetAsync");
        sp::first_non_finite_kernel<<<cuda::detail::grid_blocks(n, cuda::detail::block_threads, 4),
                                      cuda::detail::block_threads, 0, dev.stream()>>>(v, n, first);
        sp::check_launch("hitch::cuda::compress first_non_finite_kernel");
        if (sp::read_back(dev, first) != ~0ull) hitch::compress::detail::throw_non_finite(who, what);
    }

    void draw(cuda::device& dev, state& s, std::size_t n) const {
        namespace sp = cuda::compress::detail::sparse;
        s.last_key = sp::draw_key(codec_.options().seed, 0, s.step);
        ++s.step;
        s.drawn = k(n);
        sp::draw_indices(dev, s.draw, s.last_key, n, s.drawn);
    }

    std::size_t write(cuda::device& dev, const float* v, dtype type, const state& s,
                      cuda::compress::device_message& out) const {
        namespace sp = cuda::compress::detail::sparse;
        const std::size_t payload = 16 + 4 * static_cast<std::size_t>(s.drawn);
        cuda::compress::message_writer w(dev, out, randomk::codec_id, type, s.count, payload);
        sp::write_randomk_kernel<<<cuda::detail::grid_blocks(s.drawn), cuda::detail::block_threads, 0, dev.stream()>>>(
            reinterpret_cast<unsigned char*>(w.payload()), s.last_key, indices(s), s.drawn, v, codec_.factor(s.count));
        sp::check_launch("hitch::cuda::compress write_randomk_kernel");
        return w.finish();
    }

    template <bool Add, class T>
    void decode_any(cuda::device& dev, tensor_view<const std::byte> message, tensor_view<T> out) const {
        namespace cd = cuda::compress::detail;
        namespace sp = cuda::compress::detail::sparse;
        cd::require_device(out, who);
        const cuda::compress::device_message_view m = cuda::compress::open(dev, message, {who, randomk::codec_id});
        cuda::compress::expect_count(m, out.size(), who);
        const std::size_t n = out.size();
        cuda::compress::payload_reader r(dev, m, who);
        const auto key = r.get<std::uint64_t>("key");
        const std::uint64_t kk = r.count("selected count", n);
        const auto values = r.take(4 * kk, "values");
        r.expect_end();
        const auto* vals = reinterpret_cast<const unsigned char*>(values.data());
        const cudaStream_t stream = dev.stream();
        cd::activate(dev);
        if (kk != 0) {
            // The first value that is not finite, named as the host names it.
            sp::scratch<unsigned long long> first;
            unsigned long long* f = first.reserve(dev, 1);
            sp::check(cudaMemsetAsync(f, 0xff, sizeof(unsigned long long), stream), "cudaMemsetAsync");
            sp::randomk_check_values_kernel<<<cuda::detail::grid_blocks(kk), cuda::detail::block_threads, 0, stream>>>(
                vals, kk, f);
            sp::check_launch("hitch::cuda::compress randomk_check_values_kernel");
            const unsigned long long bad = sp::read_back(dev, f);
            if (bad != ~0ull) r.fail(hitch::detail::concat("value ", bad, " is not finite"));
        }
        sp::draw_workspace ws;
        sp::draw_indices(dev, ws, key, n, kk);
        cd::decode_through_floats<Add>(dev, out, [&](auto add, float* p) {
            if constexpr (!decltype(add)::value)
                if (n != 0) sp::check(cudaMemsetAsync(p, 0, n * sizeof(float), stream), "cudaMemsetAsync");
            if (kk != 0) {
                sp::randomk_scatter_kernel<<<cuda::detail::grid_blocks(kk), cuda::detail::block_threads, 0, stream>>>(
                    p, ws.indices.data(), kk, vals, nullptr);
                sp::check_launch("hitch::cuda::compress randomk_scatter_kernel");
            }
        });
    }

    randomk codec_{};
};

}  // namespace hitch::compress
