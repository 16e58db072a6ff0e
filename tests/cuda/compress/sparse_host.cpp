// The GPU sparse codecs' shared math on the host (no GPU needed): every piece the kernels run per element, per entry
// or per pass, driven here in the order the kernels use them, against the CPU codecs bit for bit. Radix selection
// with the tie rule against topk_exact; the payload writer (sizes, exclusive scan, scatter) against write_sparse and
// threshold's messages; the parallel varint reader (terminators, scan) against read_sparse on valid and damaged
// payloads; the random-k draw, sequential and batched with jumps, against random_indices; DGC's momentum, norm and
// clipping against compress::dgc.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "../../compress/helpers.hpp"
#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/sparse.hpp"
#include "hitch/compress/dgc.hpp"
#include "hitch/compress/randomk.hpp"
#include "hitch/compress/threshold.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/cuda/compress/detail/sparse.hpp"
#include "hitch/cuda/compress/detail/sparse_random.hpp"

namespace hc = hitch::compress;
namespace sp = hitch::cuda::compress::detail::sparse;
using hitch::tensor_view;

namespace {

const std::vector<std::size_t> sizes = {0, 1, 31, 32, 33, 1000, (std::size_t{1} << 20) + 3};

// ---- radix select as the kernels run it ----------------------------------------------------------------------------

struct emulated_selection {
    bool finite = true;
    std::vector<std::uint64_t> index;
};

/// The kernels' top-k: three histogram passes, the choice of bin per pass, the last tie by a scan over the ties in
/// index order, then the rule applied to every element (k >= n: everything, k == 0: nothing).
emulated_selection emulate_topk(const std::vector<float>& v, std::size_t k) {
    emulated_selection out;
    const std::size_t n = v.size();
    for (float x : v) out.finite = out.finite && !sp::non_finite_bits(sp::magnitude_bits(x));
    if (k >= n) {
        out.index.resize(n);
        std::iota(out.index.begin(), out.index.end(), std::uint64_t{0});
        return out;
    }
    if (k == 0) return out;
    sp::radix_state s;
    s.remaining = k;
    for (unsigned pass = 0; pass < sp::radix_pass_count; ++pass) {
        const sp::radix_pass p = sp::radix_pass_at(pass);
        std::vector<std::uint32_t> hist(std::size_t{1} << p.bits, 0);
        for (float x : v) {
            const std::uint32_t m = sp::magnitude_bits(x);
            if (sp::radix_matches(s, m)) ++hist[sp::radix_bin(m, p)];
        }
        if (pass == 0) {
            std::uint64_t bad = 0;
            for (std::size_t b = sp::radix_first_non_finite_bin; b < hist.size(); ++b) bad += hist[b];
            CHECK((bad != 0) == !out.finite);
        }
        sp::radix_choose(hist.data(), p, pass + 1 == sp::radix_pass_count, s);
    }
    const std::uint32_t t = s.prefix;
    // above + ties counts what the passes saw.
    std::uint64_t above = 0, ties = 0;
    for (float x : v) {
        above += sp::magnitude_bits(x) > t;
        ties += sp::magnitude_bits(x) == t;
    }
    CHECK(above == s.above);
    CHECK(ties == s.ties);
    REQUIRE(s.remaining >= 1);
    REQUIRE(s.remaining <= s.ties);
    s.last_tie = ~std::uint64_t{0};
    if (s.ties != s.remaining) {
        std::uint64_t seen = 0;
        for (std::size_t i = 0; i < n; ++i)
            if (sp::magnitude_bits(v[i]) == t && ++seen == s.remaining) s.last_tie = i;
    }
    for (std::size_t i = 0; i < n; ++i)
        if (sp::topk_selected(sp::magnitude_bits(v[i]), i, t, s.last_tie)) out.index.push_back(i);
    CHECK(out.index.size() == k);
    return out;
}

std::vector<float> with_ties(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    const float levels[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, -2.5f, 1e-40f, -1e-40f};
    std::vector<float> v(n);
    for (auto& x : v) x = levels[rng() % 8];
    return v;
}

void same_as_host_topk(const std::vector<float>& v, std::size_t k) {
    hc::detail::sparse_selection host;
    std::vector<float> scratch;
    const bool finite = hc::detail::topk_exact(v.data(), v.size(), k, host, scratch);
    const emulated_selection gpu = emulate_topk(v, k);
    INFO("n " << v.size() << " k " << k);
    REQUIRE(gpu.finite == finite);
    if (finite) CHECK(gpu.index == host.index);
}

// ---- payloads as the kernels write and read them ------------------------------------------------------------------

/// The kernels' writer: each entry's varint size, an exclusive scan, then every entry written at its offset.
template <class Code>
std::size_t emulate_varints(unsigned char* region, std::size_t count, Code code) {
    std::vector<std::uint64_t> offsets(count);
    std::uint64_t at = 0;
    for (std::size_t j = 0; j < count; ++j) {
        offsets[j] = at;
        at += sp::varint_size(code(j));
    }
    for (std::size_t j = 0; j < count; ++j) sp::put_varint(region + offsets[j], code(j));
    return static_cast<std::size_t>(at);
}

std::vector<std::byte> emulate_sparse_payload(const std::vector<std::uint64_t>& index, const std::vector<float>& v) {
    const std::size_t k = index.size();
    std::vector<unsigned char> bytes(8 + 14 * k + 1);
    sp::store_u64(bytes.data(), k);
    for (std::size_t j = 0; j < k; ++j)
        sp::store_f32(bytes.data() + sp::sparse_layout::values_at() + 4 * j, v[index[j]]);
    const std::size_t at = sp::sparse_layout::varints_at(k);
    const std::size_t varints =
        emulate_varints(bytes.data() + at, k, [&](std::size_t j) { return sp::sparse_code(index.data(), j); });
    bytes.resize(at + varints);
    std::vector<std::byte> out(bytes.size());
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
}

/// The kernels' reader of the varint region: terminator flags, their exclusive scan, each terminator's entry, each
/// entry decoded between the previous terminator and its own, the (gap + 1) scanned with saturation. Returns false
/// where a kernel flags the message corrupt; `codes` are the decoded varints.
bool emulate_read_varints(const unsigned char* region, std::size_t bytes, std::uint64_t count,
                          std::vector<std::uint64_t>& codes) {
    std::vector<std::uint64_t> rank(bytes);
    std::uint64_t terminators = 0;
    for (std::size_t b = 0; b < bytes; ++b) {
        rank[b] = terminators;
        terminators += sp::ends_varint(region[b]);
    }
    if (terminators != count || (bytes != 0 && !sp::ends_varint(region[bytes - 1]))) return false;
    std::vector<std::uint64_t> end(count);
    for (std::size_t b = 0; b < bytes; ++b)
        if (sp::ends_varint(region[b])) end[rank[b]] = b;
    codes.assign(count, 0);
    for (std::uint64_t j = 0; j < count; ++j) {
        const std::uint64_t start = j == 0 ? 0 : end[j - 1] + 1;
        if (!sp::read_varint(region + start, end[j] - start + 1, codes[j])) return false;
    }
    return true;
}

/// Indices from gaps: an inclusive saturating scan of gap + 1; every gap and the last index must be below n.
bool emulate_indices(const std::vector<std::uint64_t>& gaps, std::uint64_t n, std::vector<std::uint64_t>& index) {
    index.resize(gaps.size());
    std::uint64_t sum = 0;
    for (std::size_t j = 0; j < gaps.size(); ++j) {
        if (gaps[j] >= n) return false;
        sum = sp::saturating_add(sum, gaps[j] + 1);
        index[j] = sum - 1;
    }
    return gaps.empty() || index.back() < n;
}

/// The sparse payload reader of the GPU path: the fixed fields checked as the host checks them, then the above.
bool emulate_read_sparse(std::span<const std::byte> payload, std::size_t n, hc::detail::sparse_selection& sel) {
    if (payload.size() < 8) return false;
    const auto* p = reinterpret_cast<const unsigned char*>(payload.data());
    const std::uint64_t k = sp::load_u64(p);
    if (k > n || 4 * k > payload.size() - 8) return false;
    const std::size_t region = sp::sparse_layout::varints_at(static_cast<std::size_t>(k));
    if (k > payload.size() - region) return false;
    sel.clear();
    for (std::uint64_t j = 0; j < k; ++j) {
        const float x = sp::load_f32(p + 8 + 4 * j);
        if (sp::non_finite_bits(sp::magnitude_bits(x))) return false;
        sel.value.push_back(x);
    }
    std::vector<std::uint64_t> gaps;
    if (!emulate_read_varints(p + region, payload.size() - region, k, gaps)) return false;
    return emulate_indices(gaps, n, sel.index);
}

bool host_reads(std::span<const std::byte> payload, std::size_t n, hc::detail::sparse_selection& sel) {
    try {
        hc::detail::read_sparse(payload, n, "test", sel);
        return true;
    } catch (const hitch::corrupt_message_error&) {
        return false;
    }
}

}  // namespace

