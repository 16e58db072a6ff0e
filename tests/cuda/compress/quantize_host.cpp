// The GPU quantisers' math on the host (cuda/compress/random.hpp, quantize.hpp, onebit.hpp) against the CPU codecs,
// bit for bit: the keyed counter RNG and thinning draws, the stochastic rounding of one element, the group
// reductions, the code packers, the Elias entries and parser; then whole qsgd, terngrad and onebit messages (and
// error-feedback residuals) computed in the kernels' decomposition, on edge sizes and on NaN, infinities and
// denormals. No GPU needed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "hitch/compress/detail/bitstream.hpp"
#include "hitch/compress/detail/moments.hpp"
#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/stochastic_round.hpp"
#include "hitch/compress/detail/thinning.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/terngrad.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/cuda/compress/onebit.hpp"
#include "hitch/cuda/compress/quantize.hpp"
#include "hitch/cuda/compress/random.hpp"

namespace gpu = hitch::cuda::compress::detail;
namespace hc = hitch::compress;
namespace wire = hitch::compress::wire;

namespace {

const std::vector<std::size_t> edge_sizes = {0, 1, 31, 32, 33, (std::size_t{1} << 20) + 3};

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }

std::vector<float> gradients(std::size_t n, std::uint32_t seed, float scale = 1e-2f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    // Sparse spikes so that group norms and maxima vary, and a few exact zeros and float denormals.
    for (std::size_t i = 0; i < n; i += 997) v[i] *= 40.0f;
    for (std::size_t i = 5; i < n; i += 1999) v[i] = 0.0f;
    for (std::size_t i = 7; i < n; i += 4999) v[i] = 3e-41f;
    return v;
}

std::vector<std::byte> payload_of(const std::vector<std::byte>& message) {
    return {message.begin() + wire::header_bytes, message.end()};
}

std::size_t mismatched(const std::vector<float>& a, const std::vector<float>& b) {
    std::size_t m = a.size() == b.size() ? 0 : 1;
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) m += bits(a[i]) != bits(b[i]);
    return m;
}

/// What a GPU encode computes: its payload, its residual (error feedback), and whether it refused the bucket.
struct emulated {
    std::vector<std::byte> payload;
    std::vector<float> residual;
    bool bad = false;
};

/// Runs the host codec (encode, or encode_ef with r) and reports whether it threw non_finite_error.
template <class Codec, class State>
bool host_encode(const Codec& codec, State& s, const std::vector<float>& g, const std::vector<float>* r,
                 std::vector<float>& r_out, std::vector<std::byte>& message) {
    try {
        if (r != nullptr) {
            r_out.assign(g.size(), 0.0f);
            codec.encode_ef(hitch::tensor_view<const float>(g.data(), g.size()), std::span<const float>(*r),
                            std::span<float>(r_out), s, message);
        } else {
            codec.encode(hitch::tensor_view<const float>(g.data(), g.size()), s, message);
        }
    } catch (const hc::non_finite_error&) {
        return true;
    }
    return false;
}

}  // namespace

// ---- pieces -------------------------------------------------------------------------------------------------------

TEST_CASE("the counter RNG and the thinning draw are the CPU's", "[cuda][compress][host]") {
    std::mt19937_64 rng(1);
    for (int k = 0; k < 2000; ++k) {
        const std::uint64_t a = rng(), b = rng(), c = rng();
        REQUIRE(gpu::mix64(a) == hc::detail::mix64(a));
        REQUIRE(gpu::draw_key(a, b, c) == hc::detail::draw_key(a, b, c));
        REQUIRE(gpu::mix32(static_cast<std::uint32_t>(a)) == hc::detail::mix32(static_cast<std::uint32_t>(a)));
        const std::uint64_t block = k < 10 ? static_cast<std::uint64_t>(k) : b % 1000;
        const hc::detail::counter_rng h = hc::detail::counter_rng(a).at_block(block);
        const gpu::counter_rng d = gpu::counter_rng(a).at_block(block);
        REQUIRE(d.key0() == h.key0());
        REQUIRE(gpu::counter_rng(a).for_element(block * gpu::rng_block + 17).key0() == h.key0());
        for (std::uint32_t i : {0u, 1u, 65535u, static_cast<std::uint32_t>(c)}) REQUIRE(d.bits(i) == h.bits(i));
        const auto threshold = static_cast<std::uint32_t>(c % (1u << 24));
        for (std::uint32_t i : {0u, 1u, 2u, 65534u, 65535u, static_cast<std::uint32_t>(b % 65536)})
            REQUIRE(gpu::thin_keeps(d, i, threshold) == hc::detail::thin_keeps(h, i, threshold));
    }
    // A threshold whose 16-bit half matches a draw exercises the tie draw.
    const hc::detail::counter_rng h(42);
    const gpu::counter_rng d(42);
    for (std::uint32_t i = 0; i < 64; ++i) {
        const std::uint32_t half = (h.bits(i >> 1) >> (16 * (i & 1u))) & 0xffffu;
        for (std::uint32_t low : {0u, 1u, 64u, 127u}) {
            const std::uint32_t t = half << 7 | low;
            REQUIRE(gpu::thin_keeps(d, i, t) == hc::detail::thin_keeps(h, i, t));
        }
    }
}

