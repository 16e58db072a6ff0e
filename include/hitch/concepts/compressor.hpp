#pragma once
// hitch::compressor<X>: a gradient codec. It encodes a bucket (a contiguous span of gradients) into a checked wire
// message and decodes a message back, overwriting or adding into a buffer. Modelled by compress::none, fp16, bf16,
// onebit, threshold, topk, dgc, randomk, qsgd, terngrad, powersgd and error_feedback<X>; a user's codec plugs in
// by modelling it.
//
//   X::codec_id, X::name                   the id in the message header (user codecs: 128..255) and
//                                          static constexpr std::string_view name
//   X::options_type, X(options_type), X(), x.options()
//                                          typed options with validate(), checked by the constructor
//   X::additive                            messages can be summed in transit (an all-reduce carries them)
//   X::needs_error_feedback                biased: use it inside error_feedback<X> (or with its own accumulation)
//   X::ring_compressible                   has the compression-aware ring form (re-encode at every hop)
//   typename X::state, x.make_state(n)     typed per-bucket state (residuals, momentum, Q, random counters)
//   x.encode(in, state, bytes) -> size_t   in: tensor_view<const T>; bytes: std::vector<std::byte>, resized to
//                                          the message; returns its exact size (the bytes it puts on the wire)
//   x.max_message_bytes(n)                 an upper bound of a message for n elements
//   x.decode(bytes, out)                   out = decoded message (corrupt_message_error on any inconsistency)
//   x.decode_add(bytes, acc)               acc += decoded message
//   x.save_state(state, blob), x.load_state(blob, state)   versioned, checksummed state blobs
//
// Refinements used by the aggregation (exchange/aggregate.hpp), which picks its algorithm from them at compile
// time:
//   summable_compressor<X>   additive codecs: encode_summable / decode_summed on a typed buffer an all-reduce sums
//   residual_compressor<X>   encode_ef(g, r_in, r_out, state, bytes): encodes g + r_in and writes what was not sent
//                            to r_out in the same pass (error feedback, and the ring's per-hop residuals)
//   low_rank_compressor<X>   PowerSGD's two-round protocol (P then Q, both all-reduced)

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/core/tensor.hpp"