TEST_CASE("gpu top-k: radix passes, tie rule and last tie select the host's exact top-k", "[cuda][host][sparse]") {
    for (std::size_t n : sizes) {
        const auto g = hitch_test::gradients(n, 17 + n);
        const auto t = with_ties(n, 5 + n);
        for (std::size_t k : {std::size_t{1}, hc::detail::selected_count(n, 0.001), hc::detail::selected_count(n, 0.01),
                              n / 2, n > 0 ? n - 1 : 0, n}) {
            same_as_host_topk(g, k);
            same_as_host_topk(t, k);
        }
    }
    // Denormals, zeros of both signs, the largest finite values.
    std::vector<float> edge = {1e-45f, -1e-45f, 0.0f, -0.0f, 3.4028235e38f, -3.4028235e38f, 1.17549435e-38f, 1e-40f};
    for (std::size_t k = 0; k <= edge.size(); ++k) same_as_host_topk(edge, k);
    // NaN and infinities anywhere: both refuse.
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
        for (std::size_t n : {1u, 33u, 1000u}) {
            auto v = hitch_test::gradients(n, 3);
            v[n / 2] = bad;
            for (std::size_t k : {std::size_t{1}, n / 3 + 1, n}) same_as_host_topk(v, k);
        }
    }
}

TEST_CASE("radix_choose takes the bin holding the k-th largest, from the top", "[cuda][host][sparse]") {
    const sp::radix_pass p = sp::radix_pass_at(1);
    std::vector<std::uint32_t> hist(std::size_t{1} << p.bits, 0);
    hist[1023] = 3;
    hist[700] = 2;
    hist[5] = 10;
    for (std::uint64_t k = 1; k <= 15; ++k) {
        sp::radix_state s;
        s.remaining = k;
        const unsigned b = sp::radix_choose(hist.data(), p, true, s);
        const unsigned want = k <= 3 ? 1023u : (k <= 5 ? 700u : 5u);
        CHECK(b == want);
        CHECK(s.above == (want == 1023 ? 0u : (want == 700 ? 3u : 5u)));
        CHECK(s.remaining == k - s.above);
        CHECK(s.ties == hist[want]);
        CHECK(s.prefix == want << p.shift);
    }
}

