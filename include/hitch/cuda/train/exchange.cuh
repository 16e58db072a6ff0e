#pragma once
// The compressed exchange of one bucket in GPU memory (exchange/aggregate.hpp's paths, with the device codecs of
// hitch/cuda/compress/). What runs where:
//
//   additive (fp16, bf16, randomk, their error_feedback)
//       encode_summable on the GPU, the summed elements all-reduced in GPU memory by the schedule (the collectives'
//       device backend: staged through pinned memory, or direct), decode_summed on the GPU
//   low_rank (powersgd)
//       P and Q computed on the GPU and all-reduced in GPU memory by the schedule
//   allgather (topk, threshold, dgc, ...): the ring all-gather of the messages
//       encode on the GPU; the message (bytes, a fraction of the bucket) copied to the host; every rank's message
//       gathered by the host collective; each copied back and decoded-and-added on the GPU in rank order
//   compressed_ring (onebit, qsgd, terngrad, ...): the compression-aware ring
//       each hop's chunk decoded, added to this rank's own and re-encoded on the GPU; the messages between hops
//       staged through host memory (they are bytes), the hops' protocol the host ring's (its size words carry
//       failures, exchange/detail/compressed_hops.hpp)
//
// Every path keeps the host path's failure protocol (a rank whose encode fails tells the others in the exchange's
// first collective, the others take their encode back, all throw) and gives the host path's bits: the device codecs
// write and read the host codecs' messages and values bit for bit, and the host collectives or the ring's direct form
// sum in the host schedule's order. nvcc only.
#if !defined(__CUDACC__)
#error "hitch/cuda/train/exchange.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cstddef>
#include <cstdint>
#include <exception>
#include <numeric>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/allreduce/collectives.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/compress/detail/device_codec.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/cuda/compress/detail/wire.cuh"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/train/kernels.cuh"
#include "hitch/device/buffer.hpp"
#include "hitch/exchange/aggregation.hpp"
#include "hitch/exchange/detail/bucket.hpp"
#include "hitch/exchange/detail/compressed_hops.hpp"
#include "hitch/exchange/detail/encode_failure.hpp"
#include "hitch/exchange/state_blob.hpp"

namespace hitch::cuda::train {

namespace cc = hitch::compress;
using gpu_floats = device_buffer<float, cuda::device>;

/// A bucket's compressed-exchange state on the GPU (exchange/aggregation.hpp's aggregation_state): the device
/// codec's state, the compression-aware ring's hop residual (where the codec needs one and is not error_feedback,
/// whose own residual serves), and workspace reused from call to call.
template <class X>
struct device_aggregation {
    using codec_type = cc::device_codec<X, cuda::device>;
    using state_type = cc::device_state_t<X, cuda::device>;

    device_aggregation(state_type codec_state, std::size_t n) : codec(std::move(codec_state)), count(n) {}

