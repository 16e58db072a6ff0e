#pragma once
// compress::qsgd: QSGD (Alistarh, Grubic, Li, Tomioka and Vojnovic 2017, "QSGD: Communication-efficient SGD via
// gradient quantization and encoding"). Per group of d consecutive elements (the paper's "bucket size"), with
// s levels and the group's 2-norm:
//
//   Q_s(v_i) = ||v||_2 sign(v_i) xi_i(v, s) / s,   xi_i = l + 1 with probability |v_i| s / ||v|| - l, else l,
//   l = floor(|v_i| s / ||v||)
//
// an unbiased estimate (E[Q_s(v)] = v) with variance at most min(n / s^2, sqrt(n) / s) ||v||^2 (Lemma 3.1).
// Each element's error is below one level, ||v|| / s. Levels and signs are sent in fixed width
// (b = 1 + bit_width(s) bits each), or, as in the paper's Elias coding, as Elias-gamma codes of the gaps between
// non-zero levels, each followed by its sign and the gamma code of the level.
//
// Bytes on the wire, fixed coding: 32 + 16 + 4G + ceil(n b / 8), G = number of groups.
// Elias coding: 32 + 24 + 4G + ceil(sum over non-zero levels of (gamma(gap) + 1 + gamma(level)) / 8) where
// gamma(x) = 2 bit_width(x) - 1 bits and gap = index - previous non-zero index (the first from -1).
// Payload: u32 s | u8 coding | 3 zero bytes | u64 group size (0: one group) | G x f32 norms |
//          fixed: the code stream | Elias: u64 count of non-zero levels, then the bit stream.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/compress/detail/bitstream.hpp"
#include "hitch/compress/detail/codec.hpp"
#include "hitch/compress/detail/elias_gamma.hpp"
#include "hitch/compress/detail/moments.hpp"
#include "hitch/compress/detail/pack.hpp"
#include "hitch/compress/detail/parallel.hpp"
#include "hitch/compress/detail/quantize.hpp"
#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/x86/moments_avx2.hpp"
#include "hitch/compress/detail/x86/moments_avx512.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/options.hpp"

namespace hitch::compress {

enum class qsgd_coding : std::uint8_t { fixed = 0, elias_gamma = 1 };

struct qsgd_options {
    /// s: quantisation levels of a magnitude (1: a sign and one level; 7: 4-bit codes; 127: 8-bit codes).
    std::uint32_t levels = 7;
    /// d: elements per norm (0: the whole bucket); a multiple of 8. The paper uses 512 and more.
    std::size_t group_size = 512;
    qsgd_coding coding = qsgd_coding::fixed;
    /// Seeds the stochastic rounding (mixed with the state's stream, e.g. the rank, and step).
    std::uint64_t seed = 0x95d5eed;
    /// Threads one bucket's encode and decode may use (the message does not depend on it).
    parallelism parallel{};

    void validate() const {
        option_validator("hitch::compress::qsgd_options")
            .closed("levels", levels, std::uint32_t{1}, std::uint32_t{32767})
            .require(group_size % 8 == 0, "group_size", group_size, "0 or a positive multiple of 8")
            .require(coding == qsgd_coding::fixed || coding == qsgd_coding::elias_gamma, "coding",
                     static_cast<int>(coding), "{0 (fixed), 1 (elias_gamma)}");
        parallel.validate("hitch::compress::qsgd_options");
    }
};

/// QSGD: stochastic quantisation to s levels of the group norm; unbiased.
class qsgd : public detail::codec_base<qsgd> {
public:
    static constexpr std::uint8_t codec_id = codec_ids::qsgd;
    static constexpr std::string_view name = "qsgd";
    static constexpr std::string_view who = "hitch::compress::qsgd";
    static constexpr bool additive = false;
    static constexpr bool needs_error_feedback = false;
    static constexpr bool ring_compressible = true;

    using options_type = qsgd_options;
    struct state {
        std::size_t count = 0;
        std::uint64_t step = 0;    // advances the random numbers every encode
        std::uint64_t stream = 0;  // differs between ranks so their rounding is independent (the aggregation sets it)
        std::vector<std::uint8_t> codes8;    // workspace
        std::vector<std::uint16_t> codes16;  // workspace
    };