TEST_CASE("gpu varints: sizes and bytes of wire::varint_size and put_varint", "[cuda][host][sparse]") {
    std::vector<std::uint64_t> values = {0, 1, 127, 128, 16383, 16384, ~std::uint64_t{0}, ~std::uint64_t{0} >> 1};
    for (unsigned b = 0; b < 64; ++b) {
        values.push_back(std::uint64_t{1} << b);
        values.push_back((std::uint64_t{1} << b) - 1);
    }
    for (std::uint64_t v : values) {
        CHECK(sp::varint_size(v) == hc::wire::varint_size(v));
        unsigned char a[10] = {};
        std::byte b[10] = {};
        const auto na = static_cast<std::size_t>(sp::put_varint(a, v) - a);
        const auto nb = static_cast<std::size_t>(hc::wire::put_varint(b, v) - b);
        REQUIRE(na == nb);
        CHECK(std::memcmp(a, b, na) == 0);
        std::uint64_t back = 0;
        CHECK(sp::read_varint(a, na, back));
        CHECK(back == v);
    }
    // Longer than 10 bytes, or a tenth byte above 1, are refused as by wire::varint_reader.
    unsigned char eleven[11] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
    std::uint64_t v = 0;
    CHECK_FALSE(sp::read_varint(eleven, 11, v));
    unsigned char over[10] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    CHECK_FALSE(sp::read_varint(over, 10, v));
    over[9] = 0x01;
    CHECK(sp::read_varint(over, 10, v));
    CHECK(v == ~std::uint64_t{0});
}