namespace {

template <bool EF, bool Clip>
void check_quantize_elements(const gpu::quantizer& q, std::uint64_t key) {
    const hc::detail::quantizer hq{q.to_levels, q.unit, q.s, q.levels, q.clip};
    auto g = gradients(700, static_cast<std::uint32_t>(key), 0.5f);
    g[3] = -0.0f;
    g[4] = 1e-44f;
    g[5] = -1e30f;
    const auto r = gradients(700, static_cast<std::uint32_t>(key) + 1, 0.1f);
    std::vector<std::uint8_t> codes8(g.size());
    std::vector<std::uint16_t> codes16(g.size());
    std::vector<float> host_rest(g.size()), rest(g.size());
    const hc::detail::counter_rng rng(key);
    hc::detail::quantize_kernel<EF, Clip>(g.data(), r.data(), host_rest.data(), g.size(), 100, rng, hq, codes16.data());
    for (std::size_t i = 0; i < g.size(); ++i) {
        const std::uint32_t c =
            gpu::quantize_element<EF, Clip>(g[i], r[i], rest[i], rng.bits(100 + static_cast<std::uint32_t>(i)), q);
        REQUIRE(c == codes16[i]);
    }
    if (EF) REQUIRE(mismatched(rest, host_rest) == 0);
    (void)codes8;
}

}  // namespace

TEST_CASE("one element's stochastic rounding is the CPU kernel's", "[cuda][compress][host]") {
    for (std::uint32_t levels : {1u, 3u, 7u, 127u, 255u, 32767u}) {
        const float norm = 3.5f;
        const gpu::qsgd_group g = gpu::qsgd_setup(static_cast<double>(norm) * norm, levels);
        check_quantize_elements<false, false>(g.q, levels);
        check_quantize_elements<true, false>(g.q, levels + 1);
    }
    const gpu::quantizer tern{1.0f / 0.7f, 0.7f, 1.0f, 1, 0.25f};
    check_quantize_elements<false, true>(tern, 9);
    check_quantize_elements<true, true>(tern, 10);
    const gpu::quantizer zero{0.0f, 0.0f, 1.0f, 1, std::numeric_limits<float>::infinity()};
    check_quantize_elements<true, false>(zero, 11);
}

TEST_CASE("a block's reductions are moments_kernel's in every combination", "[cuda][compress][host]") {
    for (std::size_t len : {0u, 1u, 31u, 32u, 33u, 500u, 4096u}) {
        auto g = gradients(len, static_cast<std::uint32_t>(len), 3.0f);
        const auto r = gradients(len, static_cast<std::uint32_t>(len) + 5, 1.0f);
        hc::detail::group_moments h;
        hc::detail::moments_kernel<true, true, true, true>(g.data(), r.data(), len, h);
        const gpu::moments m = gpu::block_moments<true, true, true, true>(g.data(), r.data(), len);
        REQUIRE(std::bit_cast<std::uint64_t>(m.sum) == std::bit_cast<std::uint64_t>(h.sum));
        REQUIRE(std::bit_cast<std::uint64_t>(m.sum_squares) == std::bit_cast<std::uint64_t>(h.sum_squares));
        REQUIRE(bits(m.max_abs) == bits(h.max_abs));
        REQUIRE((m.bad == 0) == h.finite);
        if (len > 10) {
            g[9] = std::numeric_limits<float>::infinity();
            hc::detail::group_moments h2;
            hc::detail::moments_kernel<false, true, false, true>(g.data(), nullptr, len, h2);
            const gpu::moments m2 = gpu::block_moments<false, true, false, true>(g.data(), nullptr, len);
            REQUIRE((m2.bad == 0) == h2.finite);
            REQUIRE(std::bit_cast<std::uint64_t>(m2.sum_squares) == std::bit_cast<std::uint64_t>(h2.sum_squares));
        }
    }
}