    qsgd() = default;
    explicit qsgd(options_type o) : options_(o) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] state make_state(std::size_t count) const { return {count, 0, 0, {}, {}}; }
    /// Bits per fixed-width code.
    [[nodiscard]] unsigned code_bits() const noexcept {
        return 1u + static_cast<unsigned>(std::bit_width(options_.levels));
    }
    [[nodiscard]] std::size_t groups(std::size_t n) const noexcept {
        if (n == 0) return 0;
        return options_.group_size == 0 ? 1 : detail::ceil_div(n, options_.group_size);
    }
    /// The exact size of a fixed-coding message for n elements.
    [[nodiscard]] std::size_t message_bytes(std::size_t n) const noexcept {
        return wire::header_bytes + 16 + 4 * groups(n) + detail::code_bytes(n, code_bits());
    }
    [[nodiscard]] std::size_t max_message_bytes(std::size_t n) const noexcept {
        if (options_.coding == qsgd_coding::fixed) return message_bytes(n);
        const std::size_t worst_bits =
            n * (detail::bit_writer::gamma_bits(n + 1) + 1 + detail::bit_writer::gamma_bits(options_.levels));
        return wire::header_bytes + 24 + 4 * groups(n) + (worst_bits + 7) / 8;
    }

    std::size_t encode_floats(std::span<const float> in, state& s, std::vector<std::byte>& bytes, dtype type) const {
        return encode_impl<false>(in.data(), nullptr, nullptr, in.size(), s, bytes, type);
    }

    /// Encodes v = g + r_in; r_out = v - Q(v).
    std::size_t encode_ef_floats(std::span<const float> g, std::span<const float> r_in, std::span<float> r_out,
                                 state& s, std::vector<std::byte>& bytes, dtype type) const {
        return encode_impl<true>(g.data(), r_in.data(), r_out.data(), g.size(), s, bytes, type);
    }

    template <bool Add>
    void decode_floats(const wire::message_view& m, std::span<float> out) const {
        const std::size_t n = out.size();
        wire::reader r(m.payload, who);
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
        const auto norm_bytes = r.take(4 * static_cast<std::uint64_t>(g_count), "group norms");
        std::vector<float> unit(g_count);
        for (std::size_t k = 0; k < g_count; ++k) {
            const float norm = wire::load_le<float>(norm_bytes.data() + 4 * k);
            if (!std::isfinite(norm) || norm < 0.0f)
                r.fail(hitch::detail::concat("norm of group ", k, " is ", norm, ", not a finite non-negative number"));
            unit[k] = norm / static_cast<float>(s);
        }
        if (coding == 0)
            decode_fixed<Add>(r, n, s, size, unit, out);
        else
            decode_elias<Add>(r, n, s, size, unit, out);
    }

    /// Takes back the last encode's step (the aggregation calls it when another rank failed to encode).
    void undo(state& s) const noexcept { detail::step_back(s); }

    /// Blob payload: u64 step, u64 stream.
    void save_state(const state& s, std::vector<std::byte>& blob) const {
        detail::save_counters<2>(codec_id, s.count, {s.step, s.stream}, blob);
    }
    void load_state(std::span<const std::byte> blob, state& s) const {
        const auto v = detail::load_counters<2>(blob, codec_id, s.count, who, {"step", "stream"});
        s.step = v[0];
        s.stream = v[1];
    }

private:
    template <bool EF>
    std::size_t encode_impl(const float* g, const float* r_in, float* r_out, std::size_t n, state& s,
                            std::vector<std::byte>& bytes, dtype type) const {
        const unsigned b = code_bits();
        return b <= 8 ? encode_codes<EF>(g, r_in, r_out, n, s, bytes, type, s.codes8)
                      : encode_codes<EF>(g, r_in, r_out, n, s, bytes, type, s.codes16);
    }