TEST_CASE("gpu sparse payload: the scan-and-scatter writer gives write_sparse's bytes", "[cuda][host][sparse]") {
    for (std::size_t n : sizes) {
        const auto v = hitch_test::gradients(n, 40 + n);
        for (double density : {0.001, 0.01, 0.3, 1.0}) {
            const std::size_t k = hc::detail::selected_count(n, density);
            hc::detail::sparse_selection sel;
            std::vector<float> scratch;
            REQUIRE(hc::detail::topk_exact(v.data(), n, k, sel, scratch));
            std::vector<std::byte> host(hc::detail::sparse_payload_bytes(sel));
            REQUIRE(hc::detail::write_sparse(host.data(), sel) == host.size());
            const auto gpu = emulate_sparse_payload(sel.index, v);
            INFO("n " << n << " k " << k);
            CHECK(gpu == host);
            // And the whole topk message's payload.
            const hc::topk codec({.density = density, .method = hc::topk_method::exact});
            auto s = codec.make_state(n);
            std::vector<std::byte> m;
            codec.encode(tensor_view<const float>(v), s, m);
            CHECK(std::equal(m.begin() + 32, m.end(), gpu.begin(), gpu.end()));
        }
    }
}

TEST_CASE("gpu threshold payload: selection by magnitude bits and sign-coded gaps give threshold's bytes",
          "[cuda][host][sparse]") {
    for (std::size_t n : sizes) {
        const auto v = hitch_test::gradients(n, 70 + n);
        for (float tau : {1e-4f, 1e-3f, 5e-3f, 1.0f}) {
            const hc::threshold codec({.tau = tau});
            auto s = codec.make_state(n);
            std::vector<std::byte> m;
            codec.encode(tensor_view<const float>(v), s, m);
            std::vector<std::uint64_t> index;
            for (std::size_t i = 0; i < n; ++i)
                if (sp::magnitude_bits(v[i]) >= sp::magnitude_bits(tau)) index.push_back(i);
            std::vector<unsigned char> p(12 + 10 * index.size());
            sp::store_u64(p.data(), index.size());
            sp::store_f32(p.data() + 8, tau);
            const std::size_t len =
                emulate_varints(p.data() + sp::threshold_layout::fixed_bytes, index.size(),
                                [&](std::size_t j) { return sp::threshold_entry_code(index.data(), v.data(), j); });
            p.resize(12 + len);
            INFO("n " << n << " tau " << tau);
            REQUIRE(m.size() == 32 + p.size());
            CHECK(std::memcmp(m.data() + 32, p.data(), p.size()) == 0);
            // The residual step of error feedback.
            for (std::size_t j = 0; j < index.size(); ++j) {
                float r = v[index[j]];
                const float want = r - (std::signbit(r) ? -tau : tau);
                CHECK(sp::threshold_residual(r, tau) == want);
            }
        }
    }
}