TEST_CASE("code packing, reading and values are the CPU bitstream's", "[cuda][compress][host]") {
    std::mt19937 rng(4);
    for (unsigned b = 2; b <= 16; ++b) {
        const std::size_t n = 8 * 37 + 5;
        std::vector<std::uint16_t> codes(n);
        for (auto& c : codes) c = static_cast<std::uint16_t>(rng() & ((1u << b) - 1u));
        std::vector<std::byte> host(hc::detail::code_bytes(n, b)), mine(host.size());
        hc::detail::pack_codes(codes.data(), n, b, host.data());
        for (std::size_t t = 0; t * 8 < n; ++t) {
            std::uint32_t c[8] = {};
            const unsigned count = static_cast<unsigned>(std::min<std::size_t>(8, n - 8 * t));
            for (unsigned j = 0; j < count; ++j) c[j] = codes[8 * t + j];
            gpu::pack_codes8(c, count, b, reinterpret_cast<unsigned char*>(mine.data()) + b * t);
        }
        REQUIRE(mine == host);
        const auto* stream = reinterpret_cast<const unsigned char*>(host.data());
        for (std::size_t i = 0; i < n; ++i) {
            const std::size_t bit = i * b;
            const std::uint32_t expected = hc::detail::code_at(host.data(), i, b);
            REQUIRE(gpu::code_from(stream + bit / 8, bit % 8, b) == expected);
            // As the decode kernels read them: from the start of the run of eight codes.
            REQUIRE(gpu::code_from(stream + b * (i / 8), (i % 8) * b, b) == expected);
        }
    }
    for (std::uint32_t s : {1u, 7u, 127u}) {
        const unsigned b = 1u + static_cast<unsigned>(std::bit_width(s));
        const hc::detail::byte_tables tables(b, s);
        for (std::uint32_t c = 0; c < (1u << b); ++c) {
            std::byte byte{static_cast<unsigned char>(c)};
            float out = 0.0f;
            hc::detail::decode_bytes<false>(tables, &byte, 1, 0.37f, &out);
            REQUIRE(bits(gpu::code_value(c, 0.37f)) == bits(out));
            REQUIRE(gpu::code_invalid(c, s) == !tables.valid[c]);
        }
    }
}

// ---- whole messages -----------------------------------------------------------------------------------------------

namespace {

template <bool EF>
emulated emulate_qsgd(const hc::qsgd& codec, const std::vector<float>& g, const std::vector<float>& r,
                      std::uint64_t step, std::uint64_t stream) {
    const hc::qsgd_options& o = codec.options();
    const std::size_t n = g.size();
    const std::size_t size = o.group_size == 0 || o.group_size >= n ? n : o.group_size;
    const gpu::moment_plan plan = gpu::make_moment_plan(n, size);
    std::vector<gpu::moments> partials(plan.blocks);
    for (std::size_t b = 0; b < plan.blocks; ++b) {
        const std::size_t start = plan.start_of(b);
        partials[b] = gpu::block_moments<EF, true, false, false>(g.data() + start, EF ? r.data() + start : nullptr,
                                                                 plan.length_of(b));
    }
    emulated e;
    e.residual.assign(n, 0.0f);
    const std::size_t groups = plan.groups, front = 16 + 4 * groups;
    const unsigned b = codec.code_bits();
    std::vector<gpu::quantizer> q(groups);
    std::vector<std::byte> head(front);
    wire::store_le<std::uint32_t>(head.data(), o.levels);
    wire::store_le<std::uint8_t>(head.data() + 4, static_cast<std::uint8_t>(o.coding));
    wire::store_le<std::uint64_t>(head.data() + 8, size >= n ? 0 : size);
    for (std::size_t k = 0; k < groups; ++k) {
        gpu::moments total;
        for (std::size_t blk = k * plan.per_group; blk < std::min(plan.blocks, (k + 1) * plan.per_group); ++blk)
            gpu::moment_accumulate(total, partials[blk]);
        const gpu::qsgd_group grp = gpu::qsgd_setup(total.sum_squares, o.levels);
        e.bad = e.bad || !grp.finite;
        wire::store_le(head.data() + 16 + 4 * k, grp.norm);
        q[k] = grp.q;
    }
    const gpu::counter_rng base(gpu::draw_key(o.seed, stream, step));
    std::vector<std::uint32_t> codes(n);
    for (std::size_t t = 0; 8 * t < n; ++t) {
        const unsigned count = static_cast<unsigned>(std::min<std::size_t>(8, n - 8 * t));
        gpu::quantize_run<EF, false>(g.data(), EF ? r.data() : nullptr, e.residual.data(), 8 * t, count,
                                     q[8 * t / size], base, codes.data() + 8 * t);
    }
    if (o.coding == hc::qsgd_coding::fixed) {
        e.payload = head;
        e.payload.resize(front + gpu::code_bytes(n, b));
        for (std::size_t t = 0; 8 * t < n; ++t) {
            const unsigned count = static_cast<unsigned>(std::min<std::size_t>(8, n - 8 * t));
            gpu::pack_codes8(codes.data() + 8 * t, count, b,
                             reinterpret_cast<unsigned char*>(e.payload.data()) + front + b * t);
        }
        return e;
    }
    // Elias, as the scans compute it: the previous non-zero index, the entry lengths, their exclusive sums.
    std::vector<std::uint64_t> prev(n), offsets(n);
    std::uint64_t last = 0, bits_total = 0, nnz = 0;
    for (std::size_t i = 0; i < n; ++i) {
        prev[i] = last;
        offsets[i] = bits_total;
        if ((codes[i] >> 1) != 0) {
            bits_total += gpu::elias_entry_bits(i + 1 - prev[i], codes[i]);
            last = i + 1;
            ++nnz;
        }
    }
    e.payload = head;
    e.payload.resize(front + 8 + (bits_total + 7) / 8);
    wire::store_le<std::uint64_t>(e.payload.data() + front, nnz);
    auto* stream_bytes = reinterpret_cast<unsigned char*>(e.payload.data()) + front + 8;
    for (std::size_t i = 0; i < n; ++i)
        if ((codes[i] >> 1) != 0)
            gpu::elias_entry(offsets[i], i + 1 - prev[i], codes[i], [&](std::uint64_t p) {
                stream_bytes[p / 8] |= static_cast<unsigned char>(1u << (7 - p % 8));
            });
    return e;
}

void check_qsgd(const hc::qsgd_options& o, const std::vector<float>& g, std::uint64_t step, std::uint64_t stream) {
    const hc::qsgd codec(o);
    const auto r = gradients(g.size(), 77, 3e-3f);
    for (bool ef : {false, true}) {
        INFO("levels " << o.levels << " group " << o.group_size << " coding " << static_cast<int>(o.coding)
                       << " n = " << g.size() << " ef " << ef);
        auto s = codec.make_state(g.size());
        s.step = step;
        s.stream = stream;
        std::vector<std::byte> message;
        std::vector<float> host_rest;
        const bool threw = host_encode(codec, s, g, ef ? &r : nullptr, host_rest, message);
        const emulated e =
            ef ? emulate_qsgd<true>(codec, g, r, step, stream) : emulate_qsgd<false>(codec, g, r, step, stream);
        REQUIRE(e.bad == threw);
        if (threw) continue;
        REQUIRE(e.payload == payload_of(message));
        if (ef) REQUIRE(mismatched(e.residual, host_rest) == 0);
    }
}

}  // namespace