    template <bool EF, class Code>
    std::size_t encode_codes(const float* g, const float* r_in, float* r_out, std::size_t n, state& s,
                             std::vector<std::byte>& bytes, dtype type, std::vector<Code>& codes) const {
        const std::size_t g_count = groups(n);
        const std::size_t size = options_.group_size == 0 || options_.group_size >= n ? n : options_.group_size;
        const unsigned b = code_bits();
        const auto levels = static_cast<float>(options_.levels);
        const std::uint64_t key = detail::draw_key(options_.seed, s.stream, s.step);
        const bool fixed = options_.coding == qsgd_coding::fixed;
        const std::size_t front = 16 + 4 * g_count;  // payload bytes before the codes
        // Fixed coding streams each group's codes into the message as it goes (the group's codes stay in cache);
        // Elias coding needs every level before it knows the message's size.
        std::vector<float> norms(fixed ? 0 : g_count);
        std::byte* p = nullptr;
        std::optional<wire::writer> w;
        if (fixed) {
            w.emplace(bytes, codec_id, type, n, front + detail::code_bytes(n, b));
            p = w->payload();
        }
        if (!fixed) codes.resize(n);
        const detail::counter_rng base(key);
        const detail::isa tier = detail::best_isa();
        std::vector<unsigned char> finite(g_count, 1);
        // Whole groups per chunk (groups are independent; an element's rounding depends only on its index), each
        // chunk with one dispatch: moments, quantisation and packing of a group inlined together.
        // Fixed coding checksums each group's packed codes while they are in cache.
        const detail::chunk_plan plan = detail::plan_chunks(n, size == 0 ? 1 : size, options_.parallel);
        detail::chunk_checksums sums(plan.count);
        detail::run_chunks(plan, [&](std::size_t chunk, std::size_t lo, std::size_t hi) {
            std::vector<Code> local(fixed ? std::min(size, hi - lo) : 0);
            const auto groups_loop = [&]() HITCH_COMPRESS_INLINE_LAMBDA {
                for (std::size_t begin = lo; begin < hi; begin += size) {
                    const std::size_t k = begin / size, len = std::min(size, n - begin);
                    detail::group_moments mo;
#if HITCH_COMPRESS_X86
                    if (tier == detail::isa::avx512)
                        mo.sum_squares = detail::sum_squares_avx512<EF>(g + begin, EF ? r_in + begin : nullptr, len);
                    else if (tier == detail::isa::avx2)
                        mo.sum_squares = detail::sum_squares_avx2<EF>(g + begin, EF ? r_in + begin : nullptr, len);
                    else
#endif
                        detail::moments_kernel<EF, true, false, false>(g + begin, EF ? r_in + begin : nullptr, len, mo);
                    if (!mo.finite || !std::isfinite(mo.sum_squares)) {
                        finite[k] = 0;
                        continue;
                    }
                    const auto norm = static_cast<float>(std::sqrt(mo.sum_squares));
                    if (fixed)
                        wire::store_le(p + 16 + 4 * k, norm);
                    else
                        norms[k] = norm;
                    const detail::quantizer q{
                        norm > 0.0f ? static_cast<float>(static_cast<double>(options_.levels) / norm) : 0.0f,
                        norm / levels, levels, static_cast<std::int32_t>(options_.levels), 0.0f};
                    Code* c = fixed ? local.data() : codes.data() + begin;
                    // The floats two groups on are prefetched while this one is quantised (from cache), so the
                    // memory works while the quantiser computes.
                    const float* ahead = begin + 3 * len <= hi ? g + begin + 2 * len : nullptr;
                    detail::quantize<EF, false>(g + begin, EF ? r_in + begin : nullptr, EF ? r_out + begin : nullptr,
                                                len, begin, base, q, c, tier, ahead);
                    if (fixed) {
                        std::byte* packed = p + front + begin * b / 8;
                        detail::pack_codes(c, len, b, packed, tier);
                        sums.add(chunk, packed, detail::code_bytes(begin + len, b) - begin * b / 8);
                    }
                }
            };
            detail::run_wide(groups_loop);
        });
        if (std::find(finite.begin(), finite.end(), 0) != finite.end())
            detail::throw_non_finite(who, EF ? "the bucket plus its residual" : "the bucket");
        ++s.step;
        if (fixed) {
            write_front(p, size >= n ? 0 : size);
            return w->finish_with_payload_crc(front + detail::code_bytes(n, b),
                                              sums.combined(std::span<const std::byte>(p, front)));
        }
        // Elias: the size first, then the stream.
        std::size_t nnz = 0, bits = 0, prev = 0;  // prev: index + 1 of the previous non-zero level
        for (std::size_t i = 0; i < n; ++i) {
            const std::uint32_t level = codes[i] >> 1u;
            if (level == 0) continue;
            ++nnz;
            bits += detail::bit_writer::gamma_bits(i + 1 - prev) + 1 + detail::bit_writer::gamma_bits(level);
            prev = i + 1;
        }
        const std::size_t payload = front + 8 + (bits + 7) / 8;
        wire::writer e(bytes, codec_id, type, n, payload);
        p = e.payload();
        write_front(p, size >= n ? 0 : size);
        for (std::size_t k = 0; k < g_count; ++k) wire::store_le(p + 16 + 4 * k, norms[k]);
        wire::store_le<std::uint64_t>(p + front, nnz);
        detail::bit_writer bw(p + front + 8);
        prev = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const std::uint32_t level = codes[i] >> 1u;
            if (level == 0) continue;
            bw.gamma(i + 1 - prev);
            bw.put(codes[i] & 1u, 1);
            bw.gamma(level);
            prev = i + 1;
        }
        bw.finish();
        return e.finish(payload);
    }

    void write_front(std::byte* p, std::size_t group) const {
        wire::store_le<std::uint32_t>(p, options_.levels);
        wire::store_le<std::uint8_t>(p + 4, static_cast<std::uint8_t>(options_.coding));
        wire::store_le<std::uint8_t>(p + 5, 0);
        wire::store_le<std::uint16_t>(p + 6, 0);
        wire::store_le<std::uint64_t>(p + 8, group);
    }

    template <bool Add>
    void decode_fixed(wire::reader& r, std::size_t n, std::uint32_t s, std::size_t size, const std::vector<float>& unit,
                      std::span<float> out) const {
        const unsigned b = 1u + static_cast<unsigned>(std::bit_width(s));
        const auto stream = r.take(detail::code_bytes(n, b), "codes");
        r.expect_end();
        if (n * b % 8 != 0 && (static_cast<unsigned>(stream.back()) >> (n * b % 8)) != 0)
            r.fail("padding bits are not zero");
        if (b == 2 || b == 4 || b == 8)
            decode_bytes<Add>(r, stream.data(), n, s, b, size, unit, out);
        else if (b < 8)
            decode_codes<Add, std::uint8_t>(r, stream.data(), n, s, b, size, unit, out);
        else
            decode_codes<Add, std::uint16_t>(r, stream.data(), n, s, b, size, unit, out);
    }

    /// Checks every code (level <= s, no negative zero) before writing anything, then decodes, group by group.
    /// Codes of 2, 4 or 8 bits: checked and decoded a byte at a time through tables.
    template <bool Add>
    void decode_bytes(wire::reader& r, const std::byte* stream, std::size_t n, std::uint32_t s, unsigned b,
                      std::size_t size, const std::vector<float>& unit, std::span<float> out) const {
        const detail::byte_tables tables(b, s);
        const std::size_t bad_at = detail::first_invalid_code(tables, stream, n, b, s);
        if (bad_at != n) {
            const std::uint32_t c = detail::code_at(stream, bad_at, b);
            r.fail(hitch::detail::concat("code ", c, " of element ", bad_at, " is not a level in [0, ", s,
                                         "] with a sign"));
        }
        detail::for_chunks(n, size, options_.parallel, [&](std::size_t lo, std::size_t hi) {
            detail::run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA {
                for (std::size_t begin = lo; begin < hi; begin += size) {
                    const std::size_t len = std::min(size, n - begin);
                    detail::decode_bytes<Add>(tables, stream + begin * b / 8, len, unit[begin / size],
                                              out.data() + begin);
                }
            });
        });
    }

    template <bool Add, class Code>
    void decode_codes(wire::reader& r, const std::byte* stream, std::size_t n, std::uint32_t s, unsigned b,
                      std::size_t size, const std::vector<float>& unit, std::span<float> out) const {
        // Every code is checked (level <= s, no negative zero) before anything is written; the first bad one is
        // reported whichever chunk found it.
        const std::size_t groups = n == 0 ? 0 : detail::ceil_div(n, size);
        std::vector<std::size_t> first_bad(groups, n);
        detail::for_chunks(n, size, options_.parallel, [&](std::size_t lo, std::size_t hi) {
            std::vector<Code> codes(std::min(size, hi - lo));
            detail::run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA {
                for (std::size_t begin = lo; begin < hi; begin += size) {
                    const std::size_t len = std::min(size, n - begin);
                    detail::unpack_codes(stream + begin * b / 8, len, b, codes.data());
                    std::uint32_t bad = 0;
                    for (std::size_t i = 0; i < len; ++i)
                        bad |= static_cast<std::uint32_t>((codes[i] >> 1) > s) |
                               static_cast<std::uint32_t>(codes[i] == 1u);
                    if (bad != 0)
                        for (std::size_t i = 0; i < len; ++i)
                            if ((codes[i] >> 1) > s || codes[i] == 1u) {
                                first_bad[begin / size] = begin + i;
                                break;
                            }
                }
            });
        });
        const std::size_t bad_at = groups == 0 ? n : *std::min_element(first_bad.begin(), first_bad.end());
        if (bad_at != n) {
            const std::uint32_t c = detail::code_at(stream, bad_at, b);
            r.fail(hitch::detail::concat("code ", c, " of element ", bad_at, " is not a level in [0, ", s,
                                         "] with a sign"));
        }
        detail::for_chunks(n, size, options_.parallel, [&](std::size_t lo, std::size_t hi) {
            std::vector<Code> codes(std::min(size, hi - lo));
            detail::run_wide([&]() HITCH_COMPRESS_INLINE_LAMBDA {
                for (std::size_t begin = lo; begin < hi; begin += size) {
                    const std::size_t len = std::min(size, n - begin);
                    detail::unpack_codes(stream + begin * b / 8, len, b, codes.data());
                    const float u = unit[begin / size];
                    float* o = out.data() + begin;
                    for (std::size_t i = 0; i < len; ++i) {
                        const float mag = static_cast<float>(codes[i] >> 1) * u;
                        const float v = (codes[i] & 1u) ? -mag : mag;
                        if constexpr (Add)
                            o[i] += v;
                        else
                            o[i] = v;
                    }
                }
            });
        });
    }

    template <bool Add>
    void decode_elias(wire::reader& r, std::size_t n, std::uint32_t s, std::size_t size, const std::vector<float>& unit,
                      std::span<float> out) const {
        const std::uint64_t nnz = r.count("non-zero count", n);
        const auto stream = r.rest();
        detail::bit_reader br(stream.data(), stream.size());
        std::vector<std::uint64_t> index(static_cast<std::size_t>(nnz));
        std::vector<std::uint32_t> code(static_cast<std::size_t>(nnz));
        std::uint64_t prev = 0;  // index + 1 of the previous non-zero
        for (std::size_t j = 0; j < nnz; ++j) {
            std::uint64_t gap = 0, level = 0;
            unsigned sign = 0;
            if (!br.gamma(gap) || !br.get(sign) || !br.gamma(level))
                r.fail(hitch::detail::concat("Elias stream ends or overflows in entry ", j, " of ", nnz));
            if (gap > n || prev + gap > n)
                r.fail(hitch::detail::concat("index of entry ", j, " is outside the bucket of ", n, " elements"));
            if (level > s) r.fail(hitch::detail::concat("level ", level, " of entry ", j, " exceeds ", s));
            prev += gap;
            index[j] = prev - 1;
            code[j] = static_cast<std::uint32_t>(level << 1 | sign);
        }
        if (!br.only_padding_left()) r.fail("unexpected bits after the Elias stream");
        if constexpr (!Add) std::fill(out.begin(), out.end(), 0.0f);
        for (std::size_t j = 0; j < nnz; ++j) {
            const std::size_t i = static_cast<std::size_t>(index[j]);
            const float mag = static_cast<float>(code[j] >> 1) * unit[i / size];
            out[i] += (code[j] & 1u) ? -mag : mag;
        }
    }

    options_type options_{};
};

static_assert(compressor<qsgd>, "compress::qsgd must model hitch::compressor");
static_assert(residual_compressor<qsgd>, "compress::qsgd must model hitch::residual_compressor");

}  // namespace hitch::compress