TEST_CASE("gpu sparse reader: accepts and refuses exactly what read_sparse does", "[cuda][host][sparse]") {
    std::mt19937_64 rng(99);
    for (std::size_t n : {1u, 31u, 33u, 1000u, 70000u}) {
        const auto v = hitch_test::gradients(n, n);
        for (double density : {0.01, 0.2, 1.0}) {
            hc::detail::sparse_selection sel;
            std::vector<float> scratch;
            REQUIRE(hc::detail::topk_exact(v.data(), n, hc::detail::selected_count(n, density), sel, scratch));
            const auto payload = emulate_sparse_payload(sel.index, v);
            hc::detail::sparse_selection a, b;
            REQUIRE(emulate_read_sparse(payload, n, a));
            CHECK(a.index == sel.index);
            CHECK(a.value == sel.value);
            // Damaged: flipped bits, truncation, padding, a count that lies, a smaller bucket.
            for (int trial = 0; trial < 300; ++trial) {
                auto bad = payload;
                switch (trial % 5) {
                    case 0:
                        bad[rng() % bad.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
                        break;
                    case 1:
                        bad.resize(rng() % bad.size());
                        break;
                    case 2:
                        bad.push_back(static_cast<std::byte>(rng() % 256));
                        break;
                    case 3:
                        hc::wire::store_le<std::uint64_t>(bad.data(), rng() % (n + 2));
                        break;
                    default: {
                        // A varint byte gains or loses its continuation bit.
                        const std::size_t at = sp::sparse_layout::varints_at(sel.size());
                        if (bad.size() > at) bad[at + rng() % (bad.size() - at)] ^= std::byte{0x80};
                    }
                }
                const std::size_t bucket = trial % 7 == 0 ? n / 2 + 1 : n;
                const bool host_ok = host_reads(bad, bucket, b);
                const bool gpu_ok = emulate_read_sparse(bad, bucket, a);
                INFO("n " << n << " trial " << trial);
                REQUIRE(gpu_ok == host_ok);
                if (host_ok) {
                    CHECK(a.index == b.index);
                    CHECK(a.value == b.value);
                }
            }
        }
    }
    // Gaps that add up past 2^64 are refused, not wrapped.
    const std::uint64_t half = std::uint64_t{1} << 63;
    std::vector<std::uint64_t> gaps = {half - 1, half - 1, 3};
    std::vector<std::uint64_t> index;
    CHECK_FALSE(emulate_indices(gaps, half, index));
    gaps = {half - 2};
    CHECK(emulate_indices(gaps, half, index));
}

TEST_CASE("gpu random: mixer, keys and xoshiro256** are the host's", "[cuda][host][random]") {
    for (std::uint64_t x : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{0xdeadbeef}, ~std::uint64_t{0}}) {
        CHECK(sp::mix64(x) == hc::detail::mix64(x));
        for (std::uint64_t step : {0u, 1u, 77u}) CHECK(sp::draw_key(x, 3, step) == hc::detail::draw_key(x, 3, step));
        hc::detail::xoshiro256ss host(x);
        auto gpu = sp::xoshiro_seed(x);
        for (int i = 0; i < 1000; ++i) REQUIRE(sp::xoshiro_next(gpu) == host());
        for (std::uint64_t bound : {1u, 2u, 3u, 1000u, 65537u})
            REQUIRE(sp::xoshiro_below(gpu, bound) == host.below(bound));
    }
}

TEST_CASE("gpu random: jumping by the GF(2) tables lands where stepping does", "[cuda][host][random]") {
    const auto tables = sp::make_jump_tables(20);
    std::mt19937_64 rng(4);
    for (int trial = 0; trial < 20; ++trial) {
        const std::uint64_t d = trial < 4 ? static_cast<std::uint64_t>(trial) : rng() % (1u << 20);
        auto stepped = sp::xoshiro_seed(rng());
        const auto jumped = sp::jump_by(tables.data(), 20, stepped, d);
        for (std::uint64_t i = 0; i < d; ++i) sp::xoshiro_advance(stepped);
        for (int w = 0; w < 4; ++w) CHECK(jumped.s[w] == stepped.s[w]);
    }
}