TEST_CASE("qsgd messages and residuals computed as the kernels do equal the CPU codec's", "[cuda][compress][host]") {
    for (std::size_t n : edge_sizes) {
        const auto g = gradients(n, static_cast<std::uint32_t>(n) + 100);
        for (std::size_t group : {std::size_t{0}, std::size_t{8}, std::size_t{512}, std::size_t{4096 + 24}})
            for (std::uint32_t levels : {1u, 7u, 255u}) {
                hc::qsgd_options o;
                o.levels = levels;
                o.group_size = group;
                check_qsgd(o, g, 3, 1);
                if (n <= 4096 || group == 512) {
                    o.coding = hc::qsgd_coding::elias_gamma;
                    check_qsgd(o, g, 4, 2);
                }
            }
    }
    hc::qsgd_options wide;
    wide.levels = 32767;
    check_qsgd(wide, gradients(10000, 5), 0, 0);
}

TEST_CASE("qsgd refuses NaN and infinities where the CPU codec does", "[cuda][compress][host]") {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), 3e38f}) {
        auto g = gradients(5000, 8);
        g[4321] = bad;
        hc::qsgd_options o;
        check_qsgd(o, g, 1, 0);
        o.group_size = 0;
        check_qsgd(o, g, 1, 0);
    }
}