    state_type codec;
    std::size_t count = 0;
    gpu_floats ring_residual, ring_next;
    // workspace
    cuda::compress::device_message message;
    gpu_floats accumulator, p, q;
    std::vector<std::byte> host_message;
    std::vector<std::vector<std::byte>> messages;
    std::optional<device_buffer<std::byte, cuda::device>> summable;  // the additive path's elements, as bytes
};

/// The hop residual a codec of the compression-aware ring keeps beside its state.
template <class X>
inline constexpr bool needs_ring_residual = cc::aggregation_path_of<X> == cc::aggregation_path::compressed_ring &&
                                            !cc::detail::is_error_feedback<X>::value && cc::ring_hop_feedback<X>;

/// A fresh state for a bucket of n elements (`shapes`: the layers' matrices, for a low-rank codec).
template <class X>
[[nodiscard]] device_aggregation<X> make_device_aggregation(cuda::device& dev,
                                                            const typename device_aggregation<X>::codec_type& dc,
                                                            std::size_t n, std::span<const cc::matrix_shape> shapes) {
    device_aggregation<X> s(
        [&] {
            if constexpr (requires { dc.make_state(dev, n, shapes); })
                return dc.make_state(dev, n, shapes);
            else
                return dc.make_state(dev, n);
        }(),
        n);
    if constexpr (needs_ring_residual<X>) {
        s.ring_residual = gpu_floats(dev, n);
        s.ring_next = gpu_floats(dev, n);
    }
    s.message.bind(dev);
    return s;
}

namespace detail {

/// settle()'s codec: takes an encode back with the device codec's undo.
template <class DC>
struct device_undo {
    using state = typename DC::state;
    const DC& codec;
    void undo(state& s) const {
        if constexpr (requires { codec.undo(s); }) codec.undo(s);
    }
};

[[nodiscard]] inline tensor_view<float> gpu_view(float* p, std::size_t n) noexcept {
    return {p, n, memory_space::cuda};
}
[[nodiscard]] inline tensor_view<const float> gpu_view(const float* p, std::size_t n) noexcept {
    return {p, n, memory_space::cuda};
}

/// Grows `b` to at least n floats.
inline void reserve(cuda::device& dev, gpu_floats& b, std::size_t n) {
    if (b.size() < n) b = gpu_floats(dev, n);
}

/// out = v, or v * (1/p) for the mean (compress::detail::write_result, on the GPU; queued).
inline void write_result(cuda::device& dev, const float* v, tensor_view<float> out, bool average, int p) {
    if (out.empty()) return;
    cuda::compress::detail::activate(dev);
    const float inv_p = average ? 1.0f / static_cast<float>(p) : 1.0f;
    kernels::result_kernel<<<hitch::cuda::detail::grid_blocks(out.size()), hitch::cuda::detail::block_threads, 0,
                             dev.stream()>>>(v, out.data(), out.size(), average, inv_p);
    hitch::cuda::detail::check_launch("hitch::cuda::train result_kernel");
}

/// a += b over n floats (queued).
inline void add_into(cuda::device& dev, float* a, const float* b, std::size_t n) {
    if (n == 0) return;
    cuda::compress::detail::activate(dev);
    kernels::
        add_into_kernel<<<hitch::cuda::detail::grid_blocks(n), hitch::cuda::detail::block_threads, 0, dev.stream()>>>(
            a, b, n);
    hitch::cuda::detail::check_launch("hitch::cuda::train add_into_kernel");
}

/// The compression-aware ring's hops on the GPU (compressed_hops.hpp's hops): the device codec of the codec that
/// encodes at the hops, its persistent state, and the residual the hops read and write.
template <class X>
struct device_hops {
    using host_codec_type = typename cc::detail::ring_codec<X>::type;
    using codec_type = cc::device_codec<host_codec_type, cuda::device>;
    using state_type = cc::device_state_t<host_codec_type, cuda::device>;
    static constexpr bool feedback = cc::ring_hop_feedback<X>;

    cuda::device& dev;
    const codec_type& codec;
    state_type& state;
    gpu_floats& r_in;
    gpu_floats& r_out;