namespace {

/// The GPU's batched draw, run on the host: chunks of `chunk` outputs from jumped states, first occurrences by a
/// stable sort on value, a scan of the new flags, cut where the count reaches what is left.
std::vector<std::uint64_t> emulate_batched_draw(std::uint64_t key, std::size_t n, std::size_t k,
                                                const std::vector<sp::jump_matrix>& tables, std::size_t chunk) {
    const sp::draw_plan p = sp::plan_draw(n, k);
    std::vector<std::uint64_t> bitmap((n + 63) / 64, 0);
    sp::xoshiro_state base = sp::xoshiro_seed(key);
    std::uint64_t left = p.pick;
    while (left > 0) {
        const std::uint64_t outputs = sp::draw_batch_outputs(p, left);
        REQUIRE(outputs < (std::uint64_t{1} << tables.size()));
        std::vector<std::uint64_t> value(outputs);
        for (std::uint64_t c = 0; c * chunk < outputs; ++c) {
            auto x = sp::jump_by(tables.data(), static_cast<unsigned>(tables.size()), base, c * chunk);
            for (std::uint64_t t = c * chunk; t < std::min<std::uint64_t>(outputs, (c + 1) * chunk); ++t)
                value[t] = sp::accepted_value(p, sp::xoshiro_next(x));
        }
        std::vector<std::uint64_t> order(outputs);
        std::iota(order.begin(), order.end(), std::uint64_t{0});
        std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return value[a] < value[b]; });
        std::vector<unsigned char> fresh(outputs, 0);
        for (std::size_t i = 0; i < outputs; ++i) {
            const std::uint64_t val = value[order[i]];
            const bool first = i == 0 || value[order[i - 1]] != val;
            if (val < n && first && ((bitmap[val / 64] >> (val % 64)) & 1u) == 0) fresh[order[i]] = 1;
        }
        std::uint64_t taken = 0;
        for (std::uint64_t t = 0; t < outputs; ++t)
            if (fresh[t] && taken < left) {
                bitmap[value[t] / 64] |= std::uint64_t{1} << (value[t] % 64);
                ++taken;
            }
        left -= taken;
        base = sp::jump_by(tables.data(), static_cast<unsigned>(tables.size()), base, outputs);
    }
    std::vector<std::uint64_t> out(p.k);
    REQUIRE(sp::read_bitmap(p, bitmap.data(), out.data()) == p.k);
    return out;
}

}  // namespace

TEST_CASE("gpu random-k: the sequential and the batched draw give random_indices' indices", "[cuda][host][random]") {
    const auto tables = sp::make_jump_tables(24);
    for (std::size_t n : sizes) {
        for (double density : {0.001, 0.01, 0.3, 0.5, 0.51, 0.9, 1.0}) {
            const std::size_t k = hc::detail::selected_count(n, density);
            for (std::uint64_t step : {0u, 1u}) {
                const std::uint64_t key = hc::detail::draw_key(0x4a4d0c0d, 0, step);
                std::vector<std::uint64_t> host, bits;
                hc::detail::random_indices(key, n, k, host, bits);
                const sp::draw_plan p = sp::plan_draw(n, k);
                std::vector<std::uint64_t> bitmap((n + 63) / 64, 0), seq(k);
                sp::draw_bitmap(key, p, bitmap.data());
                REQUIRE(sp::read_bitmap(p, bitmap.data(), seq.data()) == k);
                INFO("n " << n << " k " << k);
                CHECK(seq == host);
                if (n < 100000 || density <= 0.01 || density == 0.9)
                    CHECK(emulate_batched_draw(key, n, k, tables, 256) == host);
            }
        }
    }
}

TEST_CASE("gpu sampling indices lie in the bucket", "[cuda][host][random]") {
    for (std::uint64_t n : {1u, 2u, 33u, 1000003u})
        for (std::uint64_t j = 0; j < 2000; ++j) REQUIRE(sp::sample_index(0x1234, j, n) < n);
}