TEST_CASE("the Elias parser reads what the CPU decoder reads and refuses what it refuses", "[cuda][compress][host]") {
    hc::qsgd_options o;
    o.coding = hc::qsgd_coding::elias_gamma;
    o.levels = 3;
    const hc::qsgd codec(o);
    const std::size_t n = 3000;
    const auto g = gradients(n, 31);
    auto s = codec.make_state(n);
    std::vector<std::byte> message;
    codec.encode(hitch::tensor_view<const float>(g.data(), n), s, message);
    const std::size_t front = 16 + 4 * ((n + 511) / 512);
    std::mt19937 rng(5);
    for (int trial = 0; trial < 400; ++trial) {
        auto m = message;
        if (trial > 0) {  // damage the stream (or its count), then seal it so the decoder reaches the stream
            const std::size_t at = wire::header_bytes + front + rng() % (m.size() - wire::header_bytes - front);
            m[at] ^= static_cast<std::byte>(1u << (rng() % 8));
            if (trial % 7 == 0) m.resize(m.size() - 1 - rng() % 3);
            wire::store_le<std::uint64_t>(m.data() + 16, m.size() - wire::header_bytes);
            wire::seal(m);
        }
        std::string host_text;
        std::vector<float> host_out(n, 0.0f);
        try {
            codec.decode(m, hitch::tensor_view<float>(host_out.data(), n));
        } catch (const hitch::corrupt_message_error& x) {
            host_text = x.what();
        }
        const std::size_t payload = m.size() - wire::header_bytes;
        if (payload < front + 8) continue;  // refused before the stream
        const std::uint64_t nnz = wire::load_le<std::uint64_t>(m.data() + wire::header_bytes + front);
        if (nnz > n) continue;  // the count's own check
        const auto* stream = reinterpret_cast<const unsigned char*>(m.data()) + wire::header_bytes + front + 8;
        std::vector<std::uint64_t> index(nnz);
        std::vector<std::uint32_t> code(nnz);
        const gpu::elias_status st =
            gpu::elias_parse(stream, payload - front - 8, nnz, n, o.levels, index.data(), code.data());
        INFO("trial " << trial);
        if (st.kind != 0) {
            REQUIRE(host_text == hitch::detail::concat(
                                     hc::qsgd::who, ": corrupt message: ", gpu::elias_failure(st, nnz, n, o.levels)));
            continue;
        }
        REQUIRE(host_text.empty());
        std::vector<float> out(n, 0.0f);
        for (std::size_t j = 0; j < nnz; ++j) {
            const std::size_t i = index[j];
            const float unit = gpu::hd::div(wire::load_le<float>(m.data() + wire::header_bytes + 16 + 4 * (i / 512)),
                                            static_cast<float>(o.levels));
            out[i] = gpu::hd::add(out[i], gpu::code_value(code[j], unit));
        }
        REQUIRE(mismatched(out, host_out) == 0);
    }
}

namespace {

template <bool EF, bool Clip>
emulated emulate_terngrad_two_pass(const hc::terngrad& codec, const std::vector<float>& g, const std::vector<float>& r,
                                   std::uint64_t step, std::uint64_t stream) {
    const std::size_t n = g.size();
    const gpu::moment_plan plan = gpu::make_moment_plan(n, n);
    gpu::moments total;
    for (std::size_t b = 0; b < plan.blocks; ++b) {
        const std::size_t start = plan.start_of(b);
        gpu::moment_accumulate(total, gpu::block_moments<EF, Clip, Clip, true>(
                                          g.data() + start, EF ? r.data() + start : nullptr, plan.length_of(b)));
    }
    emulated e;
    e.bad = total.bad != 0 || !gpu::finite(total.sum_squares) || !gpu::finite(total.sum);
    const gpu::terngrad_scalars t = gpu::terngrad_setup(total, n, Clip ? codec.options().clip_sigmas : 0.0);
    e.residual.assign(n, 0.0f);
    e.payload.assign(8 + gpu::code_bytes(n, 2), std::byte{0});
    wire::store_le(e.payload.data(), t.scale);
    const gpu::counter_rng base(gpu::draw_key(codec.options().seed, stream, step));
    for (std::size_t first = 0; first < n; first += 16) {
        const unsigned count = static_cast<unsigned>(std::min<std::size_t>(16, n - first));
        std::uint32_t c[16] = {};
        gpu::quantize_run<EF, Clip>(g.data(), EF ? r.data() : nullptr, e.residual.data(), first, count, t.q, base, c);
        for (unsigned j = 0; j < count; ++j)
            e.payload[8 + (first + j) / 4] |= static_cast<std::byte>(c[j] << (2 * ((first + j) % 4)));
    }
    return e;
}

emulated emulate_terngrad_one_pass(const hc::terngrad& codec, const std::vector<float>& g, std::uint64_t step,
                                   std::uint64_t stream) {
    const std::size_t n = g.size(), step_block = gpu::moment_block, per_segment = gpu::rng_block / step_block;
    const std::size_t blocks = (n + step_block - 1) / step_block;
    emulated e;
    std::vector<std::uint32_t> tops(blocks, 0);
    for (std::size_t i = 0; i < n; ++i) tops[i / step_block] = std::max(tops[i / step_block], bits(g[i]) & 0x7fffffffu);
    std::vector<float> running(blocks);
    for (std::size_t seg = 0; seg * per_segment < blocks; ++seg) {
        float r = 0.0f;
        for (std::size_t b = seg * per_segment; b < std::min(blocks, (seg + 1) * per_segment); ++b) {
            e.bad = e.bad || tops[b] >= 0x7f800000u;
            const float m = std::bit_cast<float>(tops[b]);
            r = m > r ? m : r;
            running[b] = r;
        }
    }
    const float scale = std::bit_cast<float>(blocks == 0 ? 0u : *std::max_element(tops.begin(), tops.end()));
    e.payload.assign(8 + gpu::code_bytes(n, 2), std::byte{0});
    wire::store_le(e.payload.data(), scale);
    const gpu::counter_rng base(gpu::draw_key(codec.options().seed, stream, step));
    const gpu::counter_rng thin(gpu::draw_key(codec.options().seed ^ 0x7417a1e5ull, stream, step));
    for (std::size_t first = 0; first < n; first += 16) {
        const unsigned count = static_cast<unsigned>(std::min<std::size_t>(16, n - first));
        const float r = running[first / step_block];
        std::uint32_t c[16] = {};
        gpu::quantize_run<false, false>(g.data(), nullptr, nullptr, first, count, gpu::terngrad_running(r), base, c);
        if (scale > 0.0f && r != scale) gpu::thin_run(c, first, count, thin, gpu::terngrad_threshold(r, scale));
        for (unsigned j = 0; j < count; ++j)
            e.payload[8 + (first + j) / 4] |= static_cast<std::byte>(c[j] << (2 * ((first + j) % 4)));
    }
    return e;
}

void check_terngrad(const hc::terngrad_options& o, const std::vector<float>& g) {
    const hc::terngrad codec(o);
    const auto r = gradients(g.size(), 78, 3e-3f);
    for (bool ef : {false, true}) {
        INFO("clip " << o.clip_sigmas << " n = " << g.size() << " ef " << ef);
        auto s = codec.make_state(g.size());
        s.step = 5;
        s.stream = 2;
        std::vector<std::byte> message;
        std::vector<float> host_rest;
        const bool threw = host_encode(codec, s, g, ef ? &r : nullptr, host_rest, message);
        const bool clip = o.clip_sigmas > 0.0;
        emulated e;
        if (ef)
            e = clip ? emulate_terngrad_two_pass<true, true>(codec, g, r, 5, 2)
                     : emulate_terngrad_two_pass<true, false>(codec, g, r, 5, 2);
        else
            e = clip ? emulate_terngrad_two_pass<false, true>(codec, g, r, 5, 2)
                     : emulate_terngrad_one_pass(codec, g, 5, 2);
        REQUIRE(e.bad == threw);
        if (threw) continue;
        REQUIRE(e.payload == payload_of(message));
        if (ef) REQUIRE(mismatched(e.residual, host_rest) == 0);
    }
}

}  // namespace

