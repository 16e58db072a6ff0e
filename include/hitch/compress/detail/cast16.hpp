#pragma once
// The 16-bit casts (fp16, bf16) share everything but their number format: a Format names the storage type, the
// codec's identity and the array conversions, and cast16<Format> is the codec.
//
//   struct Format {
//       using storage = hitch::half;                        // the summable element
//       static constexpr std::uint8_t codec_id; static constexpr std::string_view name, who, what;
//       template <bool EF> static bool to(const float* in, const float* r_in, float* r_out, std::byte* out, n);
//       template <bool Add> static void from(const std::byte* in, float* out, n);
//   };

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/parallel.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/core/dtype.hpp"

namespace hitch::compress {

/// Options of the 16-bit casts.
struct cast16_options {
    /// Threads one bucket's encode and decode may use (the message does not depend on it).
    parallelism parallel{};
    void validate() const { parallel.validate("hitch::compress::cast16_options"); }
};

namespace detail {

template <class Format>
class cast16 : public codec_base<cast16<Format>> {
    using base = codec_base<cast16<Format>>;

public:
    static constexpr std::uint8_t codec_id = Format::codec_id;
    static constexpr std::string_view name = Format::name;
    static constexpr std::string_view who = Format::who;
    static constexpr bool additive = true;
    static constexpr bool needs_error_feedback = false;
    static constexpr bool ring_compressible = false;

    using state = empty_state;
    using options_type = cast16_options;
    template <class T>
    using summable_t = typename Format::storage;

    cast16() = default;
    explicit cast16(options_type o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] state make_state(std::size_t count) const { return {count}; }
    [[nodiscard]] static constexpr std::size_t message_bytes(std::size_t n) noexcept {
        return wire::header_bytes + 2 * n;
    }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept { return message_bytes(n); }

    std::size_t encode_floats(std::span<const float> in, state&, std::vector<std::byte>& bytes, dtype type) const {
        return convert<false>(in, {}, {}, bytes, type);
    }
    /// Error feedback: sends cast(g + r_in), keeps r_out = g + r_in - cast(g + r_in).
    std::size_t encode_ef_floats(std::span<const float> in, std::span<const float> r_in, std::span<float> r_out, state&,
                                 std::vector<std::byte>& bytes, dtype type) const {
        return convert<true>(in, r_in, r_out, bytes, type);
    }

    template <bool Add>
    void decode_floats(const wire::message_view& m, std::span<float> out) const {
        if (m.payload.size() != 2 * out.size())
            wire::corrupt(who, hitch::detail::concat("payload of ", m.payload.size(), " bytes for ", out.size(), " ",
                                                     Format::what, " elements"));
        for_chunks(out.size(), 8192, options_.parallel, [&](std::size_t b, std::size_t e) {
            Format::template from<Add>(m.payload.data() + 2 * b, out.data() + b, e - b);
        });
    }

    // Additive form: the 16-bit values, summed by the all-reduce.
    [[nodiscard]] std::size_t summable_count(const state&, std::size_t n) const noexcept { return n; }
    template <class T>
    void encode_summable(tensor_view<T> in, state& s, std::span<typename Format::storage> out) const {
        base::check_state_size(s, in.size());
        std::vector<float> scratch;
        const std::span<const float> v = as_floats(in, scratch);
        bool ok = true;
        if constexpr (std::endian::native == std::endian::little) {
            ok = Format::template to<false>(v.data(), nullptr, nullptr, reinterpret_cast<std::byte*>(out.data()),
                                            v.size());
        } else {
            for (std::size_t i = 0; i < v.size(); ++i) {
                out[i] = typename Format::storage(v[i]);
                ok = ok && is_finite(out[i]);
            }
        }
        if (!ok) throw_non_finite(who, not_representable());
    }
    template <class T>
    void decode_summed(std::span<const typename Format::storage> sum, const state&, tensor_view<T> out) const {
        if constexpr (std::is_same_v<T, float> && std::endian::native == std::endian::little) {
            Format::template from<false>(reinterpret_cast<const std::byte*>(sum.data()), out.data(), out.size());
        } else {
            for (std::size_t i = 0; i < out.size(); ++i) out[i] = T(static_cast<float>(sum[i]));
        }
    }

    void save_state(const state& s, std::vector<std::byte>& blob) const { save_empty_state<codec_id>(s, blob); }
    void load_state(std::span<const std::byte> blob, state& s) const { load_empty_state<codec_id>(blob, s, who); }

private:
    static std::string not_representable() {
        return hitch::detail::concat("the bucket (or its conversion to ", Format::what, ")");
    }

    template <bool EF>
    std::size_t convert(std::span<const float> in, std::span<const float> r_in, std::span<float> r_out,
                        std::vector<std::byte>& bytes, dtype type) const {
        wire::writer w(bytes, codec_id, type, in.size(), 2 * in.size());
        std::byte* p = w.payload();
        const auto [finite, crc] =
            convert_and_checksum(in.size(), 2, p, options_.parallel, [&](std::size_t b, std::size_t e) {
                return Format::template to<EF>(in.data() + b, EF ? r_in.data() + b : nullptr,
                                               EF ? r_out.data() + b : nullptr, p + 2 * b, e - b);
            });
        if (!finite)
            throw_non_finite(who, EF ? "the bucket plus its residual (or its conversion)" : not_representable());
        return w.finish_with_payload_crc(2 * in.size(), crc);
    }

    options_type options_{};
};

}  // namespace detail
}  // namespace hitch::compress