TEST_CASE("gpu dgc: momentum correction, blocked norm and clipping factor are compress::dgc's", "[cuda][host][dgc]") {
    for (std::size_t n : sizes) {
        const auto g = hitch_test::gradients(n, 300 + n, 2e-3f);
        // The norm, lane by lane and block by block as the kernel sums it.
        constexpr std::size_t block = hc::tuning::dgc_norm_block, group = hc::tuning::dgc_norm_group;
        double total = 0.0;
        for (std::size_t g0 = 0; g0 < n; g0 += block * group) {
            double group_sum = 0.0;
            for (std::size_t b0 = g0; b0 < std::min(n, g0 + block * group); b0 += block) {
                double lanes[8];
                for (unsigned l = 0; l < 8; ++l) lanes[l] = sp::dgc_lane_sum(g.data(), n, b0, block, l);
                group_sum += sp::dgc_fold_lanes(lanes);
            }
            total += group_sum;
        }
        const double host = hc::detail::dgc_squared_norm(g.data(), n);
        CHECK(std::memcmp(&total, &host, sizeof total) == 0);
        for (double clip : {0.0, 0.001, 0.05, 10.0}) {
            const double limit = clip / std::sqrt(4.0);
            const double norm = std::sqrt(host);
            const float want = clip > 0 && norm > limit ? static_cast<float>(limit / norm) : 1.0f;
            CHECK(sp::dgc_scale(host, limit, clip > 0) == want);
        }
        // Momentum correction against a dgc encode: u and v after one step from zero state, and after two.
        for (bool nesterov : {false, true}) {
            const hc::dgc codec({.momentum = 0.9, .nesterov = nesterov, .final_density = 0.01, .clip_norm = 0.05});
            auto s = codec.make_state(n);
            std::vector<float> u(n, 0.0f), v(n, 0.0f);
            std::vector<std::byte> m;
            for (int step = 0; step < 2; ++step) {
                const auto gs = hitch_test::gradients(n, 900 + n + static_cast<std::size_t>(step), 2e-3f);
                const double nn = hc::detail::dgc_squared_norm(gs.data(), n);
                const float scale = sp::dgc_scale(nn, 0.05 / std::sqrt(1.0), true);
                for (std::size_t i = 0; i < n; ++i)
                    sp::dgc_momentum(gs[i], scale, 0.9f, nesterov, u[i], v[i], u[i], v[i]);
                codec.encode(tensor_view<const float>(gs), s, m);
                hc::detail::sparse_selection sel;
                hc::detail::read_sparse(std::span<const std::byte>(m).subspan(32), n, "test", sel);
                for (std::size_t j = 0; j < sel.size(); ++j) {
                    CHECK(sel.value[j] == v[sel.index[j]]);
                    u[sel.index[j]] = 0.0f;
                    v[sel.index[j]] = 0.0f;
                }
                INFO("n " << n << " nesterov " << nesterov << " step " << step);
                CHECK(s.u == u);
                CHECK(s.v == v);
            }
        }
    }
}

TEST_CASE("gpu non-finite checks refuse what the host codecs refuse", "[cuda][host][sparse]") {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max()}) {
        for (std::size_t n : {std::size_t{1}, std::size_t{33}, (std::size_t{1} << 20) + 3}) {
            auto v = hitch_test::gradients(n, 21);
            v[n / 3] = bad;
            const bool finite = std::isfinite(bad);
            // The collecting passes flag a magnitude above the largest finite one (threshold, top-k).
            bool flagged = false;
            for (float x : v) flagged = flagged || sp::non_finite_bits(sp::magnitude_bits(x));
            CHECK(flagged == !finite);
            const hc::threshold threshold({.tau = 1e-3f});
            auto ts = threshold.make_state(n);
            std::vector<std::byte> m;
            if (finite)
                CHECK_NOTHROW(threshold.encode(tensor_view<const float>(v), ts, m));
            else
                CHECK_THROWS_AS(threshold.encode(tensor_view<const float>(v), ts, m), hc::non_finite_error);
            // DGC's norm in the GPU's order is not finite exactly when the host's refuses the bucket.
            const double norm2 = hc::detail::dgc_squared_norm(v.data(), n);
            CHECK((norm2 <= 1.7976931348623157e308) == finite);
            const hc::dgc dgc({.final_density = 0.01});
            auto ds = dgc.make_state(n);
            if (finite)
                CHECK_NOTHROW(dgc.encode(tensor_view<const float>(v), ds, m));
            else
                CHECK_THROWS_AS(dgc.encode(tensor_view<const float>(v), ds, m), hc::non_finite_error);
        }
    }
}