TEST_CASE("terngrad messages and residuals computed as the kernels do equal the CPU codec's",
          "[cuda][compress][host]") {
    for (std::size_t n : edge_sizes) {
        auto g = gradients(n, static_cast<std::uint32_t>(n) + 200);
        // Later segments with larger maxima make the one-pass encode thin earlier blocks.
        for (std::size_t i = 70000; i < n; i += 70000) g[i] = 0.5f * static_cast<float>(i / 70000);
        hc::terngrad_options o;
        check_terngrad(o, g);
        o.clip_sigmas = 2.5;
        check_terngrad(o, g);
    }
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
        auto g = gradients(70000, 9);
        g[66000] = bad;
        check_terngrad(hc::terngrad_options{}, g);
        hc::terngrad_options o;
        o.clip_sigmas = 1.0;
        check_terngrad(o, g);
    }
}

namespace {

template <bool EF>
emulated emulate_onebit(const hc::onebit& codec, const std::vector<float>& g, const std::vector<float>& r) {
    const std::size_t n = g.size();
    const gpu::onebit_plan plan = gpu::make_onebit_plan(n, codec.options().group_size);
    emulated e;
    e.payload.assign(8 + 8 * plan.groups + (n + 7) / 8, std::byte{0});
    wire::store_le<std::uint64_t>(e.payload.data(), plan.group_field(codec.options().group_size));
    std::byte* bits_out = e.payload.data() + 8 + 8 * plan.groups;
    std::vector<gpu::sign_sums> partials(plan.blocks);
    for (std::size_t b = 0; b < plan.blocks; ++b) {
        const std::size_t start = plan.start_of(b), len = plan.length_of(b);
        gpu::sign_lane lanes[gpu::onebit_lanes];
        gpu::sign_sums block;
        for (std::size_t o = 0; o < len; ++o) {
            const float v = EF ? gpu::hd::add(g[start + o], r[start + o]) : g[start + o];
            if (gpu::sign_add(lanes[o % gpu::onebit_lanes], v)) {
                bits_out[(start + o) / 8] |= static_cast<std::byte>(1u << ((start + o) % 8));
                ++block.negatives;
            }
        }
        for (const auto& l : lanes) {
            block.positive = gpu::hd::add(block.positive, l.positive);
            block.negative = gpu::hd::add(block.negative, l.negative);
        }
        partials[b] = block;
    }
    const std::size_t run_count = (plan.blocks + plan.run - 1) / plan.run;
    std::vector<gpu::sign_sums> runs(run_count);
    for (std::size_t k = 0; k < run_count; ++k)
        for (std::size_t b = k * plan.run; b < std::min(plan.blocks, (k + 1) * plan.run); ++b)
            gpu::sign_accumulate(runs[k], partials[b]);
    std::vector<gpu::onebit_pair> values(plan.groups);
    for (std::size_t k = 0; k < plan.groups; ++k) {
        gpu::sign_sums total;
        for (std::size_t j = 0; j < plan.runs; ++j) gpu::sign_accumulate(total, runs[k * plan.runs + j]);
        e.bad = e.bad || !gpu::onebit_finite(total);
        values[k] = gpu::onebit_values(total, std::min(plan.size, n - k * plan.size));
        wire::store_le(e.payload.data() + 8 + 8 * k, values[k].a);
        wire::store_le(e.payload.data() + 12 + 8 * k, values[k].b);
    }
    e.residual.assign(n, 0.0f);
    if (EF)
        for (std::size_t i = 0; i < n; ++i) e.residual[i] = gpu::onebit_residual(g[i], r[i], values[i / plan.size]);
    return e;
}

void check_onebit(std::size_t group, const std::vector<float>& g) {
    hc::onebit_options o;
    o.group_size = group;
    const hc::onebit codec(o);
    const auto r = gradients(g.size(), 79, 3e-3f);
    for (bool ef : {false, true}) {
        INFO("group " << group << " n = " << g.size() << " ef " << ef);
        auto s = codec.make_state(g.size());
        std::vector<std::byte> message;
        std::vector<float> host_rest;
        const bool threw = host_encode(codec, s, g, ef ? &r : nullptr, host_rest, message);
        const emulated e = ef ? emulate_onebit<true>(codec, g, r) : emulate_onebit<false>(codec, g, r);
        REQUIRE(e.bad == threw);
        if (threw) continue;
        REQUIRE(e.payload == payload_of(message));
        if (ef) REQUIRE(mismatched(e.residual, host_rest) == 0);
    }
}

}  // namespace