namespace hitch {

template <class X>
concept compressor_has_identity = requires {
    { X::codec_id } -> std::convertible_to<std::uint8_t>;
    { X::name } -> std::convertible_to<std::string_view>;
};

template <class X>
concept compressor_has_options =
    requires { typename X::options_type; } && requires(const X& x, const typename X::options_type& o) {
        o.validate();
        { x.options() } -> std::convertible_to<const typename X::options_type&>;
    } && std::default_initializable<X> && std::constructible_from<X, const typename X::options_type&>;

template <class X>
concept compressor_has_traits = requires {
    { X::additive } -> std::convertible_to<bool>;
    { X::needs_error_feedback } -> std::convertible_to<bool>;
    { X::ring_compressible } -> std::convertible_to<bool>;
};

template <class X>
concept compressor_has_state = requires(const X& x, std::size_t n) {
    typename X::state;
    { x.make_state(n) } -> std::same_as<typename X::state>;
};

template <class X>
concept compressor_can_encode =
    compressor_has_state<X> && requires(const X& x, typename X::state& s, tensor_view<const float> in,
                                        std::vector<std::byte>& bytes, std::size_t n) {
        { x.encode(in, s, bytes) } -> std::convertible_to<std::size_t>;
        { x.max_message_bytes(n) } -> std::convertible_to<std::size_t>;
    };

template <class X>
concept compressor_can_decode = requires(const X& x, std::span<const std::byte> bytes, tensor_view<float> out) {
    x.decode(bytes, out);
    x.decode_add(bytes, out);
};

template <class X>
concept compressor_saves_state =
    compressor_has_state<X> && requires(const X& x, const typename X::state& cs, typename X::state& s,
                                        std::vector<std::byte>& blob, std::span<const std::byte> in) {
        x.save_state(cs, blob);
        x.load_state(in, s);
    };

/// A gradient codec with a checked wire format and typed per-bucket state.
template <class X>
concept compressor =
    std::copy_constructible<X> && compressor_has_identity<X> && compressor_has_options<X> && compressor_has_traits<X> &&
    compressor_has_state<X> && compressor_can_encode<X> && compressor_can_decode<X> && compressor_saves_state<X>;

/// Returns true when X models compressor; otherwise fails to compile with one sentence naming the first
/// requirement X misses and what to write. Use it where a user's codec first meets hitch:
/// `static_assert(check_compressor<X>());`.
template <class X>
consteval bool check_compressor() {
    if constexpr (!std::copy_constructible<X>) {
        static_assert(std::copy_constructible<X>,
                      "hitch::compressor: the codec type cannot be copied: a codec "
                      "holds only its options; keep per-bucket data in its state");
    } else if constexpr (!compressor_has_identity<X>) {
        static_assert(compressor_has_identity<X>,
                      "hitch::compressor: the codec type has no identity: add "
                      "`static constexpr std::uint8_t codec_id = 200;` (128..255 for "
                      "your own codecs) and `static constexpr std::string_view name = "
                      "\"my_codec\";`");
    } else if constexpr (!compressor_has_options<X>) {
        static_assert(compressor_has_options<X>,
                      "hitch::compressor: the codec type has no options: add a nested `struct options_type { void "
                      "validate() const; };`, a default constructor, a constructor taking `const options_type&` and "
                      "`const options_type& options() const`");
    } else if constexpr (!compressor_has_traits<X>) {
        static_assert(compressor_has_traits<X>,
                      "hitch::compressor: the codec type does not state its traits: add "
                      "`static constexpr bool additive`, `needs_error_feedback` and "
                      "`ring_compressible`");
    } else if constexpr (!compressor_has_state<X>) {
        static_assert(compressor_has_state<X>,
                      "hitch::compressor: the codec type has no per-bucket state: add a "
                      "nested `state` type and `state make_state(std::size_t n) const`");
    } else if constexpr (!compressor_can_encode<X>) {
        static_assert(compressor_can_encode<X>,
                      "hitch::compressor: the codec type cannot encode: add "
                      "`std::size_t encode(hitch::tensor_view<const float>, state&, "
                      "std::vector<std::byte>&) const` and "
                      "`std::size_t max_message_bytes(std::size_t n) const`");
    } else if constexpr (!compressor_can_decode<X>) {
        static_assert(compressor_can_decode<X>,
                      "hitch::compressor: the codec type cannot decode: add "
                      "`void decode(std::span<const std::byte>, hitch::tensor_view<float>) "
                      "const` and `void decode_add(std::span<const std::byte>, "
                      "hitch::tensor_view<float>) const`");
    } else if constexpr (!compressor_saves_state<X>) {
        static_assert(compressor_saves_state<X>,
                      "hitch::compressor: the codec type cannot save its state: add "
                      "`void save_state(const state&, std::vector<std::byte>&) const` and "
                      "`void load_state(std::span<const std::byte>, state&) const`");
    }
    return true;
}

/// An additive codec whose encoded elements an all-reduce can sum: encode_summable writes summable_count(state, n)
/// elements of type summable_t<T>, decode_summed turns the sum back into gradients.
template <class X>
concept summable_compressor = compressor<X> && X::additive &&
                              requires(const X& x, typename X::state& s, const typename X::state& cs,
                                       tensor_view<const float> in, tensor_view<float> out, std::size_t n) {
                                  typename X::template summable_t<float>;
                                  { x.summable_count(cs, n) } -> std::convertible_to<std::size_t>;
                                  x.encode_summable(in, s, std::span<typename X::template summable_t<float>>{});
                                  x.decode_summed(std::span<const typename X::template summable_t<float>>{}, cs, out);
                              };

/// A codec that encodes g + r_in and writes the part it did not send to r_out in the same pass.
template <class X>
concept residual_compressor =
    compressor<X> && requires(const X& x, typename X::state& s, tensor_view<const float> g, std::span<const float> r_in,
                              std::span<float> r_out, std::vector<std::byte>& bytes) {
        { x.encode_ef(g, r_in, r_out, s, bytes) } -> std::convertible_to<std::size_t>;
    };

/// PowerSGD's protocol (Vogels et al. 2019): P = M Q is summed over ranks and orthogonalised, Q = M^T P is summed,
/// and the result is P Q^T. compute_p writes p_count(state) values (with the layers sent uncompressed riding along),
/// compute_q reads their sum and writes q_count(state) values, finish_low_rank reads both sums.
template <class X>
concept low_rank_compressor = compressor<X> && requires(const X& x, typename X::state& s, const typename X::state& cs,
                                                        tensor_view<const float> in, tensor_view<float> out,
                                                        std::span<float> buffer, std::span<const float> sum) {
    { x.p_count(cs) } -> std::convertible_to<std::size_t>;
    { x.q_count(cs) } -> std::convertible_to<std::size_t>;
    x.compute_p(in, s, buffer);
    x.compute_q(sum, s, buffer);
    x.finish_low_rank(sum, sum, s, out);
};

}  // namespace hitch
