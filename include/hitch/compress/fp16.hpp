#pragma once
// compress::fp16: each gradient rounded to IEEE binary16 (round to nearest even). Halves the bytes; additive,
// since half values can be summed in transit (an all-reduce over hitch::half, as Horovod's fp16 compression does).
//
// Error bound: |x - fp16(x)| <= 2^-11 |x| for |x| >= 2^-14 (half's normal range), and <= 2^-25 below it.
// A value at or beyond 65520 would round to infinity: such a bucket is refused with non_finite_error (scale the
// gradients down, e.g. with the loss scaler, or use bf16), as is a bucket holding NaN or an infinity.
//
// Bytes on the wire: 32 + 2n. For Strom 2015's 14.6 million parameters: 29.2 MB.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/half_kernels.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/concepts/compressor.hpp"

namespace hitch::compress {

struct fp16_options {
    /// Threads one bucket's encode and decode may use (the message does not depend on it).
    parallelism parallel{};
    void validate() const { parallel.validate("hitch::compress::fp16_options"); }
};

/// Cast to IEEE half precision: 2 bytes per element, additive.
class fp16 : public detail::codec_base<fp16> {
public:
    static constexpr std::uint8_t codec_id = codec_ids::fp16;
    static constexpr std::string_view name = "fp16";
    static constexpr std::string_view who = "hitch::compress::fp16";
    static constexpr bool additive = true;
    static constexpr bool needs_error_feedback = false;
    static constexpr bool ring_compressible = false;

    using state = empty_state;
    using options = fp16_options;
    template <class T>
    using summable_t = half;

    fp16() = default;
    explicit fp16(options o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options& get_options() const noexcept { return options_; }

    [[nodiscard]] state make_state(std::size_t count) const { return {count}; }
    [[nodiscard]] static constexpr std::size_t message_bytes(std::size_t n) noexcept {
        return wire::header_bytes + 2 * n;
    }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept { return message_bytes(n); }

    std::size_t encode_floats(std::span<const float> in, state&, std::vector<std::byte>& bytes, dtype type) const {
        wire::writer w(bytes, codec_id, type, in.size(), 2 * in.size());
        std::byte* p = w.payload();
        const auto [finite, crc] = detail::convert_and_checksum(in.size(), 2, p, options_.parallel, [&](std::size_t b, std::size_t e) {
            return detail::to_half<false>(in.data() + b, nullptr, nullptr, p + 2 * b, e - b);
        });
        if (!finite) detail::throw_non_finite(who, "the bucket (or its conversion to half)");
        return w.finish_with_payload_crc(2 * in.size(), crc);
    }

    /// Error feedback: sends half(g + r_in), keeps r_out = g + r_in - half(g + r_in).
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode_ef(tensor_view<T> g, std::span<const float> r_in, std::span<float> r_out, state& s,
                          std::vector<std::byte>& bytes) const {
        detail::require_host(g, who);
        check_state_size(s, g.size());
        std::vector<float> scratch;
        const std::span<const float> in = detail::as_floats(g, scratch);
        wire::writer w(bytes, codec_id, dtype_of<std::remove_const_t<T>>(), in.size(), 2 * in.size());
        std::byte* p = w.payload();
        const auto [finite, crc] = detail::convert_and_checksum(in.size(), 2, p, options_.parallel, [&](std::size_t b, std::size_t e) {
            return detail::to_half<true>(in.data() + b, r_in.data() + b, r_out.data() + b, p + 2 * b, e - b);
        });
        if (!finite) detail::throw_non_finite(who, "the bucket plus its residual (or its conversion to half)");
        return w.finish_with_payload_crc(2 * in.size(), crc);
    }

    template <bool Add>
    void decode_floats(const wire::message_view& m, std::span<float> out) const {
        if (m.payload.size() != 2 * out.size())
            wire::corrupt(who, hitch::detail::concat("payload of ", m.payload.size(), " bytes for ", out.size(),
                                                     " half elements"));
        detail::for_chunks(out.size(), 8192, options_.parallel, [&](std::size_t b, std::size_t e) {
            detail::from_half<Add>(m.payload.data() + 2 * b, out.data() + b, e - b);
        });
    }

    // Additive form: half values, summed by the all-reduce.
    [[nodiscard]] std::size_t summable_count(const state&, std::size_t n) const noexcept { return n; }
    template <class T>
    void encode_summable(tensor_view<T> in, state& s, std::span<half> out) const {
        check_state_size(s, in.size());
        std::vector<float> scratch;
        const std::span<const float> v = detail::as_floats(in, scratch);
        bool ok = true;
        if constexpr (std::endian::native == std::endian::little) {
            ok = detail::to_half<false>(v.data(), nullptr, nullptr, reinterpret_cast<std::byte*>(out.data()),
                                        v.size());
        } else {
            for (std::size_t i = 0; i < v.size(); ++i) {
                out[i] = half(v[i]);
                ok = ok && is_finite(out[i]);
            }
        }
        if (!ok) detail::throw_non_finite(who, "the bucket (or its conversion to half)");
    }
    template <class T>
    void decode_summed(std::span<const half> sum, const state&, tensor_view<T> out) const {
        if constexpr (std::is_same_v<T, float> && std::endian::native == std::endian::little) {
            detail::from_half<false>(reinterpret_cast<const std::byte*>(sum.data()), out.data(), out.size());
        } else {
            for (std::size_t i = 0; i < out.size(); ++i) out[i] = T(static_cast<float>(sum[i]));
        }
    }

    void save_state(const state& s, std::vector<std::byte>& blob) const { detail::save_empty_state<codec_id>(s, blob); }
    void load_state(std::span<const std::byte> blob, state& s) const {
        detail::load_empty_state<codec_id>(blob, s, who);
    }

private:
    options options_{};
};

static_assert(compressor<fp16>, "compress::fp16 must model hitch::compressor");
static_assert(summable_compressor<fp16>, "compress::fp16 must model hitch::summable_compressor");
static_assert(residual_compressor<fp16>, "compress::fp16 must model hitch::residual_compressor");

}  // namespace hitch::compress
