#pragma once
// compress::bf16: each gradient rounded to bfloat16 (the upper 16 bits of a binary32, round to nearest even).
// Halves the bytes and keeps float's exponent range, so unlike fp16 it needs no loss scaling; additive.
//
// Error bound: |x - bf16(x)| <= 2^-8 |x| for normal floats. Buckets holding NaN or an infinity (or a value that
// rounds up to infinity, beyond 3.3895e38) are refused with non_finite_error.
//
// Bytes on the wire: 32 + 2n.

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

struct bf16_options {
    /// Threads one bucket's encode and decode may use (the message does not depend on it).
    parallelism parallel{};
    void validate() const { parallel.validate("hitch::compress::bf16_options"); }
};

/// Cast to bfloat16: 2 bytes per element, additive.
class bf16 : public detail::codec_base<bf16> {
public:
    static constexpr std::uint8_t codec_id = codec_ids::bf16;
    static constexpr std::string_view name = "bf16";
    static constexpr std::string_view who = "hitch::compress::bf16";
    static constexpr bool additive = true;
    static constexpr bool needs_error_feedback = false;
    static constexpr bool ring_compressible = false;

    using state = empty_state;
    using options = bf16_options;
    template <class T>
    using summable_t = bfloat16;

    bf16() = default;
    explicit bf16(options o) : options_(o) { options_.validate(); }
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
            return detail::to_bf16<false>(in.data() + b, nullptr, nullptr, p + 2 * b, e - b);
        });
        if (!finite) detail::throw_non_finite(who, "the bucket (or its conversion to bfloat16)");
        return w.finish_with_payload_crc(2 * in.size(), crc);
    }

    /// Error feedback: sends bf16(g + r_in), keeps r_out = g + r_in - bf16(g + r_in).
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
            return detail::to_bf16<true>(in.data() + b, r_in.data() + b, r_out.data() + b, p + 2 * b, e - b);
        });
        if (!finite) detail::throw_non_finite(who, "the bucket plus its residual (or its conversion to bfloat16)");
        return w.finish_with_payload_crc(2 * in.size(), crc);
    }

    template <bool Add>
    void decode_floats(const wire::message_view& m, std::span<float> out) const {
        if (m.payload.size() != 2 * out.size())
            wire::corrupt(who, hitch::detail::concat("payload of ", m.payload.size(), " bytes for ", out.size(),
                                                     " bfloat16 elements"));
        detail::for_chunks(out.size(), 8192, options_.parallel, [&](std::size_t b, std::size_t e) {
            detail::from_bf16<Add>(m.payload.data() + 2 * b, out.data() + b, e - b);
        });
    }

    // Additive form: bfloat16 values, summed by the all-reduce.
    [[nodiscard]] std::size_t summable_count(const state&, std::size_t n) const noexcept { return n; }
    template <class T>
    void encode_summable(tensor_view<T> in, state& s, std::span<bfloat16> out) const {
        check_state_size(s, in.size());
        std::vector<float> scratch;
        const std::span<const float> v = detail::as_floats(in, scratch);
        bool ok = true;
        for (std::size_t i = 0; i < v.size(); ++i) {
            out[i] = bfloat16::from_bits(detail::bf16_bits(v[i]));
            ok = ok && is_finite(out[i]);
        }
        if (!ok) detail::throw_non_finite(who, "the bucket (or its conversion to bfloat16)");
    }
    template <class T>
    void decode_summed(std::span<const bfloat16> sum, const state&, tensor_view<T> out) const {
        for (std::size_t i = 0; i < out.size(); ++i) out[i] = T(static_cast<float>(sum[i]));
    }

    void save_state(const state& s, std::vector<std::byte>& blob) const { detail::save_empty_state<codec_id>(s, blob); }
    void load_state(std::span<const std::byte> blob, state& s) const {
        detail::load_empty_state<codec_id>(blob, s, who);
    }

private:
    options options_{};
};

static_assert(compressor<bf16>, "compress::bf16 must model hitch::compressor");
static_assert(summable_compressor<bf16>, "compress::bf16 must model hitch::summable_compressor");
static_assert(residual_compressor<bf16>, "compress::bf16 must model hitch::residual_compressor");

}  // namespace hitch::compress
