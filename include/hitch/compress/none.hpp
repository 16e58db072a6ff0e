#pragma once
// compress::none: the identity codec. The payload is the bucket's elements as they are (float stays float, double
// stays double, half and bfloat16 stay 16-bit), so it round-trips exactly and messages add in transit.
//
// Bytes on the wire: 32 + n * sizeof(T). For Strom 2015's 14.6 million float parameters: 58.4 MB.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/concepts/compressor.hpp"

namespace hitch::compress {

/// The identity codec (no compression): exact, additive.
class none {
public:
    static constexpr std::uint8_t codec_id = codec_ids::none;
    static constexpr std::string_view name = "none";
    static constexpr std::string_view who = "hitch::compress::none";
    static constexpr bool additive = true;
    static constexpr bool needs_error_feedback = false;
    static constexpr bool ring_compressible = false;

    struct options_type {
        void validate() const {}
    };
    using state = empty_state;
    template <class T>
    using summable_t = std::remove_const_t<T>;

    none() = default;
    explicit none(const options_type& o) : options_(o) {}
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] state make_state(std::size_t count) const { return {count}; }
    /// The largest message (double elements) for n elements.
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept { return wire::header_bytes + 8 * n; }
    /// The exact message size for n elements of type T.
    template <class T>
    [[nodiscard]] static constexpr std::size_t message_bytes(std::size_t n) noexcept {
        return wire::header_bytes + n * sizeof(T);
    }

    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode(tensor_view<T> in, state& s, std::vector<std::byte>& bytes) const {
        using U = std::remove_const_t<T>;
        detail::require_host(in, who);
        check_size(s, in.size());
        wire::writer w(bytes, codec_id, dtype_of<U>(), in.size(), in.size() * sizeof(U));
        write_elements(in.data(), w.payload(), in.size());
        return w.finish(in.size() * sizeof(U));
    }

    /// Sends g + r_in exactly: nothing is left over, so r_out becomes zero.
    template <class T>
        requires floating_element<std::remove_const_t<T>>
    std::size_t encode_ef(tensor_view<T> g, std::span<const float> r_in, std::span<float> r_out, state& s,
                          std::vector<std::byte>& bytes) const {
        detail::require_host(g, who);
        check_size(s, g.size());
        std::vector<float> v(g.size());
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(g[i]) + r_in[i];
        for (float x : v)
            if (!std::isfinite(x)) detail::throw_non_finite(who);
        const std::size_t size = encode(tensor_view<const float>(v.data(), v.size()), s, bytes);
        std::fill(r_out.begin(), r_out.end(), 0.0f);
        return size;
    }

    template <class T>
        requires floating_element<T>
    void decode(std::span<const std::byte> bytes, tensor_view<T> out) const {
        decode_any<false>(bytes, out);
    }
    template <class T>
        requires floating_element<T>
    void decode_add(std::span<const std::byte> bytes, tensor_view<T> acc) const {
        decode_any<true>(bytes, acc);
    }

    // Additive form: the elements themselves are summed.
    [[nodiscard]] std::size_t summable_count(const state&, std::size_t n) const noexcept { return n; }
    template <class T, class S>
    void encode_summable(tensor_view<T> in, state& s, std::span<S> out) const {
        check_size(s, in.size());
        for (std::size_t i = 0; i < in.size(); ++i) out[i] = S(in[i]);
    }
    template <class S, class T>
    void decode_summed(std::span<const S> sum, const state&, tensor_view<T> out) const {
        for (std::size_t i = 0; i < out.size(); ++i) out[i] = T(sum[i]);
    }

    void save_state(const state& s, std::vector<std::byte>& blob) const { detail::save_empty_state<codec_id>(s, blob); }
    void load_state(std::span<const std::byte> blob, state& s) const {
        detail::load_empty_state<codec_id>(blob, s, who);
    }

private:
    static void check_size(const state& s, std::size_t n) {
        if (s.count != n)
            throw config_error(hitch::detail::concat(who, ": the state was made for a bucket of ", s.count,
                                                     " elements, the bucket has ", n));
    }

    template <class U>
    static void write_elements(const U* in, std::byte* out, std::size_t n) {
        if constexpr (std::endian::native == std::endian::little) {
            if (n != 0) std::memcpy(out, in, n * sizeof(U));
        } else {
            for (std::size_t i = 0; i < n; ++i) {
                if constexpr (std::is_same_v<U, half> || std::is_same_v<U, bfloat16>)
                    wire::store_le(out + 2 * i, in[i].bits());
                else
                    wire::store_le(out + sizeof(U) * i, in[i]);
            }
        }
    }

    template <class D>
    static D element_at(const std::byte* p, std::size_t i) {
        if constexpr (std::is_same_v<D, half> || std::is_same_v<D, bfloat16>)
            return D::from_bits(wire::load_le<std::uint16_t>(p + 2 * i));
        else
            return wire::load_le<D>(p + sizeof(D) * i);
    }

    template <bool Add, class D, class T>
    static void convert(const std::byte* p, tensor_view<T> out) {
        if constexpr (!Add && std::is_same_v<D, T> && std::endian::native == std::endian::little) {
            if (!out.empty()) std::memcpy(out.data(), p, out.size() * sizeof(T));
        } else {
            using wide = std::conditional_t<std::is_same_v<D, double> || std::is_same_v<T, double>, double, float>;
            for (std::size_t i = 0; i < out.size(); ++i) {
                const wide v = static_cast<wide>(element_at<D>(p, i));
                if constexpr (Add)
                    out[i] = T(static_cast<wide>(out[i]) + v);
                else
                    out[i] = T(v);
            }
        }
    }

    template <bool Add, class T>
    void decode_any(std::span<const std::byte> bytes, tensor_view<T> out) const {
        detail::require_host(out, who);
        const wire::message_view m = wire::open(bytes, {who, codec_id});
        wire::expect_count(m, out.size(), who);
        const std::size_t width = size_of(m.head.type);
        if (m.payload.size() != out.size() * width)
            wire::corrupt(who, hitch::detail::concat("payload of ", m.payload.size(), " bytes for ", out.size(),
                                                     " elements of ", hitch::name(m.head.type)));
        const std::byte* p = m.payload.data();
        switch (m.head.type) {
            case dtype::f16:
                convert<Add, half>(p, out);
                break;
            case dtype::bf16:
                convert<Add, bfloat16>(p, out);
                break;
            case dtype::f32:
                convert<Add, float>(p, out);
                break;
            default:
                convert<Add, double>(p, out);
                break;  // open() admits only floating types
        }
    }

    options_type options_{};
};

static_assert(compressor<none>, "compress::none must model hitch::compressor");
static_assert(summable_compressor<none>, "compress::none must model hitch::summable_compressor");
static_assert(residual_compressor<none>, "compress::none must model hitch::residual_compressor");

}  // namespace hitch::compress