    [[nodiscard]] state_type state_for(std::size_t count, std::uint64_t per_call, std::uint64_t index,
                                       int stream) const {
        state_type s = codec.make_state(dev, count);
        if constexpr (requires { s.step; }) s.step = state.step * per_call + index;
        cc::detail::set_stream(s, stream);
        return s;
    }
    void encode(const float* values, hitch::allreduce::block b, state_type& s,
                cuda::compress::device_message& out) const {
        if constexpr (feedback)
            codec.encode_ef(dev, gpu_view(values, b.count), gpu_view(r_in.data() + b.offset, b.count),
                            gpu_view(r_out.data() + b.offset, b.count), s, out);
        else
            codec.encode(dev, gpu_view(values, b.count), s, out);
    }
    void decode(tensor_view<const std::byte> message, float* out, std::size_t count) const {
        codec.decode(dev, message, gpu_view(out, count));
    }
    void finish(bool encoded) const {
        if constexpr (feedback)
            if (encoded) std::swap(r_in, r_out);
        if constexpr (requires { state.step; }) ++state.step;
    }
};

template <class X>
[[nodiscard]] device_hops<X> device_hops_of(cuda::device& dev, const cc::device_codec<X, cuda::device>& dc,
                                            device_aggregation<X>& s) {
    if constexpr (cc::detail::is_error_feedback<X>::value)
        return {dev, dc.inner(), s.codec.inner, s.codec.residual, s.codec.next};
    else
        return {dev, dc, s.codec, s.ring_residual, s.ring_next};
}

/// compressed_hops.hpp's ring_among with the chunks on the GPU and the messages staged through the host: `mine` and
/// `acc` are n device floats; messages[c] ends as chunk c's final message (host bytes) on every participant.
template <class C, class X>
std::size_t device_ring_among(cc::detail::hop_link<C>& link, const device_hops<X>& h, std::span<const int> ring,
                              int pos, const float* mine, float* acc, std::size_t n,
                              std::vector<std::vector<std::byte>>& messages, cuda::compress::device_message& staged) {
    const int q = static_cast<int>(ring.size());
    const int next = ring[static_cast<std::size_t>((pos + 1) % q)];
    const int prev = ring[static_cast<std::size_t>((pos - 1 + q) % q)];
    const auto wrap = [q](int c) { return ((c % q) + q) % q; };
    const auto chunk = [&](int c) { return hitch::allreduce::partition(n, q, wrap(c)); };
    std::vector<typename device_hops<X>::state_type> chunk_states;
    for (int c = 0; c < q; ++c)
        chunk_states.push_back(
            h.state_for(chunk(c).count, static_cast<std::uint64_t>(q), static_cast<std::uint64_t>(c), pos));
    const auto encode_chunk = [&](int c, const float* values, std::vector<std::byte>& out) {
        h.encode(values, chunk(c), chunk_states[static_cast<std::size_t>(wrap(c))], staged);
        staged.to_host(out);  // waits for the encode
    };
    messages.resize(static_cast<std::size_t>(q));
    cc::detail::exchange_status& status = link.status();
    std::vector<std::byte> out_message, in_message;

    // Reduce-scatter: the first message is this rank's own chunk `pos`.
    if (status.ok()) status.attempt([&] { encode_chunk(pos, mine + chunk(pos).offset, out_message); });
    const std::size_t first = out_message.size();
    for (int k = 0; k < q - 1; ++k) {
        const int c = pos - k - 1;  // the chunk arriving now
        if (!link.exchange(next, cc::detail::one(out_message), prev, cc::detail::one(in_message))) continue;
        const hitch::allreduce::block b = chunk(c);
        float* a = acc + b.offset;
        status.attempt([&] {
            staged.assign(in_message);
            h.decode(staged.view(), a, b.count);
            add_into(h.dev, a, mine + b.offset, b.count);
            encode_chunk(c, a, out_message);
        });
    }
    // out_message now holds chunk pos + 1, fully reduced: all-gather the q final messages (host bytes).
    messages[static_cast<std::size_t>(wrap(pos + 1))] = out_message;
    for (int k = 0; k < q - 1; ++k) {
        const int send_c = wrap(pos + 1 - k), recv_c = wrap(pos - k);
        link.exchange(next, cc::detail::one(messages[static_cast<std::size_t>(send_c)]), prev,
                      cc::detail::one(messages[static_cast<std::size_t>(recv_c)]));
    }
    return first;
}

}  // namespace detail

/// The additive path: encode_summable, the schedule's all-reduce of the summed elements in GPU memory,
/// decode_summed (exchange/additive.hpp).
template <class Schedule, class C, class X>
cc::aggregation_stats device_aggregate_allreduce(hitch::allreduce::group<C>& g, cuda::device& dev,
                                                 const cc::device_codec<X, cuda::device>& dc, device_aggregation<X>& s,
                                                 tensor_view<float> bucket, const Schedule& schedule,
                                                 const cc::aggregate_options& options) {
    using S = typename cc::device_codec<X, cuda::device>::template summable_t<float>;
    const auto p = static_cast<std::size_t>(g.size());
    const hitch::allreduce::reduce_op op =
        options.average ? hitch::allreduce::reduce_op::average : hitch::allreduce::reduce_op::sum;
    const std::size_t m = dc.summable_count(s.codec, s.count);
    if (!s.summable || s.summable->size() < m * sizeof(S))
        s.summable.emplace(dev, std::max<std::size_t>(m, 1) * sizeof(S));
    const tensor_view<S> values(reinterpret_cast<S*>(s.summable->data()), m, memory_space::cuda);
    std::exception_ptr error;
    const std::uint8_t code = cc::detail::attempt(
        [&] {
            dc.encode_summable(dev, bucket.as_const(), s.codec, values);
            dev.synchronize();  // the collectives read what the stream has finished writing
        },
        error);
    const std::vector<std::uint8_t> codes = cc::detail::exchange_codes(g, code, s.count, options.call);
    cc::detail::settle(detail::device_undo<cc::device_codec<X, cuda::device>>{dc}, s.codec, codes, g.rank(), error);
    hitch::allreduce::call_options call = options.call;
    if constexpr (requires { dc.agreement_value(s.codec); }) call.fingerprint ^= dc.agreement_value(s.codec);
    try {
        hitch::allreduce::allreduce(g, values, op, schedule, call);
    } catch (...) {
        if constexpr (requires { dc.undo(s.codec); }) dc.undo(s.codec);
        throw;
    }
    dc.decode_summed(dev, values.as_const(), s.codec, bucket);
    cc::aggregation_stats stats{cc::aggregation_path::allreduce, cc::exchange_kind::allreduce, m * sizeof(S), 0};
    stats.sent_bytes = p > 1 ? 2 * (p - 1) * m * sizeof(S) / p : 0;
    return stats;
}

/// The low-rank path: P and Q computed on the GPU, each all-reduced in GPU memory (exchange/low_rank.hpp).
template <class Schedule, class C, class X>
cc::aggregation_stats device_aggregate_low_rank(hitch::allreduce::group<C>& g, cuda::device& dev,
                                                const cc::device_codec<X, cuda::device>& dc, device_aggregation<X>& s,
                                                tensor_view<float> bucket, const Schedule& schedule,
                                                const cc::aggregate_options& options) {
    const std::size_t np = dc.p_count(s.codec), nq = dc.q_count(s.codec);
    detail::reserve(dev, s.p, np);
    detail::reserve(dev, s.q, nq);
    const tensor_view<float> pv = detail::gpu_view(s.p.data(), np), qv = detail::gpu_view(s.q.data(), nq);
    std::exception_ptr error;
    // compute_p validates the bucket and changes no lasting state, so nothing needs undoing on failure.
    const std::uint8_t code = cc::detail::attempt(
        [&] {
            dc.compute_p(dev, bucket.as_const(), s.codec, pv);
            dev.synchronize();
        },
        error);
    cc::detail::settle(detail::device_undo<cc::device_codec<X, cuda::device>>{dc}, s.codec,
                       cc::detail::exchange_codes(g, code, s.count, options.call), g.rank(), error);
    hitch::allreduce::allreduce(g, pv, hitch::allreduce::reduce_op::sum, schedule, options.call);
    dc.compute_q(dev, pv.as_const(), s.codec, qv);
    dev.synchronize();
    hitch::allreduce::allreduce(g, qv, hitch::allreduce::reduce_op::sum, schedule, options.call);
    if (options.average) {
        detail::reserve(dev, s.accumulator, s.count);
        dc.finish_low_rank(dev, pv.as_const(), qv.as_const(), s.codec, detail::gpu_view(s.accumulator.data(), s.count));
        detail::write_result(dev, s.accumulator.data(), bucket, true, g.size());
    } else {
        dc.finish_low_rank(dev, pv.as_const(), qv.as_const(), s.codec, bucket);
    }
    const auto p = static_cast<std::size_t>(g.size());
    const std::size_t bytes = 4 * (np + nq);
    return {cc::aggregation_path::low_rank, cc::exchange_kind::low_rank, bytes, p > 1 ? 2 * (p - 1) * bytes / p : 0};
}

/// The ring all-gather of the messages: encoded on the GPU, gathered through host memory, decoded-and-added on the
/// GPU in rank order (exchange/allgather.hpp).
template <class C, class X>
cc::aggregation_stats device_aggregate_allgather(hitch::allreduce::group<C>& g, cuda::device& dev,
                                                 const cc::device_codec<X, cuda::device>& dc, device_aggregation<X>& s,
                                                 tensor_view<float> bucket, const cc::aggregate_options& options) {
    cc::detail::set_stream(s.codec, g.rank());
    std::exception_ptr error;
    const std::uint8_t code = cc::detail::attempt(
        [&] {
            dc.encode(dev, bucket.as_const(), s.codec, s.message);
            s.message.to_host(s.host_message);
        },
        error);
    // A failed encode contributes a one-byte blob with its code (a message is never shorter than its header).
    const std::byte failure_blob[1] = {static_cast<std::byte>(code)};
    const std::span<const std::byte> mine = code == cc::detail::encode_ok ? std::span<const std::byte>(s.host_message)
                                                                          : std::span<const std::byte>(failure_blob);
    hitch::allreduce::call_options call = options.call;
    call.fingerprint ^= 0x51ed27092f4a1c3bull * (s.count + 1);
    const hitch::allreduce::byte_blocks blobs = hitch::allreduce::allgather_bytes(g, mine, call);
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(g.size()), cc::detail::encode_ok);
    for (int r = 0; r < g.size(); ++r) {
        const auto b = blobs.blob(r);
        if (b.size() == 1)
            codes[static_cast<std::size_t>(r)] = static_cast<std::uint8_t>(b[0]) == cc::detail::encode_non_finite
                                                     ? cc::detail::encode_non_finite
                                                     : cc::detail::encode_failed;
    }
    cc::detail::settle(detail::device_undo<cc::device_codec<X, cuda::device>>{dc}, s.codec, codes, g.rank(), error);
    detail::reserve(dev, s.accumulator, s.count);
    const tensor_view<float> acc = detail::gpu_view(s.accumulator.data(), s.count);
    try {
        dev.fill_zero(acc.data(), s.count * sizeof(float));
        for (int r = 0; r < g.size(); ++r) {
            s.message.assign(blobs.blob(r));
            dc.decode_add(dev, s.message.view(), acc);
        }
    } catch (...) {
        if constexpr (requires { dc.undo(s.codec); }) dc.undo(s.codec);
        throw;
    }
    detail::write_result(dev, acc.data(), bucket, options.average, g.size());
    cc::aggregation_stats stats{cc::aggregation_path::allgather, cc::exchange_kind::allgather_ring,
                                s.host_message.size(), 0};
    const auto p = static_cast<std::size_t>(g.size());
    for (std::size_t k = 1; k < p; ++k)  // the ring all-gather forwards every blob but the one it would send back
        stats.sent_bytes += blobs.blob(static_cast<int>((static_cast<std::size_t>(g.rank()) + p - k + 1) % p)).size();
    return stats;
}