TEST_CASE("onebit messages and residuals computed as the kernels do equal the CPU codec's", "[cuda][compress][host]") {
    for (std::size_t n : edge_sizes) {
        const auto g = gradients(n, static_cast<std::uint32_t>(n) + 300);
        for (std::size_t group :
             {std::size_t{0}, std::size_t{8}, std::size_t{24}, std::size_t{512}, std::size_t{520}, std::size_t{70000}})
            check_onebit(group, g);
    }
    check_onebit(0, gradients(128 * 512 * 3 + 77, 3));  // several runs of 128 blocks
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        auto g = gradients(2000, 10);
        g[1500] = bad;
        check_onebit(0, g);
        check_onebit(512, g);
    }
}

namespace {

/// The parallel parse of qsgd.cuh's decode, phase by phase on the host (the kernels run each step for all chunks
/// or entries at once): chunk walks, rounds until no chunk walks again, the entry starts listed, every entry decoded
/// and checked, the first failure in the host's order.
gpu::elias_status parallel_parse(const unsigned char* s, std::size_t bytes, std::uint64_t nnz, std::uint64_t n,
                                 std::uint32_t levels, std::uint64_t chunk_bits, std::vector<std::uint64_t>& index,
                                 std::vector<std::uint32_t>& code, int& rounds) {
    const std::uint64_t chunks = gpu::elias_chunks(bytes, chunk_bits);
    std::vector<std::uint32_t> marks(chunks * chunk_bits / 32, 0xdeadbeefu);  // the kernels leave them uninitialised
    std::vector<gpu::elias_walk> now(chunks), next(chunks);
    std::vector<std::uint64_t> in(chunks);
    const auto chunk = [&](std::uint64_t c) { return gpu::elias_chunk_of(s, bytes, c, chunk_bits, marks.data()); };
    for (std::uint64_t c = 0; c < chunks; ++c) {
        in[c] = chunk(c).begin;
        now[c] = chunk(c).first_walk(in[c]);
    }
    rounds = 0;
    for (bool changed = true; changed; ++rounds) {
        changed = false;
        if (chunks != 0) next[0] = now[0];
        for (std::uint64_t c = 1; c < chunks; ++c)
            changed = gpu::elias_round(chunk(c), now[c - 1].exit, in[c], now[c], next[c]) || changed;
        std::swap(now, next);
    }
    std::vector<std::uint64_t> offset(chunks);
    std::uint64_t total = 0;
    for (std::uint64_t c = 0; c < chunks; ++c) {
        offset[c] = total;
        total += now[c].entries;
    }
    const std::uint64_t m = std::min(total, nnz);
    std::vector<std::uint64_t> starts(m);
    for (std::uint64_t c = 0; c < chunks; ++c) gpu::elias_list_starts(chunk(c), in[c], offset[c], m, starts.data());
    std::uint64_t key = total < nnz ? gpu::elias_failure_key(total, 0) : gpu::elias_none;
    std::vector<std::uint64_t> level(m);
    std::uint64_t cum = 0;
    const gpu::elias_index_sum sum{n + 1};
    for (std::uint64_t j = 0; j < m; ++j) {
        const gpu::elias_entry_fields f = gpu::elias_entry_at(s, bytes, starts[j]);
        level[j] = f.level;
        if (f.level > levels) key = std::min(key, gpu::elias_failure_key(j, 2));
        cum = sum(cum, f.gap);
        if (cum > n) key = std::min(key, gpu::elias_failure_key(j, 1));
        index[j] = cum - 1;
        code[j] = static_cast<std::uint32_t>(f.level << 1 | f.sign);
    }
    if (key != gpu::elias_none) {
        const std::uint64_t j = key / 4;
        const auto check = static_cast<std::uint32_t>(key % 4);
        return {check + 1, j, check == 2 ? level[j] : 0};
    }
    const std::uint64_t end = nnz == 0 ? 0 : gpu::elias_entry_at(s, bytes, starts[nnz - 1]).end;
    if (!gpu::elias_only_padding(s, bytes, end)) return {4, 0, 0};
    return {};
}

void check_parallel_parse(const unsigned char* s, std::size_t bytes, std::uint64_t nnz, std::uint64_t n,
                          std::uint32_t levels) {
    std::vector<std::uint64_t> index(nnz), index2(nnz);
    std::vector<std::uint32_t> code(nnz), code2(nnz);
    const gpu::elias_status want = gpu::elias_parse(s, bytes, nnz, n, levels, index.data(), code.data());
    for (std::uint64_t chunk_bits : {32u, 64u, 96u, 4096u}) {
        int rounds = 0;
        const gpu::elias_status got = parallel_parse(s, bytes, nnz, n, levels, chunk_bits, index2, code2, rounds);
        INFO("chunk bits " << chunk_bits << ", " << rounds << " rounds");
        // Round r settles chunk r at the latest (one more round sees no change).
        REQUIRE(static_cast<std::uint64_t>(rounds) <= gpu::elias_chunks(bytes, chunk_bits) + 1);
        if (std::getenv("HITCH_ELIAS_ROUNDS") != nullptr)
            std::printf("elias rounds: %d for %llu chunks of %llu bits\n", rounds,
                        static_cast<unsigned long long>(gpu::elias_chunks(bytes, chunk_bits)),
                        static_cast<unsigned long long>(chunk_bits));
        REQUIRE(got.kind == want.kind);
        REQUIRE(got.entry == want.entry);
        REQUIRE(got.level == want.level);
        if (want.kind == 0) {
            REQUIRE(index2 == index);
            REQUIRE(code2 == code);
        }
    }
}

}  // namespace