/// The compression-aware ring with the chunks on the GPU (exchange/compressed_ring.hpp).
template <class C, class X>
cc::aggregation_stats device_aggregate_ring(hitch::allreduce::group<C>& g, cuda::device& dev,
                                            const cc::device_codec<X, cuda::device>& dc, device_aggregation<X>& s,
                                            tensor_view<float> bucket, const cc::aggregate_options& options) {
    const detail::device_hops<X> h = detail::device_hops_of(dev, dc, s);
    cc::detail::set_stream(h.state, g.rank());
    const std::size_t n = s.count;
    const int p = g.size();
    detail::reserve(dev, s.accumulator, n);
    cc::aggregation_stats stats{cc::aggregation_path::compressed_ring, cc::exchange_kind::compressed_ring, 0, 0};
    cc::detail::exchange_status status(g.rank());
    const hitch::allreduce::call_options call =
        cc::detail::compressed_call<typename detail::device_hops<X>::host_codec_type>(options, n);
    g.run(call, cc::detail::exchange_descriptor<float>(n, call.fingerprint, "compressed_ring"),
          [&](hitch::allreduce::transport<C>& t, const hitch::allreduce::call_descriptor&) {
              cc::detail::hop_link<C> link(t, status);
              std::vector<int> ring(static_cast<std::size_t>(p));
              std::iota(ring.begin(), ring.end(), 0);
              stats.message_bytes =
                  detail::device_ring_among(link, h, std::span<const int>(ring), g.rank(), bucket.data(),
                                            s.accumulator.data(), n, s.messages, s.message);
              stats.sent_bytes = link.sent_bytes();
          });
    status.throw_if_failed("compressed ring");
    for (int c = 0; c < p; ++c) {
        const hitch::allreduce::block b = hitch::allreduce::partition(n, p, c);
        s.message.assign(s.messages[static_cast<std::size_t>(c)]);
        h.decode(s.message.view(), s.accumulator.data() + b.offset, b.count);
    }
    h.finish(true);
    detail::write_result(dev, s.accumulator.data(), bucket, options.average, p);
    return stats;
}

}  // namespace hitch::cuda::train