TEST_CASE("the parallel Elias parse finds what the sequential one finds", "[cuda][compress][host]") {
    std::mt19937 rng(6);
    for (std::uint32_t levels : {1u, 3u, 127u}) {
        hc::qsgd_options o;
        o.coding = hc::qsgd_coding::elias_gamma;
        o.levels = levels;
        o.group_size = 512;
        const hc::qsgd codec(o);
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{33}, std::size_t{3000}, std::size_t{70000}}) {
            const auto g = gradients(n, static_cast<std::uint32_t>(n) + levels);
            auto st = codec.make_state(n);
            std::vector<std::byte> message;
            codec.encode(hitch::tensor_view<const float>(g.data(), n), st, message);
            const std::size_t front = wire::header_bytes + 16 + 4 * ((n + 511) / 512);
            const std::uint64_t nnz = wire::load_le<std::uint64_t>(message.data() + front);
            std::vector<unsigned char> stream(message.size() - front - 8);
            std::memcpy(stream.data(), message.data() + front + 8, stream.size());
            INFO("levels " << levels << " n = " << n << " nnz = " << nnz);
            check_parallel_parse(stream.data(), stream.size(), nnz, n, levels);
            for (int trial = 0; trial < 30 && !stream.empty(); ++trial) {
                auto bad = stream;
                for (int k = 0; k <= trial % 3; ++k)
                    bad[rng() % bad.size()] ^= static_cast<unsigned char>(1u << (rng() % 8));
                if (trial % 5 == 0) bad.resize(bad.size() - 1 - rng() % std::min<std::size_t>(bad.size(), 3));
                const std::uint64_t count = trial % 7 == 0 ? nnz + 1 - (rng() % 3) : nnz;
                check_parallel_parse(bad.data(), bad.size(), count, n, levels);
            }
        }
    }
    // Random bits: walks that never meet, long zero runs, entries past the end.
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<unsigned char> junk(1 + rng() % 40);
        for (auto& b : junk) b = static_cast<unsigned char>(trial % 4 == 0 ? (rng() % 8 == 0 ? rng() : 0) : rng());
        check_parallel_parse(junk.data(), junk.size(), rng() % 30, 1 + rng() % 500,
                             static_cast<std::uint32_t>(1 + rng() % 7));
    }
}
